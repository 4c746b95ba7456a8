//! The Landlock half of a run's view: the access rights of the fixed part, by path and port.

use std::ffi::CString;
use std::io;

use landlock::{ABI, Access, AccessFs, AccessNet, BitFlags, Scope};

use super::view::{FixedView, cstr};
use super::{Profile, SandboxConfig};
use crate::sys::sandbox::LandlockRules;

pub(super) fn abi_of(n: i32) -> ABI {
    match n {
        i32::MIN..=0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    }
}

pub(super) fn fixed_landlock(
    profile: &Profile,
    config: &SandboxConfig,
    fixed: &FixedView,
    abi: ABI,
) -> io::Result<LandlockRules> {
    let all = AccessFs::from_all(abi);
    let read: BitFlags<AccessFs> = AccessFs::from_read(abi);
    let dev = (AccessFs::ReadFile
        | AccessFs::WriteFile
        | AccessFs::ReadDir
        | AccessFs::Truncate
        | AccessFs::IoctlDev)
        & all;
    let mut paths = vec![(
        CString::new("/").expect("static"),
        BitFlags::from(AccessFs::ReadDir).bits(),
    )];
    for (path, link) in &fixed.system {
        if link.is_none() {
            paths.push((cstr(path)?, read.bits()));
        }
    }
    for path in &fixed.read_only {
        paths.push((cstr(path)?, read.bits()));
    }
    paths.push((CString::new("/dev").expect("static"), dev.bits()));
    paths.push((CString::new("/dev/shm").expect("static"), all.bits()));
    paths.push((
        CString::new("/proc").expect("static"),
        (AccessFs::ReadFile | AccessFs::ReadDir).bits(),
    ));
    paths.push((CString::new("/tmp").expect("static"), all.bits()));
    paths.push((cstr(&config.home)?, all.bits()));
    let (handled_net, ports) = if profile.network && !profile.tcp_connect_ports.is_empty() {
        let connect = AccessNet::ConnectTcp as u64;
        (
            connect,
            profile
                .tcp_connect_ports
                .iter()
                .map(|p| (u64::from(*p), connect))
                .collect(),
        )
    } else {
        (0, Vec::new())
    };
    Ok(LandlockRules {
        handled_fs: all.bits(),
        handled_net,
        scoped: Scope::from_all(abi).bits(),
        paths,
        ports,
    })
}
