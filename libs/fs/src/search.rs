//! Content search (ripgrep's library crates) and path find (globset), both over the
//! confined, handle-based walk.

use std::fs::File;
use std::io::Read;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use rustix::fs::{FileType, Mode, OFlags};

use crate::error::{Error, Result};
use crate::list::Truncation;
use crate::path::WorkspacePath;
use crate::redact::RedactingReader;
use crate::walk::{Filter, Item, Visit, WalkSpec, default_threads, walk};
use crate::workspace::{Access, EntryKind, HiddenPaths, Style, Workspace, cap};

/// A content search request.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// A directory to search recursively, or a single file.
    pub path: WorkspacePath,
    /// A regex (Rust syntax, linear time), or literal text with `literal`.
    pub pattern: String,
    /// Treat `pattern` as literal text.
    pub literal: bool,
    /// Match case-insensitively.
    pub case_insensitive: bool,
    /// Lines of context before and after each match.
    pub context_lines: usize,
    /// Only search files matching one of these globs (a glob without `/` matches the name).
    pub include: Vec<String>,
    /// Skip files and directories matching one of these globs.
    pub exclude: Vec<String>,
    /// Honour `.gitignore` files.
    pub respect_gitignore: bool,
    /// Search names starting with `.`.
    pub include_hidden: bool,
    /// Cap on matching lines; `None` means the default.
    pub max_results: Option<usize>,
    /// Cap on returned line bytes; `None` means the default.
    pub max_bytes: Option<usize>,
    /// Wall-time budget; `None` means the default.
    pub timeout: Option<Duration>,
}

impl SearchRequest {
    /// A regex search of `path` with default options.
    pub fn new(path: WorkspacePath, pattern: impl Into<String>) -> Self {
        SearchRequest {
            path,
            pattern: pattern.into(),
            literal: false,
            case_insensitive: false,
            context_lines: 0,
            include: Vec::new(),
            exclude: Vec::new(),
            respect_gitignore: false,
            include_hidden: false,
            max_results: None,
            max_bytes: None,
            timeout: None,
        }
    }
}

/// One returned line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchLine {
    /// 1-based line number.
    pub line_number: u64,
    /// The line without its terminator (lossy UTF-8, cut at the line cap).
    pub text: String,
    /// The line matched (otherwise it is context).
    pub is_match: bool,
    /// The line was longer than the line cap and was cut.
    pub cut: bool,
}

/// The lines found in one file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMatches {
    /// Canonical path in the caller's style.
    pub path: String,
    /// Matching and context lines.
    pub lines: Vec<SearchLine>,
}

/// A search result.
#[derive(Debug, Clone)]
pub struct SearchOutcome {
    /// Files with matches, sorted by path.
    pub files: Vec<FileMatches>,
    /// Number of matching lines returned.
    pub match_count: usize,
    /// Number of files searched.
    pub files_searched: usize,
    /// Set when a cap stopped the search early; results are then partial.
    pub truncated: Option<Truncation>,
}

/// A find request.
#[derive(Debug, Clone)]
pub struct FindRequest {
    /// The directory to search under.
    pub path: WorkspacePath,
    /// Globs over paths relative to `path` (a glob without `/` matches the name).
    pub patterns: Vec<String>,
    /// Skip files and directories matching one of these globs.
    pub exclude: Vec<String>,
    /// Honour `.gitignore` files.
    pub respect_gitignore: bool,
    /// Include names starting with `.`.
    pub include_hidden: bool,
    /// Cap on returned paths; `None` means the default.
    pub max_results: Option<usize>,
    /// Wall-time budget; `None` means the default.
    pub timeout: Option<Duration>,
}

/// One found path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Canonical path in the caller's style.
    pub path: String,
    /// The entry's own type.
    pub kind: EntryKind,
}

/// A find result.
#[derive(Debug, Clone)]
pub struct FindOutcome {
    /// Matching paths, sorted.
    pub matches: Vec<Found>,
    /// Set when a cap stopped the walk early.
    pub truncated: Option<Truncation>,
}

/// Shared caps and the first reason a walk was cut short.
struct Budget {
    deadline: Instant,
    results: AtomicUsize,
    bytes: AtomicUsize,
    files: AtomicUsize,
    max_files: usize,
    truncated: Mutex<Option<Truncation>>,
    stop: AtomicBool,
}

