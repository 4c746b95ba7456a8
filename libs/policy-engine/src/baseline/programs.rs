//! The findings of single programs whose arguments the baseline reads closely: what they
//! delete, which operands are paths, which options run code or write files. Each returns
//! whether an option makes the program unsafe where that applies.

use crate::access::Access;
use crate::argv::Args;
use crate::baseline::sed_awk::{
    awk_program_is_safe, awk_strings, sed_exec_commands, sed_flags, sed_script_is_safe,
};
use crate::baseline::{
    ArgvFindings, DD_DEVICE, OPAQUE_DESTRUCTION, RM_RECURSIVE, RM_ROOT, embedded_commands,
    find_exec_commands, find_starts, is_deleter, is_root_target, leaves_workspace, path_rule,
};

/// `dd if=... of=...`: writing a device is denied.
pub(super) fn dd(args: &[String], f: &mut ArgvFindings) {
    for a in args {
        if let Some(v) = a.strip_prefix("of=") {
            let p = crate::paths::normalise(v);
            if p.starts_with("/dev/") && path_rule(&p, Access::Write).is_some() {
                f.rules.push(&DD_DEVICE);
            }
            f.paths.push((v.to_owned(), Access::Write));
        } else if let Some(v) = a.strip_prefix("if=") {
            f.paths.push((v.to_owned(), Access::Read));
        }
    }
}

/// `rm`, `rmdir`, `unlink`: recursive or forced removal, and of the root.
pub(super) fn rm(parsed: &Args<'_>, f: &mut ArgvFindings) {
    let ops = &parsed.operands;
    let recursive = parsed.has(&["-r", "-R", "--recursive"]);
    let forced = parsed.has(&["-f", "--force"]);
    if recursive || forced {
        f.rules.push(&RM_RECURSIVE);
    }
    let root_target = ops.iter().any(|o| is_root_target(o));
    if parsed.has(&["--no-preserve-root"]) || ((recursive || forced) && root_target) {
        f.rules.push(&RM_ROOT);
    }
    f.paths
        .extend(ops.iter().map(|o| ((*o).to_owned(), Access::Write)));
}

/// `find`: actions that run programs, delete or write files.
pub(super) fn find(args: &[String], f: &mut ArgvFindings) -> bool {
    const BAD: &[&str] = &[
        "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls",
    ];
    let unsafe_flag = args.iter().any(|a| BAD.contains(&a.as_str()));
    // Deleting what it finds, itself or through a deleting program, removes files
    // nobody named.
    if args.iter().any(|a| a == "-delete")
        || find_exec_commands(args).iter().any(|argv| {
            argv.first().is_some_and(|p| {
                let p = p.rsplit('/').next().unwrap_or(p);
                is_deleter(p) || matches!(p, "git" | "mv" | "truncate" | "dd")
            })
        })
    {
        f.rules.push(&OPAQUE_DESTRUCTION);
    }
    let starts = find_starts(args);
    // `find / -delete` is `rm -rf /` spelled differently.
    if args.iter().any(|a| a == "-delete") && starts.iter().any(|p| is_root_target(p)) {
        f.rules.push(&RM_ROOT);
    }
    for a in starts {
        f.paths.push((a.to_owned(), Access::Read));
    }
    unsafe_flag
}

/// `rg`: preprocessors and decompressors run programs.
pub(super) fn rg(parsed: &Args<'_>, f: &mut ArgvFindings) -> bool {
    // rg has no table: every letter of a cluster counts, and so does any prefix of
    // a long option (`--p=sh`).
    let unsafe_flag = parsed.may_have(&["--pre", "--hostname-bin", "--search-zip", "-z"]);
    // The first operand is the pattern unless one came from -e/-f.
    let skip = usize::from(!parsed.may_have(&["-e", "-f", "--regexp", "--file"]));
    f.paths.extend(
        parsed
            .operands
            .iter()
            .skip(skip)
            .map(|o| ((*o).to_owned(), Access::Read)),
    );
    unsafe_flag
}

/// `grep`: which operands are files.
pub(super) fn grep(parsed: &Args<'_>, f: &mut ArgvFindings) {
    // The first operand is the pattern unless one came from -e/-f.
    let skip = usize::from(
        parsed
            .values_of(&["-e", "-f", "--regexp", "--file"])
            .next()
            .is_none(),
    );
    f.paths.extend(
        parsed
            .operands
            .iter()
            .skip(skip)
            .map(|o| ((*o).to_owned(), Access::Read)),
    );
}

