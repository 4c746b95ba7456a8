#!/usr/bin/env python3
"""Builds everyday.txt from tldr-pages (https://github.com/tldr-pages/tldr, CC BY 4.0).

Usage: extract_tldr.py <tldr git dir> <commit> > everyday.txt

Takes the command examples of common developer tools from pages/common and pages/linux,
rewrites their {{placeholders}} into concrete workspace-relative arguments, and sorts each
example into "everyday" (reads, or writes only inside the workspace, no network) or one of
the excluded classes: it needs the network, publishes, destroys work, changes privileges or
the machine, or is interactive. The sorting looks at what the command does (program,
subcommand, options, URLs), never at what the policy decides.
"""
import re
import subprocess
import sys

TOOLS = """
git git-add git-blame git-branch git-checkout git-cherry git-commit git-config git-describe
git-diff git-for-each-ref git-grep git-log git-ls-files git-ls-tree git-merge git-mv git-reflog
git-remote git-restore git-rev-list git-rev-parse git-shortlog git-show git-show-ref git-stash
git-status git-switch git-tag git-worktree git-cat-file git-count-objects git-format-patch
git-apply git-am git-bisect git-clean git-reset git-rebase git-push git-pull git-fetch git-clone
git-cherry-pick git-revert git-notes git-archive git-check-ignore git-fsck git-gc git-init
git-rm git-submodule git-whatchanged git-var git-check-attr git-difftool git-bundle git-commit-tree
cargo cargo-build cargo-check cargo-test cargo-run cargo-doc cargo-fmt cargo-clippy cargo-tree
cargo-metadata cargo-clean cargo-bench cargo-new cargo-init cargo-add cargo-remove cargo-update
cargo-fix cargo-package cargo-vendor cargo-rustc cargo-rustdoc cargo-pkgid cargo-locate-project
rustc rustfmt rustup rustdoc
go go-build go-test go-vet go-fmt go-run go-env go-version go-doc go-mod go-generate go-list gofmt
python python3 pip pip-install pip-list pip-show pip-freeze pytest black ruff mypy flake8 pylint
isort tox poetry uv pipenv coverage
node npm npm-run npm-test npm-ls npm-install npm-ci npm-init npm-outdated npm-audit yarn pnpm npx
tsc eslint prettier deno bun jest vitest
gcc g++ clang clang++ cc make cmake ninja meson javac java mvn gradle kotlinc
ls cat grep rg fd bat find sed awk jq yq head tail wc sort uniq cut tr diff cmp comm paste join
column nl od xxd hexdump strings file stat du df tree realpath readlink basename dirname
touch mkdir cp mv ln chmod tee xargs seq date echo printf env printenv ps free uptime uname
whoami id hostname nproc which type tar gzip gunzip zip unzip xz bzip2 zcat md5sum sha256sum
sha1sum base64 split csplit tac rev fold fmt expand shuf less more sleep timeout time true false
test pwd cd export sqlite3 shellcheck shfmt clang-format ctags cloc tokei hyperfine patch
diff3 sdiff iconv dos2unix nm objdump readelf ldd strace ltrace gdb valgrind perf protoc
docker docker-build docker-run docker-ps docker-images
""".split()

