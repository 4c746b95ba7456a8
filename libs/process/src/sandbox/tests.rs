//! Unit tests of the profiles, the mask paths and the seccomp program.

use std::path::PathBuf;

use super::bpf::ret_errno;
use super::seccomp::{CREATING, DENIED, IPPROTO_MPTCP, NS_FLAGS, SET_ID, SYS_FCHMODAT2};
use std::collections::BTreeMap;
use std::path::Path;

use super::bpf;
use super::profile::{Profile, SandboxConfig};
use super::seccomp::seccomp;
use super::view::beneath;

#[test]
fn the_shipped_profiles_validate_and_none_is_unconfined() {
    let c = SandboxConfig::default();
    c.validate().unwrap();
    assert!(c.profiles.values().all(|p| !p.unconfined));
    assert!(c.profiles.contains_key("readonly") && c.profiles.contains_key("network"));
    let bad = SandboxConfig {
        default_profile: "strict".into(),
        ..SandboxConfig::default()
    };
    assert!(bad.validate().unwrap_err().contains("strict"));
}

#[test]
fn a_shipped_profile_may_be_redefined_only_stricter() {
    let with = |name: &str, p: Profile| {
        let mut c = SandboxConfig::default();
        c.profiles.insert(name.to_owned(), p);
        c.validate()
    };
    for (name, weaker) in [
        ("workspace", Profile::unconfined()),
        ("workspace", Profile::network()),
        ("readonly", Profile::workspace()),
        // The shipped `network` allows every port to reach the gate; only no sandbox is weaker.
        ("network", Profile::unconfined()),
    ] {
        let e = with(name, weaker).unwrap_err();
        assert!(e.contains(&format!("profiles.{name}")), "{e}");
    }
    // Stricter, or other limits: fine. Any profile under a name of one's own: fine.
    with("workspace", Profile::readonly()).unwrap();
    with("network", Profile::workspace()).unwrap();
    with(
        "network",
        Profile {
            tcp_connect_ports: vec![443],
            ..Profile::network()
        },
    )
    .unwrap();
    with("build", Profile::unconfined()).unwrap();
}

#[test]
fn mask_paths_must_stay_beneath_the_workspace() {
    assert!(beneath(Path::new("/w"), Path::new("../x")).is_err());
    assert!(beneath(Path::new("/w"), Path::new("/etc")).is_err());
    assert_eq!(
        beneath(Path::new("/w"), Path::new("a/.env")).unwrap(),
        PathBuf::from("/w/a/.env")
    );
}