impl Budget {
    fn new(timeout: Duration, results: usize, bytes: usize, max_files: usize) -> Budget {
        Budget {
            deadline: Instant::now() + timeout,
            results: AtomicUsize::new(results),
            bytes: AtomicUsize::new(bytes),
            files: AtomicUsize::new(0),
            max_files,
            truncated: Mutex::new(None),
            stop: AtomicBool::new(false),
        }
    }

    fn cut(&self, why: Truncation) {
        let mut t = self.truncated.lock().unwrap_or_else(|p| p.into_inner());
        t.get_or_insert(why);
        self.stop.store(true, Ordering::Relaxed);
    }

    fn take(counter: &AtomicUsize, n: usize) -> bool {
        counter
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(n)
            })
            .is_ok()
    }

    /// Accounts for one more visited file; false once a cap or the clock says stop.
    fn next_file(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        if self.files.fetch_add(1, Ordering::Relaxed) >= self.max_files {
            self.cut(Truncation::MaxFiles);
            return false;
        }
        if Instant::now() >= self.deadline {
            self.cut(Truncation::Timeout);
            return false;
        }
        true
    }

    fn truncated(&self) -> Option<Truncation> {
        *self.truncated.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Ends a file early (as if at EOF) once the budget says stop, so one huge file cannot
/// outlive the time budget.
struct Bounded<'a> {
    file: File,
    budget: &'a Budget,
}

impl Read for Bounded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.budget.stop.load(Ordering::Relaxed) {
            return Ok(0);
        }
        if Instant::now() >= self.budget.deadline {
            self.budget.cut(Truncation::Timeout);
            return Ok(0);
        }
        self.file.read(buf)
    }
}

struct Collect<'a> {
    budget: &'a Budget,
    max_line: usize,
    lines: Vec<SearchLine>,
}

impl Collect<'_> {
    fn push(&mut self, line_number: Option<u64>, bytes: &[u8], is_match: bool) -> bool {
        let mut b = bytes;
        if let Some(rest) = b.strip_suffix(b"\n") {
            b = rest;
        }
        if let Some(rest) = b.strip_suffix(b"\r") {
            b = rest;
        }
        let cut = b.len() > self.max_line;
        if cut {
            b = &b[..self.max_line];
        }
        let mut text = String::from_utf8_lossy(b).into_owned();
        if cut {
            // The cut may split a multi-byte character; drop the replacement it left.
            if text.ends_with('\u{fffd}') {
                text.pop();
            }
        }
        if is_match && !Budget::take(&self.budget.results, 1) {
            self.budget.cut(Truncation::MaxResults);
            return false;
        }
        if !Budget::take(&self.budget.bytes, text.len()) {
            self.budget.cut(Truncation::MaxBytes);
            return false;
        }
        self.lines.push(SearchLine {
            line_number: line_number.unwrap_or(0),
            text,
            is_match,
            cut,
        });
        true
    }
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> std::io::Result<bool> {
        // Outside multi-line mode every match is exactly one line.
        Ok(self.push(m.line_number(), m.bytes(), true))
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> std::io::Result<bool> {
        Ok(self.push(c.line_number(), c.bytes(), false))
    }
}

struct SearchVisit<'a> {
    ws: &'a Workspace,
    style: Style,
    matcher: RegexMatcher,
    include: Option<Filter>,
    searcher: SearcherBuilder,
    budget: &'a Budget,
}

struct SearchState {
    searcher: Searcher,
    files: Vec<FileMatches>,
    searched: usize,
}

impl SearchVisit<'_> {
    fn search_fd(
        &self,
        st: &mut SearchState,
        dir: BorrowedFd<'_>,
        name: &std::ffi::OsStr,
        canon: impl FnOnce() -> PathBuf,
    ) {
        // Relative to the directory handle, one component, never a symlink, never blocking.
        let Ok(fd) = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        ) else {
            return;
        };
        if self.ws.refuses_hard_links() {
            match rustix::fs::fstat(&fd) {
                Ok(st) if self.ws.check_links("", &st).is_ok() => {}
                _ => return,
            }
        }
        // No other fstat: the entry's type came from the directory, and whatever may have been
        // swapped in since cannot block (O_NONBLOCK), follow a link (O_NOFOLLOW) or be a
        // device (creating one needs privileges the workspace never grants); a directory
        // fails its first read and is skipped.
        st.searched += 1;
        let mut sink = Collect {
            budget: self.budget,
            max_line: self.ws.limits().max_line_bytes,
            lines: Vec::new(),
        };
        // The searcher sees the view: a pattern cannot probe a credential it would not show.
        let reader = RedactingReader::new(Bounded {
            file: File::from(fd),
            budget: self.budget,
        });
        // A read error or an over-long line ends this file only.
        let _ = st.searcher.search_reader(&self.matcher, reader, &mut sink);
        if !sink.lines.is_empty() {
            st.files.push(FileMatches {
                path: self.ws.render(self.style, &canon()),
                lines: sink.lines,
            });
        }
    }
}