NETWORK_PROGRAMS = {"curl", "wget", "ssh", "scp", "rsync", "ping", "dig", "nc", "telnet"}
NETWORK_SUBCOMMANDS = {
    "git": {"clone", "fetch", "pull", "push", "ls-remote", "submodule"},
    "cargo": {"install", "add", "update", "publish", "search", "login", "owner", "yank", "vendor", "fetch", "new", "init"},
    "npm": {"install", "i", "ci", "update", "outdated", "audit", "publish", "login", "view", "info", "search", "init", "add", "exec", "create", "uninstall", "dedupe", "star", "unpublish", "adduser", "access", "owner", "deprecate", "dist-tag"},
    "yarn": {"install", "add", "upgrade", "publish", "login", "info", "outdated", "create", "global", "init", "remove", "dlx"},
    "pnpm": {"install", "add", "update", "publish", "outdated", "audit", "dlx", "create", "remove", "i"},
    "pip": {"install", "download", "search", "uninstall", "index"},
    "pip3": {"install", "download", "search", "uninstall", "index"},
    "poetry": {"add", "install", "update", "publish", "new", "init", "remove", "lock", "search", "self"},
    "uv": {"add", "sync", "pip", "tool", "publish", "lock", "python", "init", "remove", "self", "venv", "run"},
    "pipenv": {"install", "update", "uninstall", "lock", "sync"},
    "go": {"get", "install", "mod"},
    "docker": {"pull", "push", "login", "run", "build", "search", "exec", "ps", "images", "start", "stop", "rm", "rmi", "container", "image", "network", "volume", "compose", "system", "logs", "cp", "tag", "save", "load", "commit", "inspect", "kill", "restart", "attach", "top", "stats"},
    "rustup": {"update", "install", "toolchain", "target", "component", "self", "default", "override", "set", "run", "doc", "uninstall", "init"},
    "deno": {"install", "upgrade", "compile"},
    "bun": {"install", "add", "upgrade", "create", "x", "remove", "publish"},
    "mvn": {"install", "deploy", "dependency:get", "package", "compile", "test", "clean", "verify"},
    "gradle": {"build", "test", "assemble", "clean", "publish", "dependencies", "init", "wrapper", "run"},
    "tox": set(),
}
DESTROYS = [
    (r"^rm .*(-[a-zA-Z]*[rRf]|--recursive|--force)", "recursive or forced deletion"),
    (r"^rm ", "deletes files"),
    (r"^rmdir ", "deletes directories"),
    (r"^git (reset|clean|rebase|filter-branch|stash (drop|clear)|cherry-pick --abort|rm|gc|prune|reflog (expire|delete))", "git discards or rewrites work"),
    (r"^git (checkout|restore) .*(--|\.|-f|--force|--theirs|--ours|-p)( |$)", "git discards work-tree changes"),
    (r"^git restore ", "git discards work-tree changes"),
    (r"^git (checkout|switch) .*(-f|--force|--discard-changes|-B)( |$)", "git discards work-tree changes"),
    (r"^git commit .*--amend", "rewrites history"),
    (r"^git branch .*(-[dD]|--delete|-[mM]|--move|-f|--force)( |$)", "deletes or moves branches"),
    (r"^git tag .*(-d|--delete|-f|--force)( |$)", "deletes tags"),
    (r"^git stash( |$)(?!list|show)", "stash drops or moves work"),
    (r"^git worktree (remove|prune)", "deletes worktrees"),
    (r"^cargo clean", "deletes the build directory"),
    (r"^find .*(-delete|-exec rm)", "deletes found files"),
    (r"^(shred|truncate|dd) ", "destroys content"),
    (r"^mv .* (/|~)", "moves work out of the workspace"),
    (r"^xargs .*rm", "deletes piped names"),
]
PRIVILEGE = re.compile(r"^(sudo|su|doas|chown|chgrp|mount|umount|systemctl|service|apt|apt-get|dnf|yum|pacman|brew|snap|crontab|useradd|passwd|reboot|shutdown|kill|killall|pkill|renice|nice|sysctl|modprobe|iptables|hostname [a-z])")
# Interactive: editors, pagers and monitors; REPLs started without a program; git's
# interactive modes. An agent's run has no terminal.
INTERACTIVE = re.compile(r"^((less|more|vim|vi|nano|emacs|top|htop|gdb|perf top|git difftool|git mergetool|git bisect)( |$)|(python3?|node|deno|bun|irb|sqlite3|ts-node)$|git (add|commit|rebase|stash (push|save)|checkout|restore|reset|clean) (.* )?(-i|--interactive|-p|--patch)( |$))")

VALUES = [
    # (placeholder regex, replacement)
    (r"^path/to/.*(directory|dir|folder|dir_name|project)", "src"),
    (r"^path/to/.*\.(\w+)$", None),  # keep the extension: src/file.<ext>
    (r"^path/to/.*file", "src/main.rs"),
    (r"^path/to/", "src"),
    (r"(^|_)url|https?://|repository_url|remote_url", "https://example.com/repo.git"),
    (r"commit|hash|sha|revision|rev", "HEAD~1"),
    (r"branch", "feature"),
    (r"remote", "origin"),
    (r"tag|version", "v1.0.0"),
    (r"message|description|text|string|comment", "'update docs'"),
    (r"pattern|regex|search|query|keyword", "TODO"),
    (r"package|module|dependency|crate|library", "serde"),
    (r"^(n|number|count|lines|amount|depth|num|size|bytes|seconds|timeout|limit|jobs)", "5"),
    (r"author|user|name|email", "alice"),
    (r"file|script|source", "src/main.rs"),
    (r"dir|folder|path|target", "src"),
    (r"command|program", "ls"),
    (r"", "value"),
]


def placeholder(text):
    inner = text.strip()
    alt = re.fullmatch(r"\[([^\]]*)\]", inner)
    if alt:  # {{[-r|--recursive]}}: take the short form
        return alt.group(1).split("|")[0]
    if "|" in inner and " " not in inner:
        return inner.split("|")[0]
    if inner.startswith("-") or re.fullmatch(r"[0-9]+", inner):
        return inner
    inner = inner.replace("...", "").strip()
    first = inner.split()[0] if inner.split() else inner
    low = first.lower()
    for pat, rep in VALUES:
        if re.search(pat, low):
            if rep is None:
                ext = re.search(r"\.(\w+)$", low).group(1)
                return "src/file." + ext
            return rep
    return "value"


def rewrite(cmd):
    return re.sub(r"\{\{(.*?)\}\}", lambda m: placeholder(m.group(1)), cmd)


