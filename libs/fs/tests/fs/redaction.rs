//! Credentials in URLs: reads, searches, hashes and edits see them redacted, and nothing the
//! API answers lets a caller recover or confirm one.

use crate::common;

use common::*;
use toolgate_core::Reason;
use toolgate_fs::*;

const GIT_CONFIG: &str = "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = https://user:ghp_SECRETtoken42@github.com/o/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n";
const GIT_CONFIG_VIEW: &str = "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = https://***@github.com/o/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n";
const DB: &str = "name: app\ndatabase_url: postgres://app:hunter2@db.internal:5432/app\npool: 5\n";

fn fixture() -> Fixture {
    let fx = Fixture::new();
    fx.write(".git/config", GIT_CONFIG);
    fx.write("config/db.yml", DB);
    fx
}

fn assert_no_secret(s: &str) {
    for secret in ["ghp_SECRET", "SECRETtoken", "hunter2", "user:"] {
        assert!(!s.contains(secret), "a credential leaked: {s}");
    }
}

fn search(fx: &Fixture, pattern: &str, context_lines: usize) -> SearchOutcome {
    let mut req = SearchRequest::new(wp("."), pattern);
    req.include_hidden = true;
    req.context_lines = context_lines;
    let o = fx.ws.search(&req).unwrap();
    assert_no_secret(&format!("{o:?}"));
    o
}

#[test]
fn reading_git_config_shows_the_remote_token_redacted() {
    let fx = fixture();
    let r = fx.ws.read(&ReadRequest::whole(wp(".git/config"))).unwrap();
    assert_eq!(
        String::from_utf8(r.content.clone()).unwrap(),
        GIT_CONFIG_VIEW
    );
    assert!(r.redacted);
    assert_eq!(r.total_size, GIT_CONFIG.len() as u64);
    // Both hashes describe what was shown: neither can confirm a guessed token.
    assert_eq!(r.sha256, Sha256::of(GIT_CONFIG_VIEW.as_bytes()));
    assert_eq!(r.file_sha256, Some(Sha256::of(GIT_CONFIG_VIEW.as_bytes())));
    let st = fx
        .ws
        .stat(&StatRequest {
            path: wp(".git/config"),
            sha256: true,
        })
        .unwrap();
    assert_eq!(st.sha256, Some(Sha256::of(GIT_CONFIG_VIEW.as_bytes())));

    let plain = fx
        .ws
        .read(&ReadRequest::whole(wp("config/db.yml")))
        .unwrap();
    assert_no_secret(&String::from_utf8_lossy(&plain.content));
    assert!(plain.redacted);
}

#[test]
fn reading_the_token_by_line_or_byte_range_shows_none_of_it() {
    let fx = fixture();
    let at = GIT_CONFIG.find("ghp_").unwrap() as u64;
    for (offset, len) in [(at, 4), (at + 4, 8), (at - 5, 30), (at + 10, 200)] {
        let r = fx
            .ws
            .read(&ReadRequest {
                path: wp(".git/config"),
                range: ReadRange::Bytes {
                    offset,
                    len: Some(len),
                },
                max_bytes: None,
            })
            .unwrap();
        assert_no_secret(&String::from_utf8_lossy(&r.content));
        assert!(r.redacted, "{offset}+{len}");
    }
    let line = fx
        .ws
        .read(&ReadRequest {
            path: wp(".git/config"),
            range: ReadRange::Lines {
                start: 4,
                count: Some(1),
            },
            max_bytes: None,
        })
        .unwrap();
    assert_eq!(line.content, b"\turl = https://***@github.com/o/r.git\n");
}

#[test]
fn a_search_pattern_cannot_probe_a_redacted_token() {
    let fx = fixture();
    for probe in ["ghp_S", "user:ghp", "hunter", r"https://[a-z]+:ghp_"] {
        assert_eq!(search(&fx, probe, 2).match_count, 0, "{probe}");
    }
    let o = search(&fx, "github.com", 1);
    assert_eq!(o.match_count, 1);
    let line = o.files[0].lines.iter().find(|l| l.is_match).unwrap();
    assert_eq!(line.text, "\turl = https://***@github.com/o/r.git");
    // The credential's line shows redacted as the context of another match too.
    let o = search(&fx, "^pool", 1);
    assert!(
        o.files[0]
            .lines
            .iter()
            .any(|l| l.text == "database_url: postgres://***@db.internal:5432/app")
    );
}

