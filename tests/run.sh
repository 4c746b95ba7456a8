#!/usr/bin/env bash
# The whole toolgate test suite: every Rust test (unit, storage on Postgres and SQLite,
# end-to-end against the real binaries) and the Python client tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Storage and end-to-end tests need the machine's Postgres; start it if it is down.
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
fi
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

# The egress tests' fake internet (services/cli/tests/cli/support/internet.rs) runs its servers
# with python3, openssl, git and sshd (git over ssh), and its clients are curl, python3, node and
# git: install what is missing.
missing=()
for tool in /usr/sbin/sshd:openssh-server /usr/bin/ssh:openssh-client /usr/bin/openssl:openssl \
  /usr/bin/curl:curl /usr/bin/python3:python3 /usr/sbin/ip:iproute2 /usr/bin/setpriv:util-linux; do
  [ -x "${tool%%:*}" ] || missing+=("${tool##*:}")
done
command -v git >/dev/null || missing+=(git)
command -v node >/dev/null || missing+=(nodejs)
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get install -y "${missing[@]}" || { apt-get update && apt-get install -y "${missing[@]}"; }
fi

cargo build --workspace --bins --locked
cargo test --workspace --locked

# The Python client tests run every scenario twice: against `toolgate up` (SQLite) and against
# separate toolgate-policy (a fresh Postgres database from DATABASE_URL) + toolgate-executor.
tests/python/run.sh

# The official MCP Inspector (pinned, from npm) lists the tools of `toolgate mcp` over stdio
# and makes one tool call through it.
tests/mcp_inspector.sh "${CARGO_TARGET_DIR:-target}/debug"

# Two executor processes over one workspace directory, as two pods over one ReadWriteMany
# volume (deploy/kubernetes/README.md): no torn file, no lost conditional update.
PYTHONPATH=tests/python/gen target/python-venv/bin/python deploy/workspace/two_executors.py \
  "${CARGO_TARGET_DIR:-target}/debug"
