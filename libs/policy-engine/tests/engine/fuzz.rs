//! The analysis must never panic, whatever the script: the policy service classifies
//! untrusted input from models.

use proptest::prelude::*;
use toolgate_core::Tier;
use toolgate_policy_engine::{CallContext, Policy, ToolCall};

const PIECES: &[&str] = &[
    "ls", "rm", "-rf", " ", "\t", "\n", "\r", "'", "\"", "\\", "$", "$(", ")", "`", "${", "}", "{",
    "(", "<(", ">(", "|", "||", "&&", ";", "&", ">", ">>", "<", "<<", "<<-", "EOF", "<<<", "2>&1",
    "&>", "*", "?", "[", "]", "~", "=", "x=", "PATH=", "$'\\x", "\\155", "if", "then", "fi", "for",
    "in", "do", "done", "case", "esac", ")", ";;", "function", "f()", "[[", "]]", "((", "))", "!",
    "#", "é", "bash -c", "eval", "env -S", "sudo", "curl", "sh", "{a,b}", "%", "@P", "!x", ":-",
    "/dev/", "..", "-C", "git",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn shellish_input_never_panics(parts in prop::collection::vec(prop::sample::select(PIECES), 0..40)) {
        let script: String = parts.concat();
        let d = Policy::builtin_default().classify(&ToolCall::script(script.as_str()), &CallContext::default());
        if script.contains("sudo") && d.tier == Tier::Auto {
            // A sudo that survives to an auto decision must be inert text (quoted or a comment).
            prop_assert!(d.commands.iter().all(|c| c.argv.first().map(String::as_str) != Some("sudo")), "{script:?}");
        }
    }

    #[test]
    fn arbitrary_input_never_panics(script in any::<String>(), argv in prop::collection::vec(any::<String>(), 0..5)) {
        let p = Policy::builtin_default();
        p.classify(&ToolCall::script(script), &CallContext::default());
        p.classify(&ToolCall::argv(argv), &CallContext::default());
    }
}