#[test]
fn guessing_a_token_through_expected_sha256_confirms_nothing() {
    let fx = fixture();
    // The right guess: the sha256 of the real bytes. It must not be accepted either.
    let guess = Sha256::of(DB.as_bytes());
    let e = assert_reason(
        fx.ws.write(&WriteRequest {
            path: wp("config/db.yml"),
            content: b"x".to_vec(),
            expected_sha256: Some(guess),
            create_new: false,
            create_parents: false,
        }),
        Reason::Conflict,
    );
    let view = redact_url_credentials(DB.as_bytes()).unwrap();
    let shown = format!("{e} {:?}", toolgate_core::ReasonedError::metadata(&e));
    assert!(shown.contains(&Sha256::of(&view).to_hex()), "{shown}");
    assert_eq!(
        std::fs::read_to_string(fx.root.join("config/db.yml")).unwrap(),
        DB
    );
}

#[test]
fn an_edit_cannot_change_or_probe_a_line_holding_a_credential() {
    let fx = fixture();
    let edit = |old: &str, new: &str| {
        fx.ws.edit(&EditRequest {
            path: wp("config/db.yml"),
            old: old.to_owned(),
            new: new.to_owned(),
            expected_occurrences: None,
            replace_all: false,
            expected_sha256: None,
        })
    };
    // Copied from the view: would write the marker over the password.
    assert_reason(
        edit("postgres://***@db.internal", "postgres://***@db2.internal"),
        Reason::EditMismatch,
    );
    // Moving the credential to another host.
    assert_reason(
        edit("db.internal", "attacker.example"),
        Reason::EditMismatch,
    );
    // A guess at the password is answered as any text the view does not hold.
    let e = assert_reason(edit("app:hunter2", "app:x"), Reason::EditMismatch);
    let wrong = assert_reason(edit("app:hunter3", "app:x"), Reason::EditMismatch);
    assert_eq!(
        e.to_string().replace("hunter2", "hunter3"),
        wrong.to_string()
    );
    assert_eq!(
        std::fs::read_to_string(fx.root.join("config/db.yml")).unwrap(),
        DB
    );

    // Other lines stay editable; the diff's context shows the credential redacted.
    let done = edit("pool: 5", "pool: 10").unwrap();
    assert_no_secret(&done.diff);
    assert!(
        done.diff.contains("postgres://***@db.internal"),
        "{}",
        done.diff
    );
    let now = std::fs::read_to_string(fx.root.join("config/db.yml")).unwrap();
    assert_eq!(now, DB.replace("pool: 5", "pool: 10"));
    let view = redact_url_credentials(now.as_bytes()).unwrap();
    assert_eq!(done.sha256, Sha256::of(&view));
}

#[test]
fn writing_back_redacted_content_cannot_destroy_the_credential() {
    let fx = fixture();
    let r = fx
        .ws
        .read(&ReadRequest::whole(wp("config/db.yml")))
        .unwrap();
    let mut content = r.content.clone();
    content.extend_from_slice(b"timeout: 3\n");
    let e = assert_reason(
        fx.ws.write(&WriteRequest {
            path: wp("config/db.yml"),
            content,
            expected_sha256: r.file_sha256,
            create_new: false,
            create_parents: false,
        }),
        Reason::InvalidRequest,
    );
    assert!(e.to_string().contains("***"), "{e}");
    assert_eq!(
        std::fs::read_to_string(fx.root.join("config/db.yml")).unwrap(),
        DB
    );
    // The marker in a new file, or one without credentials, is just text.
    fx.ws
        .write(&WriteRequest {
            path: wp("docs/example.md"),
            content: b"clone https://***@host/r\n".to_vec(),
            expected_sha256: None,
            create_new: false,
            create_parents: true,
        })
        .unwrap();
}
