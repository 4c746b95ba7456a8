//! End-to-end: the real executor binary serving FilesystemService over loopback gRPC.

use crate::support;

use std::os::unix::fs::symlink;

use support::{Executor, SENTINEL, Sandbox, ctx, reason};
use tonic::Code;
use toolgate_contracts::executor::v1 as pb;

fn read(path: &str) -> pb::ReadFileRequest {
    pb::ReadFileRequest {
        context: ctx(),
        path: path.into(),
        ..Default::default()
    }
}

fn write(path: &str, content: &[u8]) -> pb::WriteFileRequest {
    pb::WriteFileRequest {
        context: ctx(),
        path: path.into(),
        content: content.to_vec(),
        ..Default::default()
    }
}

#[tokio::test]
async fn read_write_edit_round_trip() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut fs = exe.fs().await;

    let w = fs
        .write_file(pb::WriteFileRequest {
            create_parents: true,
            ..write("src/main.rs", b"fn main() {\n    old();\n}\n")
        })
        .await
        .unwrap()
        .into_inner();
    assert!(w.created);
    assert_eq!(
        std::fs::read(sb.ws.join("src/main.rs")).unwrap(),
        b"fn main() {\n    old();\n}\n"
    );

    let r = fs
        .read_file(read("src/main.rs"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.file_sha256, w.sha256);
    assert!(!r.truncated);

    let e = fs
        .edit_file(pb::EditFileRequest {
            context: ctx(),
            path: "src/main.rs".into(),
            old_text: "old()".into(),
            new_text: "new()".into(),
            expected_sha256: Some(r.file_sha256.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(e.occurrences, 1);
    assert!(e.unified_diff.contains("-    old();") && e.unified_diff.contains("+    new();"));
    assert_eq!(
        std::fs::read_to_string(sb.ws.join("src/main.rs")).unwrap(),
        "fn main() {\n    new();\n}\n"
    );

    // The old sha256 is now stale: optimistic concurrency refuses and leaves the file alone.
    let err = fs
        .write_file(pb::WriteFileRequest {
            expected_sha256: Some(r.file_sha256),
            ..write("src/main.rs", b"clobber")
        })
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), reason(&err).as_str()),
        (Code::Aborted, "CONFLICT")
    );
    assert!(
        std::fs::read_to_string(sb.ws.join("src/main.rs"))
            .unwrap()
            .contains("new()")
    );
}

