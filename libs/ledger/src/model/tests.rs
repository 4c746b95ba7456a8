//! Unit tests of identifier checks and the stored spellings of states, tokens and exits.

use super::*;

#[test]
fn identifiers_reject_whitespace_and_overlong() {
    assert!(CallId::try_from("call-1").is_ok());
    assert!(CallId::try_from("").is_err());
    assert!(SessionId::try_from("a b").is_err());
    assert!(Principal::try_from("x".repeat(129)).is_err());
    assert!(Principal::try_from("user:alice@example.com").is_ok());
}

#[test]
fn states_round_trip() {
    for s in ApprovalState::ALL {
        assert_eq!(s.as_str().parse::<ApprovalState>().unwrap(), *s);
    }
}

#[test]
fn page_tokens_are_validated() {
    let t = PageToken::new(Timestamp::from_micros(5), &ApprovalId::generate());
    assert!(PageToken::try_from(t.as_str().to_owned()).is_ok());
    assert!(PageToken::try_from("junk".to_owned()).is_err());
}

#[test]
fn exit_status_round_trips() {
    for e in [
        ExitStatus::Exited(3),
        ExitStatus::Signaled(9),
        ExitStatus::TimedOut,
        ExitStatus::Ok,
    ] {
        let (k, v) = e.to_parts();
        assert_eq!(ExitStatus::from_parts(k, v).unwrap(), e);
    }
}