/// `sed`: scripts that write or run commands.
pub(super) fn sed(parsed: &Args<'_>, f: &mut ArgvFindings) -> bool {
    let ops = &parsed.operands;
    let (mut unsafe_flag, scripts_from_flags) = sed_flags(parsed);
    let skip = usize::from(!scripts_from_flags);
    if !scripts_from_flags {
        unsafe_flag |= ops.first().is_none_or(|s| !sed_script_is_safe(s));
    }
    let scripts = parsed
        .values_of(&["-e", "--expression"])
        .chain(ops.first().copied().filter(|_| !scripts_from_flags));
    for script in scripts.filter(|s| !sed_script_is_safe(s)) {
        f.scripts.extend(sed_exec_commands(script));
    }
    f.paths.extend(
        ops.iter()
            .skip(skip)
            .map(|o| ((*o).to_owned(), Access::Read)),
    );
    unsafe_flag
}

/// `awk` and its variants: programs that run commands, write files or load code.
pub(super) fn awk(parsed: &Args<'_>, f: &mut ArgvFindings) -> bool {
    let ops = &parsed.operands;
    // Program text comes from -e/--source (gawk), from files (-f, -E, -i, -l), or
    // else from the first operand.
    let sources: Vec<&str> = parsed.values_of(&["-e", "--source"]).collect();
    // `-f`/`-E` replace the program operand; `-i`/`-l` load code next to it.
    let from_file = parsed
        .values_of(&["-f", "--file", "-E", "--exec"])
        .next()
        .is_some();
    let loads = parsed
        .values_of(&["-i", "--include", "-l", "--load"])
        .next()
        .is_some();
    let program_operand = sources.is_empty() && !from_file;
    // gawk writes files with `-d`/`-o`/`-p` (dump, pretty-print, profile), reads
    // debugger commands with `-D`, and `-W` spells any gawk long option or mawk's
    // `-W exec file`.
    let writes_or_debugs = parsed.has(&[
        "-d",
        "-D",
        "-o",
        "-p",
        "-W",
        "--dump-variables",
        "--debug",
        "--pretty-print",
        "--profile",
    ]);
    let programs = sources
        .iter()
        .copied()
        .chain(ops.first().copied().filter(|_| program_operand));
    for program in programs {
        f.scripts.extend(embedded_commands(program));
        // A program that runs commands may build them from any of its strings
        // (`c="rm -rf /"; system(c)`): each string is analysed as a command too.
        if program.contains("system") || program.contains('|') {
            f.scripts.extend(awk_strings(program));
        }
    }
    f.paths.extend(
        ops.iter()
            .skip(usize::from(program_operand))
            .filter(|o| !o.contains('='))
            .map(|o| ((*o).to_owned(), Access::Read)),
    );
    writes_or_debugs
        || loads
        || from_file
        || sources.iter().any(|p| !awk_program_is_safe(p))
        || (program_operand && ops.first().is_none_or(|p| !awk_program_is_safe(p)))
}

/// `touch`, `mkdir`, `truncate`, `tee`, `mv`, `mktemp`: every operand is written, and moving
/// a file out of the workspace deletes it from the work.
pub(super) fn writers(name: &str, parsed: &Args<'_>, f: &mut ArgvFindings) {
    let ops = &parsed.operands;
    let target = parsed
        .values_of(&["-t", "--target-directory"])
        .last()
        .or_else(|| ops.last().copied().filter(|_| ops.len() > 1));
    if name == "mv" && target.is_some_and(leaves_workspace) {
        f.rules.push(&OPAQUE_DESTRUCTION);
    }
    f.paths
        .extend(ops.iter().map(|o| ((*o).to_owned(), Access::Write)));
}

/// `cp`, `ln`, `install`, `rsync`, `scp` without a target directory option: the last
/// operand is written, the others read.
pub(super) fn copy(name: &str, args: &[String], parsed: &Args<'_>, f: &mut ArgvFindings) -> bool {
    if name == "rsync"
        && args.iter().any(|a| {
            a.starts_with("--del") || a.starts_with("--remove-source") || a == "--prune-empty-dirs"
        })
    {
        f.rules.push(&OPAQUE_DESTRUCTION);
    }
    // `install --strip-program=PROG` runs PROG.
    let unsafe_flag = name == "install" && parsed.has(&["--strip-program"]);
    if let Some((last, rest)) = parsed.operands.split_last() {
        f.paths
            .extend(rest.iter().map(|o| ((*o).to_owned(), Access::Read)));
        f.paths.push(((*last).to_owned(), Access::Write));
    }
    unsafe_flag
}