def classify(cmd):
    words = cmd.split()
    if not words:
        return "empty"
    prog = words[0]
    sub = next((w for w in words[1:] if not w.startswith("-")), "")
    if "example.com" in cmd or "://" in cmd or "@" in cmd.split("'")[0]:
        return "needs the network"
    if re.match(r"git remote (show|update|prune)", cmd):
        return "needs the network"
    if prog in NETWORK_PROGRAMS or sub in NETWORK_SUBCOMMANDS.get(prog, ()):
        return "needs the network"
    if prog in ("npx", "pnpx", "bunx", "uvx", "pipx") or prog.startswith("docker"):
        return "needs the network"
    if prog in ("mvn", "gradle", "tox", "poetry", "pipenv"):
        return "needs the network"
    if re.search(r"\b(publish|push|upload|deploy)\b", cmd):
        return "publishes"
    for pat, why in DESTROYS:
        if re.search(pat, cmd):
            return "destroys work"
    if PRIVILEGE.search(cmd):
        return "privilege or machine change"
    if INTERACTIVE.search(cmd):
        return "interactive"
    if re.search(r"(^| )(/etc|/dev/sd|/proc/|/sys/|~/)", cmd):
        return "outside the workspace"
    return None


def main():
    repo, commit = sys.argv[1], sys.argv[2]
    everyday, excluded = [], {}
    seen = set()
    for tool in TOOLS:
        for platform in ("common", "linux"):
            r = subprocess.run(
                ["git", "--git-dir", repo, "show", f"{commit}:pages/{platform}/{tool}.md"],
                capture_output=True, text=True)
            if r.returncode != 0:
                continue
            for line in r.stdout.splitlines():
                m = re.fullmatch(r"`(.+)`", line.strip())
                if not m:
                    continue
                cmd = rewrite(m.group(1)).strip()
                if cmd.startswith("<"):
                    continue  # keystrokes of an interactive program, not a command
                if cmd in seen or "\n" in cmd:
                    continue
                seen.add(cmd)
                why = classify(cmd)
                if why is None:
                    everyday.append((tool, cmd))
                else:
                    excluded.setdefault(why, []).append(cmd)
            break
    total_ex = sum(len(v) for v in excluded.values())
    print("# Everyday developer commands, one bash script per line (`#` comments, blank lines ignored).")
    print("#")
    print("# Source: the command examples of tldr-pages (https://github.com/tldr-pages/tldr, commit")
    print(f"# {commit}), licensed CC BY 4.0 by the tldr-pages team and contributors;")
    print("# placeholders rewritten into concrete workspace-relative arguments by extract_tldr.py,")
    print("# plus hand-written lines at the end (everyday forms the issue names).")
    print("#")
    print(f"# {len(everyday)} examples kept. {total_ex} examples excluded because they are not")
    print("# everyday work inside a workspace without network; by class:")
    for why, cmds in sorted(excluded.items(), key=lambda kv: -len(kv[1])):
        print(f"#   {len(cmds):4}  {why}")
    print("# The excluded ones are listed, commented out, at the end of this file.")
    print()
    last = None
    for tool, cmd in everyday:
        if tool != last:
            print(f"\n# {tool}")
            last = tool
        print(cmd)
    print(HAND)
    print("\n# ---- excluded ----")
    for why, cmds in sorted(excluded.items()):
        print(f"\n# excluded: {why}")
        for c in cmds:
            print(f"#x {c}")


HAND = r"""
# hand-written: the forms issue 25 names, and everyday plumbing
git reflog -n 5
git for-each-ref
cargo tree
npm ls
pip list
go env GOPATH
ps aux
free -h
bat README.md
fd -e txt
ruff format src
gofmt -w main.go
rustc src/main.rs
tsc
cargo t
cargo doc
npm run test
python -m pytest
ls -d */
awk '($10 >= 10)' data.txt
xxd -c 10 data.bin
python3 --version
git config alias.x
exit 1
export FOO=1
sleep 1
mkdir -p build
pytest -q || exit 1
printenv
env
tee out.txt < in.txt
cat in.txt > out.txt
set -euo pipefail; cargo build
test -f Cargo.toml && echo yes
for f in src/*.py; do black "$f"; done
cargo build 2>&1 | tail -20
make -j4
./scripts/build.sh
bash scripts/test.sh
source .venv/bin/activate && pytest
node scripts/gen.js
python3 tools/codegen.py --out src/gen
npx prettier --check src
grep -rn TODO src | wc -l
find . -name '*.rs' | xargs wc -l
sed -i 's/foo/bar/g' src/lib.rs
perl -pi -e 's/\r$//' src/file.txt
chmod +x scripts/build.sh
cp -r templates build/templates
mv build/out.txt dist/out.txt
tar czf dist.tar.gz dist
cd frontend && npm test
git -C vendor/lib log -1
echo "$PATH"
ls $HOME
wc -l $(git ls-files '*.rs')
"""

if __name__ == "__main__":
    main()