/// The same rules compiled by `seccompiler` (linear, three filters: EPERM, ENOSYS, then
/// EPROTONOSUPPORT for MPTCP sockets),
/// the way this crate built them before; the binary-search program must answer exactly
/// like the pair for every syscall number and a spread of arguments.
fn seccompiler_reference() -> Vec<Vec<bpf::SockFilter>> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as C,
        SeccompFilter, SeccompRule, TargetArch,
    };
    #[cfg(target_arch = "x86_64")]
    let arch = TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    let arch = TargetArch::aarch64;
    let bit = |arg, mask: u32| {
        C::new(
            arg,
            Len::Dword,
            Op::MaskedEq(u64::from(mask)),
            u64::from(mask),
        )
        .unwrap()
    };
    let any = |arg, mask: u32| -> Vec<SeccompRule> {
        (0..32)
            .map(|b| 1u32 << b)
            .filter(|b| mask & b != 0)
            .map(|b| SeccompRule::new(vec![bit(arg, b)]).unwrap())
            .collect()
    };
    let both = |flags, mode| -> Vec<SeccompRule> {
        let mut out = Vec::new();
        for c in (0..32).map(|b| 1u32 << b).filter(|b| CREATING & b != 0) {
            for m in (0..32).map(|b| 1u32 << b).filter(|b| SET_ID & b != 0) {
                out.push(SeccompRule::new(vec![bit(flags, c), bit(mode, m)]).unwrap());
            }
        }
        out
    };
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|n| (*n, Vec::new())).collect();
    deny.insert(
        libc::SYS_personality,
        vec![
            SeccompRule::new(vec![
                C::new(0, Len::Dword, Op::Ne, 0).unwrap(),
                C::new(0, Len::Dword, Op::Ne, 0xffff_ffff).unwrap(),
            ])
            .unwrap(),
        ],
    );
    deny.insert(libc::SYS_clone, any(0, NS_FLAGS));
    deny.insert(libc::SYS_fchmod, any(1, SET_ID));
    deny.insert(libc::SYS_fchmodat, any(2, SET_ID));
    deny.insert(SYS_FCHMODAT2, any(2, SET_ID));
    deny.insert(libc::SYS_mknodat, any(2, SET_ID));
    deny.insert(libc::SYS_openat, both(2, 3));
    #[cfg(target_arch = "x86_64")]
    {
        deny.insert(libc::SYS_chmod, any(1, SET_ID));
        deny.insert(libc::SYS_mknod, any(1, SET_ID));
        deny.insert(libc::SYS_creat, any(1, SET_ID));
        deny.insert(libc::SYS_open, both(1, 2));
    }
    let unknown: BTreeMap<i64, Vec<SeccompRule>> = [libc::SYS_clone3, libc::SYS_openat2]
        .into_iter()
        .map(|n| (n, Vec::new()))
        .collect();
    let mptcp: BTreeMap<i64, Vec<SeccompRule>> = [(
        libc::SYS_socket,
        vec![
            SeccompRule::new(vec![
                C::new(2, Len::Dword, Op::Eq, u64::from(IPPROTO_MPTCP)).unwrap(),
            ])
            .unwrap(),
        ],
    )]
    .into_iter()
    .collect();
    [
        (deny, libc::EPERM),
        (unknown, libc::ENOSYS),
        (mptcp, libc::EPROTONOSUPPORT),
    ]
    .into_iter()
    .map(|(rules, errno)| {
        let f = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .unwrap();
        let prog: seccompiler::BpfProgram = f.try_into().unwrap();
        prog.iter()
            .map(|i| bpf::SockFilter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect()
    })
    .collect()
}

#[test]
fn the_seccomp_program_answers_like_seccompiler_for_every_syscall() {
    let ours = &seccomp()[0].0;
    let reference = seccompiler_reference();
    let arches = [bpf::NATIVE.audit, 0xc000_00b7, 0x4000_0003];
    let args: Vec<[u64; 6]> = vec![
        [0; 6],
        [u64::MAX; 6],
        [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0],
        [libc::SIGCHLD as u64 | libc::CLONE_VM as u64, 0, 0, 0, 0, 0],
        [0x80, 0, 0, 0, 0, 0],
        [0, 0o4755, 0o4755, 0o4755, 0, 0],
        [0, 0o2755, 0o2755, 0o2755, 0, 0],
        [0, 0o755, 0o755, 0o755, 0, 0],
        [0, libc::O_CREAT as u64, libc::O_CREAT as u64, 0o4755, 0, 0],
        [
            0,
            libc::O_CREAT as u64 | 0o4000,
            libc::O_WRONLY as u64,
            0o6755,
            0,
            0,
        ],
        [
            0,
            libc::O_TMPFILE as u64,
            libc::O_TMPFILE as u64,
            0o2700,
            0,
            0,
        ],
        [0xffff_ffff, 0, 0, 0, 0, 0],
        [8, 0, 0, 0, 0, 0],
        [0x0040_0000, 0, 0, 0, 0, 0],
        [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 262, 0, 0, 0],
        [
            libc::AF_INET6 as u64,
            libc::SOCK_STREAM as u64,
            262,
            0,
            0,
            0,
        ],
        [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 6, 0, 0, 0],
    ];
    let mut checked = 0;
    for arch in arches {
        for nr in (0..520).chain([0x4000_0000, 0x4000_0001, u32::MAX]) {
            for a in &args {
                let got = bpf::run(ours, arch, nr, *a);
                // Several filters: the kernel keeps the most restrictive answer; these deny
                // disjoint calls, so that is the first that does not allow.
                let want = reference
                    .iter()
                    .map(|r| bpf::run(r, arch, nr, *a))
                    .find(|&r| r != bpf::RET_ALLOW)
                    .unwrap_or(bpf::RET_ALLOW);
                if arch != bpf::NATIVE.audit || (bpf::NATIVE.x32_bit.is_some() && nr >= 0x4000_0000)
                {
                    assert_eq!(got, bpf::RET_KILL_PROCESS, "arch {arch:#x} nr {nr:#x}");
                    continue;
                }
                assert_eq!(got, want, "nr {nr} args {a:?}");
                checked += 1;
            }
        }
    }
    assert!(checked > 7000);
    // The point of the exercise: far fewer instructions on the path of a syscall that is
    // not in the list, which is what the kernel emulates for every number at install.
    let steps = |prog: &[bpf::SockFilter]| prog.len();
    assert!(
        steps(ours) < steps(&reference[0]),
        "{} vs {}",
        steps(ours),
        steps(&reference[0])
    );
    // The kernel converts and JIT-compiles the whole program at every run start, and the
    // compiler's direct jumps reach at most 255 instructions ahead.
    eprintln!("seccomp program: {} instructions", ours.len());
    assert!(ours.len() <= 128, "{} instructions", ours.len());
}

