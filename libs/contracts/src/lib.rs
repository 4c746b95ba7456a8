//! The toolgate v1 wire contracts.
//!
//! Generated from `proto/` at build time with protox, so building needs no `protoc`.
//! Besides the generated modules this crate owns the one mapping from a domain error
//! ([`toolgate_core::ReasonedError`]) to a `tonic::Status` carrying a
//! `google.rpc.ErrorInfo`, conversions between wire enums and domain enums, and
//! [`policy_wire`], the one mapping of the policy protocol (`toolgate_policy_api`).

pub mod convert;
pub mod policy_wire;
pub mod status;

/// `toolgate.common.v1`.
pub mod common {
    /// Version 1.
    pub mod v1 {
        #![allow(missing_docs, clippy::all, clippy::pedantic)]
        include!(concat!(env!("OUT_DIR"), "/toolgate.common.v1.rs"));
    }
}

/// `toolgate.executor.v1`.
pub mod executor {
    /// Version 1.
    pub mod v1 {
        #![allow(missing_docs, clippy::all, clippy::pedantic)]
        include!(concat!(env!("OUT_DIR"), "/toolgate.executor.v1.rs"));
    }
}

/// `toolgate.policy.v1`.
pub mod policy {
    /// Version 1.
    pub mod v1 {
        #![allow(missing_docs, clippy::all, clippy::pedantic)]
        include!(concat!(env!("OUT_DIR"), "/toolgate.policy.v1.rs"));
    }
}

/// The encoded `FileDescriptorSet` of every toolgate proto, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/toolgate_descriptor.bin"));
