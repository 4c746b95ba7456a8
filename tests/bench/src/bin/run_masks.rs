//! What preparing a run's view of the workspace costs as the workspace grows: the walk for
//! masks, pins and the protected set (before the spawn), and the after-run audit (before the
//! outcome), against the same run's baseline of a bare directory walk of the same tree
//! (`getdents` by handle, no globs), interleaved. Then the disk budget's baseline: the walk
//! every run made before (one `stat` per entry) against the check of the baseline kept from
//! the previous run's final walk (one `stat` per directory and a `statfs`), with how often
//! the check held (a busy file system under the tree makes it walk instead).
//!
//! `cargo run --release -p toolgate-bench --bin run_masks [FILES...]` (default 20000 300000).

use std::path::Path;
use std::time::Instant;

use toolgate_bench::Samples;
use toolgate_fs::{HiddenPaths, Workspace, WorkspaceConfig};

/// A tree shaped like a repository with its dependencies: directories of 25 files, three
/// levels deep, a `.git`, secrets and protected files sprinkled through it.
fn build(root: &Path, files: usize) {
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(root.join(".env"), "SECRET=1\n").unwrap();
    let per_dir = 25;
    let dirs = files.div_ceil(per_dir);
    for d in 0..dirs {
        let dir = root.join(format!("m{}/p{}/d{}", d / 400, (d / 20) % 20, d));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..per_dir.min(files - d * per_dir) {
            std::fs::write(dir.join(format!("f{f}.js")), b"x").unwrap();
        }
        if d % 97 == 0 {
            std::fs::write(dir.join(".gitattributes"), b"* text\n").unwrap();
        }
        if d % 131 == 0 {
            std::fs::write(dir.join("test.pem"), b"key\n").unwrap();
        }
    }
}

/// The baseline: every directory read once by handle, nothing matched.
fn bare_walk(root: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            n += 1;
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    n
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![20_000, 300_000]
    } else {
        sizes
    };
    for files in sizes {
        let dir = tempfile::tempdir().unwrap();
        build(dir.path(), files);
        let ws = Workspace::open(WorkspaceConfig::new(dir.path())).unwrap();
        let hidden = HiddenPaths::default();
        let samples = if files > 100_000 { 7 } else { 31 };
        let (mut bare, mut walk, mut audit) =
            (Samples::default(), Samples::default(), Samples::default());
        let (mut usage_walk, mut usage_check) = (Samples::default(), Samples::default());
        let mut held = 0;
        let kept = ws.disk_snapshot().unwrap();
        let mut masks = None;
        for _ in 0..samples {
            let t = Instant::now();
            std::hint::black_box(bare_walk(dir.path()));
            bare.push(t.elapsed());
            let t = Instant::now();
            let m = ws.run_masks(&hidden).unwrap();
            walk.push(t.elapsed());
            let t = Instant::now();
            let found = ws.audit_run(&m.snapshot, &hidden, true).unwrap();
            audit.push(t.elapsed());
            assert!(found.violations.is_empty() && found.git.is_empty());
            masks = Some(m);
            let t = Instant::now();
            std::hint::black_box(ws.disk_usage(None).unwrap());
            usage_walk.push(t.elapsed());
            let t = Instant::now();
            let holds = ws.still_holds(&kept);
            if !holds {
                std::hint::black_box(ws.disk_usage(None).unwrap());
            }
            usage_check.push(t.elapsed());
            held += usize::from(holds);
        }
        let m = masks.unwrap();
        println!(
            "== {files} files: {} hidden, {} protected, {} pinned",
            m.hidden_files.len() + m.hidden_dirs.len(),
            m.protected.len(),
            m.pinned.len()
        );
        for (name, s) in [
            ("bare walk (baseline)", &bare),
            ("run_masks (before the spawn)", &walk),
            ("audit_run (after the run)", &audit),
            ("disk baseline: walk (before)", &usage_walk),
            ("disk baseline: kept + check", &usage_check),
        ] {
            println!(
                "  {name:<32} n={:<4} p50={:>9.2} ms  p99={:>9.2} ms",
                s.len(),
                s.quantile(0.5).as_secs_f64() * 1e3,
                s.quantile(0.99).as_secs_f64() * 1e3
            );
        }
        println!(
            "  ratio run_masks p50 / bare walk p50 = {:.2}",
            walk.quantile(0.5).as_secs_f64() / bare.quantile(0.5).as_secs_f64()
        );
        println!(
            "  disk baseline: kept one held {held}/{samples}; ratio kept p50 / walk p50 = {:.3}",
            usage_check.quantile(0.5).as_secs_f64() / usage_walk.quantile(0.5).as_secs_f64()
        );
    }
}