impl Visit for SearchVisit<'_> {
    type State = SearchState;

    fn state(&self) -> SearchState {
        SearchState {
            searcher: self.searcher.build(),
            files: Vec::new(),
            searched: 0,
        }
    }

    fn visit(&self, st: &mut SearchState, item: &Item<'_>) -> bool {
        if item.file_type != FileType::RegularFile {
            return !self.budget.stop.load(Ordering::Relaxed);
        }
        if self
            .include
            .as_ref()
            .is_some_and(|f| !f.is_match(item.name, || item.rel()))
        {
            return true;
        }
        if !self.budget.next_file() {
            return false;
        }
        self.search_fd(st, item.dir, item.name, || item.canon());
        !self.budget.stop.load(Ordering::Relaxed)
    }
}

struct FindVisit<'a> {
    ws: &'a Workspace,
    style: Style,
    patterns: Filter,
    budget: &'a Budget,
}

impl Visit for FindVisit<'_> {
    type State = Vec<Found>;

    fn state(&self) -> Vec<Found> {
        Vec::new()
    }

    fn visit(&self, st: &mut Vec<Found>, item: &Item<'_>) -> bool {
        if !self.budget.next_file() {
            return false;
        }
        if self.patterns.is_match(item.name, || item.rel()) {
            if !Budget::take(&self.budget.results, 1) {
                self.budget.cut(Truncation::MaxResults);
                return false;
            }
            st.push(Found {
                path: self.ws.render(self.style, &item.canon()),
                kind: EntryKind::from_file_type(item.file_type),
            });
        }
        true
    }
}

fn build_matcher(req: &SearchRequest) -> Result<RegexMatcher> {
    if req.pattern.is_empty() {
        return Err(Error::InvalidPattern {
            pattern: String::new(),
            why: "the search pattern is empty".to_owned(),
        });
    }
    RegexMatcherBuilder::new()
        .case_insensitive(req.case_insensitive)
        .fixed_strings(req.literal)
        .line_terminator(Some(b'\n'))
        .build(&req.pattern)
        .map_err(|e| Error::InvalidPattern {
            pattern: req.pattern.clone(),
            why: e.to_string(),
        })
}

impl Workspace {
    /// Searches file contents under a directory (or in one file), skipping binary files,
    /// denied entries and, unless asked, hidden names; never follows symlinks.
    pub fn search(&self, req: &SearchRequest) -> Result<SearchOutcome> {
        self.search_with_threads(req, default_threads())
    }

    /// [`Self::search`] that also never searches or shows what `hidden` matches (the
    /// searched path included, by its spelling or its canonical path), exactly like a deny
    /// glob.
    pub fn search_hiding(
        &self,
        req: &SearchRequest,
        hidden: &HiddenPaths,
    ) -> Result<SearchOutcome> {
        self.search_inner(req, default_threads(), Some(hidden))
    }

    /// [`Self::search`] with an explicit number of worker threads.
    pub fn search_with_threads(
        &self,
        req: &SearchRequest,
        threads: usize,
    ) -> Result<SearchOutcome> {
        self.search_inner(req, threads, None)
    }

