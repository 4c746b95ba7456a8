//! A parallel, handle-based tree walk shared by search and find.
//!
//! Each directory is opened beneath the root by its canonical path with
//! `RESOLVE_NO_SYMLINKS`, and each file relative to its directory handle with
//! `O_NOFOLLOW`: a directory swapped for a symlink mid-walk makes the open fail
//! instead of leading outside. Symlinks are reported to visitors but never descended.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use globset::GlobSet;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::dir::read_names;
use crate::error::{Error, Result};
use crate::list::is_hidden;
use crate::workspace::{BENEATH_NO_SYMLINKS, HiddenPaths, Workspace, compile_glob};

/// Files are handed to other workers in batches of this size, so one huge directory
/// still spreads over every core.
const BATCH: usize = 128;
/// Largest `.gitignore` honoured.
const MAX_GITIGNORE: u64 = 1 << 20;

/// Globs matched the way ripgrep's `-g` does: a glob without `/` matches the file name
/// anywhere; one with `/` matches the path relative to the walk's base.
#[derive(Debug)]
pub(crate) struct Filter {
    names: GlobSet,
    paths: GlobSet,
}

impl Filter {
    /// Compiles `patterns`; `None` when there are none.
    pub(crate) fn new(field: &'static str, patterns: &[String]) -> Result<Option<Filter>> {
        if patterns.is_empty() {
            return Ok(None);
        }
        let (mut names, mut paths) = (
            globset::GlobSetBuilder::new(),
            globset::GlobSetBuilder::new(),
        );
        for p in patterns {
            if p.is_empty() {
                return Err(Error::InvalidPattern {
                    pattern: String::new(),
                    why: format!("empty glob in `{field}`"),
                });
            }
            let trimmed = p.strip_prefix("./").unwrap_or(p);
            let glob = compile_glob(trimmed)?;
            if trimmed.contains('/') {
                paths.add(glob);
            } else {
                names.add(glob);
            }
        }
        let build = |b: globset::GlobSetBuilder| {
            b.build().map_err(|e| Error::InvalidPattern {
                pattern: patterns.join(","),
                why: e.to_string(),
            })
        };
        Ok(Some(Filter {
            names: build(names)?,
            paths: build(paths)?,
        }))
    }

    /// Matches a name, building the relative path only when a path glob needs it.
    pub(crate) fn is_match(&self, name: &OsStr, rel: impl FnOnce() -> PathBuf) -> bool {
        self.names.is_match(name) || (!self.paths.is_empty() && self.paths.is_match(rel()))
    }
}

/// One entry offered to a visitor.
pub(crate) struct Item<'a> {
    /// The directory handle the entry lives in.
    pub dir: BorrowedFd<'a>,
    /// The entry's name in `dir`.
    pub name: &'a OsStr,
    /// Workspace-relative canonical path of the containing directory.
    pub dir_canon: &'a Path,
    /// Path of the containing directory relative to the walk's base.
    pub dir_rel: &'a Path,
    /// The entry's own type (symlinks are not followed).
    pub file_type: FileType,
}

impl Item<'_> {
    /// Workspace-relative canonical path; built on demand, most files never need it.
    pub(crate) fn canon(&self) -> PathBuf {
        self.dir_canon.join(self.name)
    }

    /// Path relative to the walk's base.
    pub(crate) fn rel(&self) -> PathBuf {
        self.dir_rel.join(self.name)
    }
}

/// What a walk does with each entry.
pub(crate) trait Visit: Sync {
    /// Per-worker scratch and results.
    type State: Send;
    /// Fresh state for one worker.
    fn state(&self) -> Self::State;
    /// Handles one entry; `false` stops the whole walk.
    fn visit(&self, state: &mut Self::State, item: &Item<'_>) -> bool;
}

/// What to walk and which entries to skip.
pub(crate) struct WalkSpec<'a> {
    pub include_hidden: bool,
    pub gitignore: bool,
    pub exclude: Option<&'a Filter>,
    /// More deny globs for this walk.
    pub hidden: Option<&'a HiddenPaths>,
    pub threads: usize,
}

type Ignores = Option<Arc<IgnoreNode>>;

struct IgnoreNode {
    gi: Gitignore,
    parent: Ignores,
}

fn ignored(mut node: &Ignores, canon: &Path, is_dir: bool) -> bool {
    while let Some(n) = node {
        let m = n.gi.matched(canon, is_dir);
        if m.is_ignore() {
            return true;
        }
        if m.is_whitelist() {
            return false;
        }
        node = &n.parent;
    }
    false
}

enum Work {
    Dir {
        canon: PathBuf,
        rel: PathBuf,
        ignores: Ignores,
    },
    Files {
        dir: Arc<OwnedFd>,
        canon: Arc<PathBuf>,
        rel: Arc<PathBuf>,
        names: Vec<(OsString, FileType)>,
    },
}

struct Queue {
    inner: Mutex<(Vec<Work>, usize)>,
    cv: Condvar,
    stop: AtomicBool,
}

impl Queue {
    fn next(&self) -> Option<Work> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            if let Some(w) = g.0.pop() {
                g.1 += 1;
                return Some(w);
            }
            if g.1 == 0 {
                self.cv.notify_all();
                return None;
            }
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn push(&self, w: Work) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.0.push(w);
        self.cv.notify_one();
    }

    fn done(&self) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.1 -= 1;
        if g.1 == 0 && g.0.is_empty() {
            self.cv.notify_all();
        }
    }

    fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        self.cv.notify_all();
    }
}

struct Walker<'a, V: Visit> {
    ws: &'a Workspace,
    spec: &'a WalkSpec<'a>,
    visitor: &'a V,
    queue: Queue,
}

