//! The request digest approvals are bound to.
//!
//! `request_digest` is the lowercase hex sha256 of a canonical JSON object: keys sorted
//! bytewise, no whitespace, serde_json's compact string escaping. It holds `"v":1`, `"tool"`,
//! `"session_id"`, `"principal"`, `"policy_version"` and every [`ToolCall`] field that is set,
//! under the field's name; `None`, empty lists and maps and `false` are left out. POLICY.md
//! states the same rules for clients in other languages.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::call::ToolCall;

/// Version of the canonical form; bumped if the field set or encoding ever changes.
pub const DIGEST_VERSION: u64 = 1;

/// The lowercase hex sha256 of the canonical form of `call` for this session, principal and
/// policy version.
pub fn request_digest(
    call: &ToolCall,
    session_id: &str,
    principal: &str,
    policy_version: &str,
) -> String {
    let json = canonical_bytes(call, session_id, principal, policy_version);
    lower_hex(&Sha256::digest(&json))
}

/// The digest of a canonical form already built by [`canonical_json`], for callers that keep
/// the text as well (the ledger stores it) and need not build it twice.
pub fn digest_of_canonical(canonical: &str) -> String {
    lower_hex(&Sha256::digest(canonical.as_bytes()))
}

/// `bytes` as lowercase hex, written through a table: this runs for every Classify and
/// Authorize, and `hex::encode`'s char-by-char collection cost more than the text it makes.
fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// The canonical JSON text whose sha256 is the digest (exposed for debugging and docs).
pub fn canonical_json(
    call: &ToolCall,
    session_id: &str,
    principal: &str,
    policy_version: &str,
) -> String {
    let bytes = canonical_bytes(call, session_id, principal, policy_version);
    // Every piece written is a JSON token or a serde_json-escaped string: valid UTF-8.
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// One field of the canonical form, borrowed from the call.
enum Field<'a> {
    Str(&'a str),
    Num(u64),
    True,
    List(&'a [String]),
    Map(&'a std::collections::BTreeMap<String, String>),
}

/// The canonical JSON written straight into bytes: called for every Classify and Authorize, so
/// it borrows the call's fields instead of building a `serde_json::Value` tree.
fn canonical_bytes(
    call: &ToolCall,
    session_id: &str,
    principal: &str,
    policy_version: &str,
) -> Vec<u8> {
    let mut fields: Vec<(&str, Field<'_>)> = Vec::with_capacity(16);
    fields.extend([
        ("v", Field::Num(DIGEST_VERSION)),
        ("tool", Field::Str(call.tool.as_str())),
        ("session_id", Field::Str(session_id)),
        ("principal", Field::Str(principal)),
        ("policy_version", Field::Str(policy_version)),
    ]);
    for (k, v) in [
        ("path", &call.path),
        ("content_sha256", &call.content_sha256),
        ("edit_old_sha256", &call.edit_old_sha256),
        ("edit_new_sha256", &call.edit_new_sha256),
        ("pattern", &call.pattern),
        ("script", &call.script),
        ("cwd", &call.cwd),
        ("stdin_sha256", &call.stdin_sha256),
        ("sandbox_profile", &call.sandbox_profile),
        ("host", &call.host),
        ("protocol", &call.protocol),
    ] {
        if let Some(v) = v {
            fields.push((k, Field::Str(v)));
        }
    }
    for (k, v) in [
        ("content_size", call.content_size),
        (
            "expected_occurrences",
            call.expected_occurrences.map(u64::from),
        ),
        ("timeout_ms", call.timeout_ms),
        ("stdout_cap_bytes", call.stdout_cap_bytes),
        ("stderr_cap_bytes", call.stderr_cap_bytes),
        ("port", call.port.map(u64::from)),
    ] {
        if let Some(v) = v {
            fields.push((k, Field::Num(v)));
        }
    }
    if call.recursive {
        fields.push(("recursive", Field::True));
    }
    if call.kill_on_cap {
        fields.push(("kill_on_cap", Field::True));
    }
    if call.background {
        fields.push(("background", Field::True));
    }
    if !call.globs.is_empty() {
        fields.push(("globs", Field::List(&call.globs)));
    }
    if let Some(argv) = &call.argv {
        fields.push(("argv", Field::List(argv)));
    }
    if !call.env.is_empty() {
        fields.push(("env", Field::Map(&call.env)));
    }
    if !call.bound_files.is_empty() {
        fields.push(("bound_files", Field::Map(&call.bound_files)));
    }
    fields.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));

    // Sized once for the usual call (no escapes): a long script is not copied as it grows.
    let mut out = Vec::with_capacity(fields.iter().map(|(k, v)| k.len() + v.text_len() + 4).sum());
    out.push(b'{');
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json_str(&mut out, k);
        out.push(b':');
        match v {
            Field::Str(s) => json_str(&mut out, s),
            Field::Num(n) => json_num(&mut out, *n),
            Field::True => out.extend_from_slice(b"true"),
            Field::List(items) => {
                out.push(b'[');
                for (j, item) in items.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    json_str(&mut out, item);
                }
                out.push(b']');
            }
            Field::Map(map) => {
                // A BTreeMap<String, _> iterates in bytewise key order already.
                out.push(b'{');
                for (j, (mk, mv)) in map.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    json_str(&mut out, mk);
                    out.push(b':');
                    json_str(&mut out, mv);
                }
                out.push(b'}');
            }
        }
    }
    out.push(b'}');
    out
}