#[test]
fn the_seccomp_program_denies_what_the_escape_suite_tries() {
    let p = &seccomp()[0].0;
    let run = |nr: libc::c_long, a: [u64; 6]| bpf::run(p, bpf::NATIVE.audit, nr as u32, a);
    let eperm = ret_errno(libc::EPERM);
    assert_eq!(run(libc::SYS_ptrace, [0; 6]), eperm);
    assert_eq!(
        run(
            libc::SYS_unshare,
            [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0]
        ),
        eperm
    );
    assert_eq!(
        run(libc::SYS_clone, [libc::CLONE_NEWNS as u64, 0, 0, 0, 0, 0]),
        eperm
    );
    assert_eq!(
        run(libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]),
        bpf::RET_ALLOW
    );
    assert_eq!(run(libc::SYS_fchmodat, [0, 0, 0o4755, 0, 0, 0]), eperm);
    assert_eq!(
        run(libc::SYS_fchmodat, [0, 0, 0o755, 0, 0, 0]),
        bpf::RET_ALLOW
    );
    assert_eq!(
        run(libc::SYS_openat, [0, 0, libc::O_CREAT as u64, 0o2755, 0, 0]),
        eperm
    );
    assert_eq!(
        run(
            libc::SYS_openat,
            [0, 0, libc::O_RDONLY as u64, 0o4755, 0, 0]
        ),
        bpf::RET_ALLOW
    );
    assert_eq!(run(libc::SYS_clone3, [0; 6]), ret_errno(libc::ENOSYS));
    assert_eq!(run(libc::SYS_read, [0; 6]), bpf::RET_ALLOW);
    let stream = libc::SOCK_STREAM as u64;
    for family in [libc::AF_INET, libc::AF_INET6] {
        assert_eq!(
            run(libc::SYS_socket, [family as u64, stream, 262, 0, 0, 0]),
            ret_errno(libc::EPROTONOSUPPORT),
            "MPTCP"
        );
        assert_eq!(
            run(libc::SYS_socket, [family as u64, stream, 0, 0, 0, 0]),
            bpf::RET_ALLOW,
            "TCP"
        );
    }
    assert_eq!(
        run(libc::SYS_personality, [0xffff_ffff, 0, 0, 0, 0, 0]),
        bpf::RET_ALLOW
    );
    assert_eq!(
        run(libc::SYS_personality, [0x0040_0000, 0, 0, 0, 0, 0]),
        eperm
    );
}

/// The number spelled out for targets whose libc lacks it is the one libc gives where it has it.
#[cfg(target_arch = "x86_64")]
#[test]
fn fchmodat2_is_numbered_as_libc_numbers_it() {
    assert_eq!(SYS_FCHMODAT2, libc::SYS_fchmodat2);
}
