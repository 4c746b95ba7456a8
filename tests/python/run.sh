#!/usr/bin/env bash
# Generates Python stubs from proto/ with grpcio-tools and runs the Python client tests
# against the real binaries built by cargo.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="$repo/target/python-venv"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"

# The official MCP TypeScript SDK (pinned, from npm) for test_mcp_clients.py.
ts_sdk_version="1.32.2"
node_prefix="$repo/target/mcp-typescript"
if ! grep -qs "\"version\": \"$ts_sdk_version\"" "$node_prefix/node_modules/@modelcontextprotocol/sdk/package.json"; then
  npm install --silent --no-audit --no-fund --prefix "$node_prefix" "@modelcontextprotocol/sdk@$ts_sdk_version" >/dev/null
fi
export TOOLGATE_TEST_NODE_PATH="$node_prefix/node_modules"

gen="$here/gen"
rm -rf "$gen" && mkdir -p "$gen"
"$venv/bin/python" -m grpc_tools.protoc -I "$repo/proto" \
  --python_out="$gen" --grpc_python_out="$gen" \
  $(cd "$repo/proto" && find toolgate -name '*.proto' | sort)

# The binaries cargo built: under CARGO_TARGET_DIR when it is set.
export TOOLGATE_TEST_BIN_DIR="${TOOLGATE_TEST_BIN_DIR:-${CARGO_TARGET_DIR:-$repo/target}/debug}"
cd "$here"
PYTHONPATH="$gen:$here" "$venv/bin/python" -m pytest -q "$here"
