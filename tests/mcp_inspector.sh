#!/usr/bin/env bash
# The official MCP Inspector (CLI mode, pinned) against `toolgate mcp` over stdio: it lists
# the thirteen tools in order, finds nothing unportable in their schemas (--strict), and makes
# one real tool call through a running `toolgate up`.
# Usage: tests/mcp_inspector.sh <dir holding the toolgate binary>
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(cd "${1:-target/debug}" && pwd)"
inspector_version="2.12.0"
prefix="target/mcp-inspector"
if [ ! -x "$prefix/node_modules/.bin/mcp-inspector" ] \
  || ! grep -q "\"version\": \"$inspector_version\"" "$prefix/node_modules/@modelcontextprotocol/inspector/package.json"; then
  npm install --silent --no-audit --no-fund --prefix "$prefix" "@modelcontextprotocol/inspector@$inspector_version" >/dev/null
fi
inspector="$prefix/node_modules/.bin/mcp-inspector"

tmp="$(mktemp -d)"
up_pid=""
cleanup() {
  [ -n "$up_pid" ] && kill "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
mkdir "$tmp/ws"
echo "hello inspector" > "$tmp/ws/greeting.txt"
"$bin/toolgate" up --workspace "$tmp/ws" --data-dir "$tmp/data" --executor-listen 127.0.0.1:0 \
  --policy-listen 127.0.0.1:0 --mcp-listen 127.0.0.1:0 --json > "$tmp/up.json" 2> "$tmp/up.err" &
up_pid=$!
for _ in $(seq 1 100); do [ -s "$tmp/up.json" ] && break; sleep 0.1; done
field() { head -n1 "$tmp/up.json" | python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
executor="http://$(field '["executor"]')"
field '["tokens"]["agent"]' > "$tmp/agent.token"

server=("$bin/toolgate" mcp --executor "$executor" --token-file "$tmp/agent.token" --task-dir "$tmp/tasks")
# --strict: the Inspector's schema portability check fails (exit 6) on an error-severity
# finding; a warning is printed too, and none is expected.
"$inspector" --cli "${server[@]}" --method tools/list --strict > "$tmp/tools.json" 2> "$tmp/lint.txt"
if [ -s "$tmp/lint.txt" ]; then
  cat "$tmp/lint.txt" >&2
  echo "mcp inspector: the tool schemas are not portable" >&2
  exit 1
fi
python3 - "$tmp/tools.json" <<'PY'
import json, sys
tools = json.load(open(sys.argv[1]))["tools"]
names = [t["name"] for t in tools]
want = ["read_file", "write_file", "edit_file", "list_directory", "search_files", "find_files",
        "create_directory", "stat_path", "delete_path", "run_command", "list_runs",
        "read_run_output", "stop_run"]
assert names == want, names
assert next(t for t in tools if t["name"] == "delete_path")["annotations"]["destructiveHint"]
assert all(t["annotations"]["readOnlyHint"] for t in tools if t["name"] in want[:1] + want[3:6] + want[7:8] + want[10:12])
assert not any(t["annotations"]["readOnlyHint"] for t in tools if t["name"] not in want[:1] + want[3:6] + want[7:8] + want[10:12])
stop = next(t for t in tools if t["name"] == "stop_run")["annotations"]
assert stop["destructiveHint"] and stop["idempotentHint"] and not stop["openWorldHint"], stop
# Every output schema admits a refusal and a failure besides what the tool returns.
assert all([b["title"] for b in t["outputSchema"]["anyOf"]] == ["Ran", "Refusal", "Failure"] for t in tools)
print(f"mcp inspector: {len(names)} tools listed in order, schemas portable")
PY
"$inspector" --cli "${server[@]}" --method tools/call --tool-name read_file \
  --tool-arg path=greeting.txt > "$tmp/read.json"
python3 - "$tmp/read.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert not r.get("isError"), r
assert r["structuredContent"]["content"] == "hello inspector\n", r
assert r["_meta"]["dev.toolgate/decision"] == "auto", r
print("mcp inspector: read_file ran through the executor")
PY