impl Field<'_> {
    /// About how many bytes the field's value takes in the canonical text (exact when no
    /// string in it needs escaping).
    fn text_len(&self) -> usize {
        let quoted = |s: &String| s.len() + 3;
        match self {
            Field::Str(s) => s.len() + 2,
            Field::Num(_) => 20,
            Field::True => 4,
            Field::List(items) => 2 + items.iter().map(quoted).sum::<usize>(),
            Field::Map(map) => {
                2 + map
                    .iter()
                    .map(|(k, v)| quoted(k) + quoted(v))
                    .sum::<usize>()
            }
        }
    }
}

/// Appends `s` as a JSON string with serde_json's escaping. Most strings need none (no `"`,
/// `\` or control character): those are copied between quotes, which is byte for byte what
/// serde_json writes for them; the others go through serde_json itself.
fn json_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return;
    }
    // Writing a `str` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Appends `n` in decimal, without the allocation of `to_string`.
fn json_num(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut rest = n;
    loop {
        i -= 1;
        // `rest % 10` is below 10: the cast cannot truncate.
        digits[i] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Writes `v` compactly with object keys sorted bytewise, whatever map order serde_json uses.
pub(crate) fn write_value(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(k.as_str()).to_string());
                out.push(':');
                write_value(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use toolgate_core::ToolKind;

    use super::*;

    fn run_call() -> ToolCall {
        let mut env = BTreeMap::new();
        env.insert("Z".to_owned(), "1".to_owned());
        env.insert("A".to_owned(), "x\"y".to_owned());
        ToolCall {
            argv: Some(vec!["ls".to_owned(), "-la".to_owned(), "é\n".to_owned()]),
            cwd: Some("src".to_owned()),
            env,
            timeout_ms: Some(5000),
            kill_on_cap: true,
            sandbox_profile: Some("workspace-write".to_owned()),
            ..ToolCall::new(ToolKind::ProcessRun)
        }
    }

    #[test]
    fn strings_numbers_and_hex_are_written_as_serde_json_and_hex_write_them() {
        for text in [
            "",
            "git status && cargo test -p foo 2>&1 | tail -n 20",
            "caf\u{e9} \u{7f} \u{1F600}",
            "quote \" and backslash \\",
            "tab\tnewline\ncr\rnul\0bell\u{7}",
        ] {
            let mut ours = Vec::new();
            json_str(&mut ours, text);
            assert_eq!(
                ours,
                serde_json::to_vec(text).expect("a str serializes"),
                "{text:?}"
            );
        }
        for n in [0, 7, 10, 5000, u64::from(u32::MAX) + 1, u64::MAX] {
            let mut ours = Vec::new();
            json_num(&mut ours, n);
            assert_eq!(ours, n.to_string().into_bytes());
        }
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(lower_hex(&bytes), hex::encode(&bytes));
    }

    #[test]
    fn canonical_json_is_sorted_and_compact() {
        let json = canonical_json(&run_call(), "s1", "alice", "abc");
        assert_eq!(
            json,
            r#"{"argv":["ls","-la","é\n"],"cwd":"src","env":{"A":"x\"y","Z":"1"},"kill_on_cap":true,"policy_version":"abc","principal":"alice","sandbox_profile":"workspace-write","session_id":"s1","timeout_ms":5000,"tool":"process.run","v":1}"#
        );
    }

    #[test]
    fn digest_matches_an_independent_computation() {
        // Computed with python3:
        //   import json, hashlib
        //   d = {"v":1,"tool":"process.run","session_id":"s1","principal":"alice","policy_version":"abc",
        //        "argv":["ls","-la","é\n"],"cwd":"src","env":{"Z":"1","A":"x\"y"},"timeout_ms":5000,
        //        "kill_on_cap":True,"sandbox_profile":"workspace-write"}
        //   s = json.dumps(d, sort_keys=True, separators=(",",":"), ensure_ascii=False)
        //   print(hashlib.sha256(s.encode()).hexdigest())
        assert_eq!(
            request_digest(&run_call(), "s1", "alice", "abc"),
            EXPECTED_RUN
        );
        // Same for {"v":1,"tool":"fs.write","session_id":"s","principal":"p","policy_version":"v",
        //           "path":"src/a.rs","content_sha256":"00ff","content_size":3}
        let write = ToolCall {
            content_sha256: Some("00ff".to_owned()),
            content_size: Some(3),
            ..ToolCall::fs(ToolKind::FsWrite, "src/a.rs")
        };
        assert_eq!(request_digest(&write, "s", "p", "v"), EXPECTED_WRITE);
    }

    #[test]
    fn a_background_run_is_another_request_and_a_foreground_one_keeps_its_digest() {
        let mut bg = run_call();
        bg.background = true;
        let json = canonical_json(&bg, "s1", "alice", "abc");
        assert!(
            json.contains(r#""argv":["ls","-la","é\n"],"background":true,"cwd":"src""#),
            "{json}"
        );
        assert_ne!(request_digest(&bg, "s1", "alice", "abc"), EXPECTED_RUN);
        // `false` is left out: every foreground digest is what it always was.
        assert_eq!(
            request_digest(&run_call(), "s1", "alice", "abc"),
            EXPECTED_RUN
        );
    }

    const EXPECTED_RUN: &str = "361e3c7801c1948ae6d1c6ffba918c2d3eb5dc6710bb10d36fdec03297e3f90b";
    const EXPECTED_WRITE: &str = "4b3dfa412055b0fbbdd114a975a8fa1aa6bc9c4a5db632f9817bc73ce28c328a";

    #[test]
    fn ap_01_03_09_approvals_do_not_carry_over() {
        let d = |c: &ToolCall, s: &str| request_digest(c, s, "alice", "v");
        // AP-01: an approval of `rm /tmp/a` does not cover `rm -rf /tmp/a`.
        assert_ne!(
            d(&ToolCall::script("rm /tmp/a"), "A"),
            d(&ToolCall::script("rm -rf /tmp/a"), "A")
        );
        // AP-03: nor the same command in another session.
        assert_ne!(
            d(&ToolCall::script("echo ok"), "A"),
            d(&ToolCall::script("echo ok"), "B")
        );
        // AP-09: nor with a weaker sandbox.
        let mut sandboxed = ToolCall::script("ls");
        sandboxed.sandbox_profile = Some("workspace-write".to_owned());
        assert_ne!(d(&sandboxed, "A"), d(&ToolCall::script("ls"), "A"));
        // A script and the same words as an argv are different requests.
        assert_ne!(
            d(&ToolCall::script("ls"), "A"),
            d(&ToolCall::argv(["ls"]), "A")
        );
    }

    #[test]
    fn an_approved_script_rewritten_afterwards_is_a_different_request() {
        let bound = |sha: &str| {
            let mut c = ToolCall::argv(["sh", "build.sh"]);
            c.bound_files.insert("build.sh".to_owned(), sha.to_owned());
            c
        };
        let d = |c: &ToolCall| request_digest(c, "s", "p", "v");
        assert_ne!(d(&bound("aa")), d(&bound("bb")));
        assert_eq!(d(&bound("aa")), d(&bound("aa")));
        // A call that binds no file keeps the digest it had before files were bound.
        assert_eq!(
            canonical_json(&ToolCall::argv(["sh", "build.sh"]), "s", "p", "v"),
            r#"{"argv":["sh","build.sh"],"policy_version":"v","principal":"p","session_id":"s","tool":"process.run","v":1}"#
        );
        assert_eq!(
            canonical_json(&bound("aa"), "s", "p", "v"),
            r#"{"argv":["sh","build.sh"],"bound_files":{"build.sh":"aa"},"policy_version":"v","principal":"p","session_id":"s","tool":"process.run","v":1}"#
        );
    }

    #[test]
    fn the_digest_is_the_sha256_of_the_canonical_text() {
        let call = run_call();
        let text = canonical_json(&call, "s", "p", "v");
        assert_eq!(
            digest_of_canonical(&text),
            request_digest(&call, "s", "p", "v")
        );
        assert!(
            serde_json::from_str::<serde_json::Value>(&text).is_ok(),
            "{text}"
        );
    }

    #[test]
    fn every_security_field_changes_the_digest() {
        let base = run_call();
        let d = |c: &ToolCall| request_digest(c, "s1", "alice", "abc");
        let mut variants = vec![];
        let mut c = base.clone();
        c.cwd = Some("other".to_owned());
        variants.push(c);
        let mut c = base.clone();
        c.sandbox_profile = None;
        variants.push(c);
        let mut c = base.clone();
        c.env.insert("B".to_owned(), "2".to_owned());
        variants.push(c);
        let mut c = base.clone();
        c.stdin_sha256 = Some("aa".to_owned());
        variants.push(c);
        for v in &variants {
            assert_ne!(d(v), d(&base));
        }
        assert_ne!(request_digest(&base, "s2", "alice", "abc"), d(&base));
        assert_ne!(request_digest(&base, "s1", "bob", "abc"), d(&base));
        assert_ne!(request_digest(&base, "s1", "alice", "abd"), d(&base));
    }
}
