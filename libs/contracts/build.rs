//! Compiles `proto/` with protox (pure Rust, no `protoc`) and generates the tonic code.

use std::path::PathBuf;

const FILES: &[&str] = &[
    "toolgate/common/v1/common.proto",
    "toolgate/executor/v1/filesystem.proto",
    "toolgate/executor/v1/process.proto",
    "toolgate/executor/v1/executor.proto",
    "toolgate/policy/v1/policy.proto",
    "toolgate/policy/v1/approval.proto",
    "toolgate/policy/v1/session.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let fds = protox::compile(FILES, [&root])?;

    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("toolgate_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;

    tonic_prost_build::configure()
        // Output chunks and file contents pass through without a copy.
        .bytes(".toolgate.executor.v1.OutputChunk.data")
        .bytes(".toolgate.executor.v1.StreamSummary.tail")
        .bytes(".toolgate.executor.v1.ReadRunOutputResponse.data")
        .build_client(std::env::var_os("CARGO_FEATURE_CLIENT").is_some())
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        .compile_fds(fds)?;
    Ok(())
}