#[tokio::test]
async fn edit_with_wrong_count_reports_how_many_were_found() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws.join("f.txt"), "a a a").unwrap();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let err = exe
        .fs()
        .await
        .edit_file(pb::EditFileRequest {
            context: ctx(),
            path: "f.txt".into(),
            old_text: "a".into(),
            new_text: "b".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let (r, md) = toolgate_contracts::status::error_info(&err).unwrap();
    assert_eq!(r, "EDIT_MISMATCH");
    assert_eq!(md.get("found").map(String::as_str), Some("3"), "{md:?}");
    assert_eq!(
        std::fs::read_to_string(sb.ws.join("f.txt")).unwrap(),
        "a a a"
    );
}

#[tokio::test]
async fn hostile_paths_are_refused_with_a_reason() {
    let sb = Sandbox::new();
    let ws_name = sb.ws.file_name().unwrap().to_str().unwrap().to_owned();
    // FS-PFX-01: a sibling whose name shares the root's prefix.
    let sibling = sb.ws.with_file_name(format!("{ws_name}_secrets"));
    std::fs::create_dir(&sibling).unwrap();
    std::fs::write(sibling.join("s"), SENTINEL).unwrap();
    symlink(sb.out.join("secret"), sb.ws.join("link")).unwrap();
    symlink(&sb.out, sb.ws.join("d")).unwrap();
    std::fs::create_dir(sb.ws.join("src")).unwrap();
    let before = sb.outside_snapshot();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut fs = exe.fs().await;

    let escapes = [
        "../../../../etc/passwd".to_owned(),                 // FS-TRV-01
        format!("{}/src/../../etc/passwd", sb.ws.display()), // FS-TRV-02
        format!("{}_secrets/s", sb.ws.display()),            // FS-PFX-01
        format!("{}/../{ws_name}_secrets/s", sb.ws.display()), // FS-PFX-03
        "link".to_owned(),                                   // FS-SYM-01
        "./d/secret".to_owned(),                             // FS-SYM-13 spelling
        "/etc/passwd".to_owned(),
        "src/../../out/secret".to_owned(),
    ];
    for p in &escapes {
        let err = fs.read_file(read(p)).await.unwrap_err();
        assert_eq!(
            (err.code(), reason(&err).as_str()),
            (Code::PermissionDenied, "PATH_OUTSIDE_WORKSPACE"),
            "{p}: {err:?}"
        );
        assert!(!err.message().contains(SENTINEL));
    }
    // FS-SYM-02 and FS-SYM-05: writes through symlinks to the outside.
    for p in ["link", "d/newfile"] {
        let err = fs.write_file(write(p, b"pwn")).await.unwrap_err();
        assert_eq!(reason(&err), "PATH_OUTSIDE_WORKSPACE", "{p}");
    }
    // FS-TRV-03: listing the parent.
    let err = fs
        .list_directory(pb::ListDirectoryRequest {
            context: ctx(),
            path: format!("{}/..", sb.ws.display()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "PATH_OUTSIDE_WORKSPACE");
    assert_eq!(sb.outside_snapshot(), before, "the outside tree changed");
}

#[tokio::test]
async fn protected_paths_are_readable_not_writable() {
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.ws.join(".git")).unwrap();
    std::fs::write(sb.ws.join(".git/config"), "[core]\n").unwrap();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut fs = exe.fs().await;
    // FS-PROT-02
    let err = fs
        .write_file(write(
            ".git/config",
            b"[core]\n\tfsmonitor = touch /tmp/pwn",
        ))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), reason(&err).as_str()),
        (Code::PermissionDenied, "PATH_PROTECTED")
    );
    assert_eq!(
        std::fs::read_to_string(sb.ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    let r = fs
        .read_file(read(".git/config"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.content, b"[core]\n");
}

#[tokio::test]
async fn malformed_requests_get_invalid_argument() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws.join("f"), "x").unwrap();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut fs = exe.fs().await;

    let err = fs.read_file(read("a\0b")).await.unwrap_err();
    assert_eq!(
        (err.code(), reason(&err).as_str()),
        (Code::InvalidArgument, "INVALID_PATH")
    );
    let err = fs.read_file(read("")).await.unwrap_err();
    assert_eq!(reason(&err), "INVALID_PATH");
    let err = fs
        .read_file(pb::ReadFileRequest {
            context: None,
            path: "f".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), reason(&err).as_str()),
        (Code::InvalidArgument, "INVALID_REQUEST")
    );
    let err = fs
        .read_file(pb::ReadFileRequest {
            max_bytes: u64::MAX,
            ..read("f")
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let err = fs
        .write_file(pb::WriteFileRequest {
            expected_sha256: Some("nothex".into()),
            ..write("f", b"y")
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = fs
        .search_files(pb::SearchFilesRequest {
            context: ctx(),
            pattern: "(unclosed".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), reason(&err).as_str()),
        (Code::InvalidArgument, "INVALID_PATTERN")
    );
}

#[tokio::test]
async fn fifo_is_refused_without_blocking() {
    let sb = Sandbox::new();
    let status = std::process::Command::new("mkfifo")
        .arg(sb.ws.join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut fs = exe.fs().await;
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        fs.read_file(read("pipe")),
    )
    .await
    .expect("FS-SPECIAL-01: read of a FIFO must not block")
    .unwrap_err();
    assert_eq!(
        (err.code(), reason(&err).as_str()),
        (Code::FailedPrecondition, "NOT_A_FILE")
    );
}

#[tokio::test]
async fn list_search_find_stat_and_mkdir() {
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.ws.join("src/inner")).unwrap();
    std::fs::write(sb.ws.join("src/a.rs"), "fn alpha() {}\nlet needle = 1;\n").unwrap();
    std::fs::write(sb.ws.join("src/inner/b.rs"), "needle again\n").unwrap();
    std::fs::write(sb.ws.join(".hidden"), "needle hidden\n").unwrap();
    std::fs::write(sb.ws.join(".env"), "TOKEN=needle\n").unwrap();
    let exe = Executor::start(
        &sb.ws,
        &["--config", "/dev/null"],
        &[("TOOLGATE_WORKSPACE__DENY", "[\"**/.env\"]")],
    );
    let mut fs = exe.fs().await;

    let l = fs
        .list_directory(pb::ListDirectoryRequest {
            context: ctx(),
            path: ".".into(),
            recursive: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let paths: Vec<_> = l.entries.iter().map(|e| e.path.as_str()).collect();
    assert!(paths.contains(&"src/inner/b.rs"), "{paths:?}");
    assert!(
        !paths.iter().any(|p| p.starts_with('.')),
        "dotfiles hidden by default: {paths:?}"
    );
    assert!(!l.truncated);

    let s = fs
        .search_files(pb::SearchFilesRequest {
            context: ctx(),
            pattern: "needle".into(),
            literal: true,
            include_hidden: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let hits: Vec<_> = s
        .matches
        .iter()
        .map(|m| (m.path.as_str(), m.line_number))
        .collect();
    assert!(hits.contains(&("src/a.rs", 2)), "{hits:?}");
    assert!(hits.contains(&(".hidden", 1)), "{hits:?}");
    assert!(
        !hits.iter().any(|(p, _)| p.ends_with(".env")),
        "ENV-05: denied file leaked: {hits:?}"
    );

    let f = fs
        .find_files(pb::FindFilesRequest {
            context: ctx(),
            patterns: vec!["**/*.rs".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(f.paths, vec!["src/a.rs", "src/inner/b.rs"]);

    let m = fs
        .create_directory(pb::CreateDirectoryRequest {
            context: ctx(),
            path: "new/deep/dir".into(),
            parents: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(m.created && sb.ws.join("new/deep/dir").is_dir());

    let st = fs
        .stat_path(pb::StatPathRequest {
            context: ctx(),
            path: "src/a.rs".into(),
            compute_sha256: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.r#type, pb::EntryType::File as i32);
    assert_eq!(st.nlink, 1);
    assert_eq!(st.sha256.len(), 64);

    let err = fs.read_file(read(".env")).await.unwrap_err();
    assert_eq!(reason(&err), "PATH_DENIED");
}

// Multi-threaded: `terminate` blocks this thread in wait(), while the client side of the
// connection must still be able to answer the server's GOAWAY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reflection_and_graceful_shutdown() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let ch = exe.channel().await;
    let h = HealthClient::new(ch.clone())
        .check(HealthCheckRequest {
            service: "toolgate.executor.v1.FilesystemService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(h.status, ServingStatus::Serving as i32);

    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut stream = ServerReflectionClient::new(ch)
        .server_reflection_info(tokio_stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    let resp = stream.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = resp.message_response else {
        panic!("unexpected reflection answer {resp:?}");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&"toolgate.executor.v1.FilesystemService"),
        "{names:?}"
    );

    // No call is in flight, so the drain ends at once instead of waiting out the grace period.
    drop(stream);
    let started = std::time::Instant::now();
    let status = exe.terminate();
    assert!(
        status.success(),
        "SIGTERM must drain and exit 0, got {status:?}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "an idle executor must not wait out its grace period"
    );
}

#[test]
fn invalid_config_exits_non_zero_naming_the_field() {
    let sb = Sandbox::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate-executor"))
        .arg("--workspace")
        .arg(&sb.ws)
        .env("TOOLGATE_FS__MAX_READ_BYTES", "\"lots\"")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fs.max_read_bytes"), "{err}");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate-executor"))
        .arg("--workspace")
        .arg(sb.ws.join("missing"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("workspace.root"));
}

// Issue 13 §4: paths that mean something else elsewhere.

#[tokio::test]
async fn windows_drive_letter_path_is_invalid_path_not_a_literal_name() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.ws.join("src")).unwrap();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut fs = exe.fs().await;
    for p in [
        r"C:\Users\me\x.txt",
        "c:/x",
        r"\\server\share\x.txt",
        r"\\?\C:\x.txt",
        r"src\main.rs",
    ] {
        let err = fs.write_file(write(p, b"x")).await.unwrap_err();
        assert_eq!(
            (err.code(), reason(&err).as_str()),
            (Code::InvalidArgument, "INVALID_PATH"),
            "{p}: {err:?}"
        );
        assert!(
            err.message().contains("POSIX tree"),
            "{p}: {}",
            err.message()
        );
        let err = fs
            .create_directory(pb::CreateDirectoryRequest {
                context: ctx(),
                path: p.into(),
                parents: true,
            })
            .await
            .unwrap_err();
        assert_eq!(reason(&err), "INVALID_PATH", "{p}");
        let err = fs.read_file(read(p)).await.unwrap_err();
        assert_eq!(reason(&err), "INVALID_PATH", "{p}");
    }
    let names: Vec<_> = std::fs::read_dir(&sb.ws)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["src"], "nothing was created under a literal name");
    assert!(
        std::fs::read_dir(sb.ws.join("src"))
            .unwrap()
            .next()
            .is_none()
    );
}

#[tokio::test]
async fn codex_symlink_to_decoy_does_not_make_codex_config_writable() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.ws.join("decoy")).unwrap();
    std::fs::write(sb.ws.join("decoy/config.toml"), "model = \"x\"\n").unwrap();
    for dir in [".codex", ".claude", ".cursor", ".git", ".vscode"] {
        symlink("decoy", sb.ws.join(dir)).unwrap();
    }
    std::fs::write(sb.ws.join(".gitattributes"), "*.txt text\n").unwrap();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut fs = exe.fs().await;
    for p in [
        ".codex/config.toml",
        ".claude/config.toml",
        ".cursor/config.toml",
        ".git/config.toml",
        ".vscode/config.toml",
        "./.codex/sub/../config.toml",
        ".gitattributes",
        ".gitmodules",
        "vendor/.gitmodules",
    ] {
        let err = fs
            .write_file(pb::WriteFileRequest {
                create_parents: true,
                ..write(p, b"* filter=pwn\n")
            })
            .await
            .unwrap_err();
        assert_eq!(
            (err.code(), reason(&err).as_str()),
            (Code::PermissionDenied, "PATH_PROTECTED"),
            "{p}: {err:?}"
        );
    }
    let err = fs
        .edit_file(pb::EditFileRequest {
            context: ctx(),
            path: ".codex/config.toml".into(),
            old_text: "x".into(),
            new_text: "pwn".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "PATH_PROTECTED");
    assert_eq!(
        std::fs::read_to_string(sb.ws.join("decoy/config.toml")).unwrap(),
        "model = \"x\"\n"
    );
    assert_eq!(
        std::fs::read_to_string(sb.ws.join(".gitattributes")).unwrap(),
        "*.txt text\n"
    );
    assert!(!sb.ws.join("vendor").exists() && !sb.ws.join(".gitmodules").exists());
    // The decoy under its own name is ordinary.
    fs.write_file(write("decoy/config.toml", b"model = \"y\"\n"))
        .await
        .unwrap();
}