    fn search_inner(
        &self,
        req: &SearchRequest,
        threads: usize,
        hidden: Option<&HiddenPaths>,
    ) -> Result<SearchOutcome> {
        let l = self.limits();
        let max_results = cap(
            "max_results",
            req.max_results,
            l.default_search_results,
            l.max_search_results,
        )?;
        let max_bytes = cap(
            "max_bytes",
            req.max_bytes,
            l.default_search_bytes,
            l.max_search_bytes,
        )?;
        let timeout = cap(
            "timeout",
            req.timeout,
            l.default_search_time,
            l.max_search_time,
        )?;
        if req.context_lines > l.max_context_lines {
            return Err(Error::InvalidRequest {
                field: "context_lines",
                why: format!(
                    "{} is above the maximum of {}",
                    req.context_lines, l.max_context_lines
                ),
            });
        }
        let matcher = build_matcher(req)?;
        let include = Filter::new("include", &req.include)?;
        let exclude = Filter::new("exclude", &req.exclude)?;
        let r = self.request(&req.path)?;
        let resolved = self.resolve_hiding(&r, true, Access::Read, hidden)?;
        let mut sb = SearcherBuilder::new();
        sb.line_number(true)
            .before_context(req.context_lines)
            .after_context(req.context_lines)
            .binary_detection(BinaryDetection::quit(0))
            .heap_limit(Some(l.max_read_bytes.max(1 << 20) as usize));
        let budget = Budget::new(timeout, max_results, max_bytes, l.max_search_files);
        let visitor = SearchVisit {
            ws: self,
            style: r.style,
            matcher,
            include,
            searcher: sb,
            budget: &budget,
        };
        let states = match FileType::from_raw_mode(resolved.stat.st_mode) {
            FileType::Directory => walk(
                self,
                &resolved.canon,
                &WalkSpec {
                    include_hidden: req.include_hidden,
                    gitignore: req.respect_gitignore,
                    exclude: exclude.as_ref(),
                    hidden,
                    threads,
                },
                &visitor,
            ),
            FileType::RegularFile => {
                let mut st = visitor.state();
                let parent = resolved.canon.parent().unwrap_or(Path::new(""));
                let (dir, _) = self.open_dir(r.shown, parent, false)?;
                if let Some(name) = resolved.canon.file_name() {
                    budget.next_file();
                    visitor.search_fd(&mut st, std::os::fd::AsFd::as_fd(&dir), name, || {
                        resolved.canon.clone()
                    });
                }
                vec![st]
            }
            _ => {
                return Err(Error::NotAFile {
                    path: r.shown.to_owned(),
                    kind: crate::workspace::special_kind(&resolved.stat),
                });
            }
        };
        let mut files = Vec::new();
        let mut searched = 0;
        for st in states {
            searched += st.searched;
            files.extend(st.files);
        }
        files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        let match_count = files
            .iter()
            .map(|f| f.lines.iter().filter(|l| l.is_match).count())
            .sum();
        Ok(SearchOutcome {
            files,
            match_count,
            files_searched: searched,
            truncated: budget.truncated(),
        })
    }

    /// Finds paths under a directory whose path relative to it matches any glob.
    pub fn find(&self, req: &FindRequest) -> Result<FindOutcome> {
        self.find_inner(req, None)
    }

    /// [`Self::find`] that also never shows what `hidden` matches (the directory searched
    /// under included, by its spelling or its canonical path), exactly like a deny glob.
    pub fn find_hiding(&self, req: &FindRequest, hidden: &HiddenPaths) -> Result<FindOutcome> {
        self.find_inner(req, Some(hidden))
    }

    fn find_inner(&self, req: &FindRequest, hidden: Option<&HiddenPaths>) -> Result<FindOutcome> {
        let l = self.limits();
        let max_results = cap(
            "max_results",
            req.max_results,
            l.default_find_results,
            l.max_find_results,
        )?;
        let timeout = cap(
            "timeout",
            req.timeout,
            l.default_search_time,
            l.max_search_time,
        )?;
        let Some(patterns) = Filter::new("patterns", &req.patterns)? else {
            return Err(Error::InvalidRequest {
                field: "patterns",
                why: "at least one glob is required".to_owned(),
            });
        };
        let exclude = Filter::new("exclude", &req.exclude)?;
        let r = self.request(&req.path)?;
        let resolved = self.resolve_hiding(&r, true, Access::Read, hidden)?;
        if FileType::from_raw_mode(resolved.stat.st_mode) != FileType::Directory {
            return Err(Error::NotADirectory {
                path: r.shown.to_owned(),
            });
        }
        let budget = Budget::new(timeout, max_results, usize::MAX, l.max_search_files);
        let visitor = FindVisit {
            ws: self,
            style: r.style,
            patterns,
            budget: &budget,
        };
        let spec = WalkSpec {
            include_hidden: req.include_hidden,
            gitignore: req.respect_gitignore,
            exclude: exclude.as_ref(),
            hidden,
            threads: default_threads(),
        };
        let mut matches: Vec<Found> = walk(self, &resolved.canon, &spec, &visitor)
            .into_iter()
            .flatten()
            .collect();
        matches.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        Ok(FindOutcome {
            matches,
            truncated: budget.truncated(),
        })
    }
}
