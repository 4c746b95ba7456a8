//! The seccomp filter every sandboxed run installs: the rules, compiled by `bpf`.

use super::bpf::{self, Action, Cond, ret_errno};
use crate::sys::sandbox::Bpf;

/// `fchmodat2` (Linux 6.6). Every architecture numbers the syscalls added since 424 alike,
/// but libc names this one only on some targets (not aarch64), so it is spelled out here.
pub(super) const SYS_FCHMODAT2: libc::c_long = 452;

/// The syscalls a sandboxed run may never make; each group says why. `ARCHITECTURE.md` and the
/// README have the same list.
pub(super) const DENIED: &[libc::c_long] = &[
    // Reading or steering another process's memory.
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    // Changing the view: mounts, old and new API, and pivoting the root.
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    // New namespaces (a nested user namespace would regain capabilities there) and joining
    // other ones.
    libc::SYS_unshare,
    libc::SYS_setns,
    // The kernel keyring is not namespaced.
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    // Large kernel attack surface that no build or test needs.
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // Whole-machine operations.
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    // File handles bypass path-based confinement.
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
];

/// Namespace flags of clone(2), including `CLONE_NEWTIME`.
pub(super) const NS_FLAGS: u32 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP
    | 0x80) as u32;
/// `IPPROTO_MPTCP`: multipath TCP, refused so programs fall back to plain TCP, which the
/// gated namespace redirects to the egress gate (MPTCP subflows are not what the gate reads).
pub(super) const IPPROTO_MPTCP: u32 = 262;
/// The set-id mode bits.
pub(super) const SET_ID: u32 = libc::S_ISUID | libc::S_ISGID;
/// Flags of open(2) that create a file: `O_CREAT`, and `__O_TMPFILE` (`O_TMPFILE` without its
/// `O_DIRECTORY` part).
pub(super) const CREATING: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;

/// What every sandboxed run's seccomp filter does, by syscall number.
fn seccomp_rules() -> Vec<(u32, Action)> {
    let eperm = ret_errno(libc::EPERM);
    let nr = |n: libc::c_long| n as u32;
    let mut rules: Vec<(u32, Action)> = DENIED
        .iter()
        .map(|n| (nr(*n), Action::Always(eperm)))
        .collect();
    let when = |conds: Vec<Cond>| Action::When {
        rules: vec![conds],
        ret: eperm,
    };
    let setid = |arg| Cond::AnyBit { arg, mask: SET_ID };
    let creating = |arg| Cond::AnyBit {
        arg,
        mask: CREATING,
    };
    // Execution domains other than plain Linux (0; 0xffffffff only queries) change the
    // address-space layout and syscall semantics.
    rules.push((
        nr(libc::SYS_personality),
        when(vec![Cond::NoneOf {
            arg: 0,
            values: vec![0, 0xffff_ffff],
        }]),
    ));
    // clone with a namespace flag: the same reason as unshare.
    rules.push((
        nr(libc::SYS_clone),
        when(vec![Cond::AnyBit {
            arg: 0,
            mask: NS_FLAGS,
        }]),
    ));
    // Set-id mode bits: a run must not leave a set-uid or set-gid file for the host (a
    // set-uid copy of a shell owned by the executor's user hands that user to whoever runs it).
    rules.push((nr(libc::SYS_fchmod), when(vec![setid(1)])));
    rules.push((nr(libc::SYS_fchmodat), when(vec![setid(2)])));
    rules.push((nr(SYS_FCHMODAT2), when(vec![setid(2)])));
    rules.push((nr(libc::SYS_mknodat), when(vec![setid(2)])));
    rules.push((nr(libc::SYS_openat), when(vec![creating(2), setid(3)])));
    #[cfg(target_arch = "x86_64")]
    {
        rules.push((nr(libc::SYS_chmod), when(vec![setid(1)])));
        rules.push((nr(libc::SYS_mknod), when(vec![setid(1)])));
        rules.push((nr(libc::SYS_creat), when(vec![setid(1)])));
        rules.push((nr(libc::SYS_open), when(vec![creating(1), setid(2)])));
    }
    // Multipath TCP: EPROTONOSUPPORT is what a kernel without it answers, and what makes
    // programs (curl, Go) fall back to TCP.
    rules.push((
        nr(libc::SYS_socket),
        Action::When {
            rules: vec![vec![Cond::Equals {
                arg: 2,
                value: IPPROTO_MPTCP,
            }]],
            ret: ret_errno(libc::EPROTONOSUPPORT),
        },
    ));
    // Calls whose arguments a filter cannot read (a struct behind a pointer) answer ENOSYS,
    // so the C library falls back to the older call the rules above check.
    for n in [libc::SYS_clone3, libc::SYS_openat2] {
        rules.push((nr(n), Action::Always(ret_errno(libc::ENOSYS))));
    }
    rules
}

/// The seccomp program every sandboxed run installs.
pub(super) fn seccomp() -> Vec<Bpf> {
    vec![Bpf(bpf::compile(bpf::NATIVE, &seccomp_rules()).into())]
}