/// Walks the directory `base` (canonical, workspace-relative) and returns every worker's state.
pub(crate) fn walk<V: Visit>(
    ws: &Workspace,
    base: &Path,
    spec: &WalkSpec<'_>,
    visitor: &V,
) -> Vec<V::State> {
    let w = Walker {
        ws,
        spec,
        visitor,
        queue: Queue {
            inner: Mutex::new((
                vec![Work::Dir {
                    canon: base.to_path_buf(),
                    rel: PathBuf::new(),
                    ignores: None,
                }],
                0,
            )),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
        },
    };
    let threads = spec.threads.max(1);
    if threads == 1 {
        let mut st = visitor.state();
        w.run(&mut st);
        return vec![st];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut st = visitor.state();
                    w.run(&mut st);
                    st
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    })
}

impl<V: Visit> Walker<'_, V> {
    fn run(&self, st: &mut V::State) {
        while let Some(work) = self.queue.next() {
            let keep_going = match work {
                Work::Dir {
                    canon,
                    rel,
                    ignores,
                } => self.dir(st, &canon, &rel, ignores),
                Work::Files {
                    dir,
                    canon,
                    rel,
                    names,
                } => self.files(st, dir.as_fd(), &canon, &rel, &names),
            };
            if !keep_going {
                self.queue.halt();
            }
            self.queue.done();
        }
    }

    fn dir(&self, st: &mut V::State, canon: &Path, rel: &Path, ignores: Ignores) -> bool {
        let kernel = if canon.as_os_str().is_empty() {
            Path::new(".")
        } else {
            canon
        };
        // A directory replaced by a symlink since it was listed fails here; skip it.
        let Ok(fd) = self.ws.openat2(
            self.ws.root_fd(),
            kernel,
            OFlags::RDONLY | OFlags::DIRECTORY,
            BENEATH_NO_SYMLINKS,
        ) else {
            return true;
        };
        let Ok(names) = read_names(&fd) else {
            return true;
        };
        let ignores = if self.spec.gitignore && names.iter().any(|(n, _)| n == ".gitignore") {
            match load_gitignore(fd.as_fd(), canon) {
                Some(gi) => Some(Arc::new(IgnoreNode {
                    gi,
                    parent: ignores,
                })),
                None => ignores,
            }
        } else {
            ignores
        };
        let mut files = Vec::new();
        let check_deny = self.ws.has_deny(self.spec.hidden);
        for (name, mut ft) in names {
            if !self.spec.include_hidden && is_hidden(&name) {
                continue;
            }
            if check_deny && self.ws.entry_denied(&canon.join(&name), self.spec.hidden) {
                continue;
            }
            if ft == FileType::Unknown {
                match rustix::fs::statat(&fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(s) => ft = FileType::from_raw_mode(s.st_mode),
                    Err(_) => continue,
                }
            }
            let is_dir = ft == FileType::Directory;
            if ignores.is_some() && ignored(&ignores, &canon.join(&name), is_dir) {
                continue;
            }
            if self
                .spec
                .exclude
                .is_some_and(|f| f.is_match(&name, || rel.join(&name)))
            {
                continue;
            }
            if is_dir {
                let item = Item {
                    dir: fd.as_fd(),
                    name: &name,
                    dir_canon: canon,
                    dir_rel: rel,
                    file_type: ft,
                };
                if !self.visitor.visit(st, &item) {
                    return false;
                }
                self.queue.push(Work::Dir {
                    canon: canon.join(&name),
                    rel: rel.join(&name),
                    ignores: ignores.clone(),
                });
            } else {
                files.push((name, ft));
            }
        }
        if files.len() <= BATCH {
            return self.files(st, fd.as_fd(), canon, rel, &files);
        }
        let dir = Arc::new(fd);
        let canon = Arc::new(canon.to_path_buf());
        let rel = Arc::new(rel.to_path_buf());
        let mut chunks: Vec<Vec<_>> = Vec::new();
        let mut files = files.into_iter().peekable();
        while files.peek().is_some() {
            chunks.push(files.by_ref().take(BATCH).collect());
        }
        let first = chunks.swap_remove(0);
        for names in chunks {
            self.queue.push(Work::Files {
                dir: Arc::clone(&dir),
                canon: Arc::clone(&canon),
                rel: Arc::clone(&rel),
                names,
            });
        }
        self.files(st, dir.as_fd(), &canon, &rel, &first)
    }

    fn files(
        &self,
        st: &mut V::State,
        dir: BorrowedFd<'_>,
        canon: &Path,
        rel: &Path,
        names: &[(OsString, FileType)],
    ) -> bool {
        for (name, ft) in names {
            if self.queue.stop.load(Ordering::Relaxed) {
                return false;
            }
            let item = Item {
                dir,
                name,
                dir_canon: canon,
                dir_rel: rel,
                file_type: *ft,
            };
            if !self.visitor.visit(st, &item) {
                return false;
            }
        }
        true
    }
}

/// Reads a directory's `.gitignore` through its handle (never by path).
fn load_gitignore(dir: BorrowedFd<'_>, canon: &Path) -> Option<Gitignore> {
    let fd = rustix::fs::openat(
        dir,
        ".gitignore",
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return None;
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(MAX_GITIGNORE)
        .read_to_string(&mut text)
        .ok()?;
    let mut b = GitignoreBuilder::new(canon);
    for line in text.lines() {
        // A bad line is skipped, as git does.
        let _ = b.add_line(None, line);
    }
    b.build().ok()
}

/// Worker threads for a walk: every core, within reason.
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(8))
}
