// The official MCP TypeScript SDK (the client every TS-based agent builds on) against
// toolgate's MCP server: every tool, and every kind of refusal, must reach the caller
// through `client.callTool`, which checks `structuredContent` against the tool's
// `outputSchema` whether or not `isError` is set.
//
// Run by tests/python/test_mcp_typescript.py with node's test runner; the SDK comes from
// NODE_PATH (installed pinned by tests/python/run.sh). Environment:
//   TG_TRANSPORT       stdio | http
//   TG_BIN             the toolgate binary
//   TG_EXECUTOR        http://host:port of the executor
//   TG_POLICY          http://host:port of the policy service (approvals)
//   TG_MCP_URL         the streamable HTTP endpoint (http only)
//   TG_AGENT_TOKEN, TG_APPROVER_TOKEN
//   TG_WORKSPACE       the workspace directory

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { execFileSync } = require("node:child_process");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const env = process.env;
const TOOLS = ["read_file", "write_file", "edit_file", "list_directory", "search_files",
  "find_files", "create_directory", "stat_path", "delete_path", "run_command", "list_runs",
  "read_run_output", "stop_run"];

async function connect(token = env.TG_AGENT_TOKEN) {
  const client = new Client({ name: "toolgate-ts-test", version: "1.0.0" });
  let transport;
  if (env.TG_TRANSPORT === "http") {
    transport = new StreamableHTTPClientTransport(new URL(env.TG_MCP_URL), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
  } else {
    transport = new StdioClientTransport({
      command: env.TG_BIN,
      args: ["mcp", "--executor", env.TG_EXECUTOR, "--task-dir", "off"],
      env: { PATH: env.PATH, TOOLGATE_TOKEN: token, TOOLGATE_LOG: "warn" },
      stderr: "pipe",
    });
  }
  await client.connect(transport);
  // The SDK checks results against the schemas it saw in tools/list.
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name), TOOLS);
  return client;
}

function approvals(...args) {
  return execFileSync(env.TG_BIN, ["approvals", ...args, "--policy", env.TG_POLICY], {
    env: { PATH: env.PATH, TOOLGATE_TOKEN: env.TG_APPROVER_TOKEN },
  }).toString();
}

// Paths a run asks about are its own: the stdio session is stable across processes, so a
// decision made in an earlier run would answer for the same call.
const tag = `${env.TG_TRANSPORT}-${process.pid}`;

const text = (r) => r.content.map((c) => c.text).join("\n");

test("every tool answers through the SDK, called with its required arguments only", async () => {
  const c = await connect();
  try {
    fs.mkdirSync(path.join(env.TG_WORKSPACE, "ts"), { recursive: true });
    fs.writeFileSync(path.join(env.TG_WORKSPACE, "ts", "seed.txt"), "alpha\nbeta\n");
    const call = async (name, args) => {
      const r = await c.callTool({ name, arguments: args });
      assert.ok(!r.isError, `${name}: ${text(r)}`);
      assert.ok(r.structuredContent, name);
      assert.equal(r._meta["dev.toolgate/decision"], "auto", name);
      return r.structuredContent;
    };
    const w = await call("write_file", { path: "ts/a.txt", content: "one\ntwo\n" });
    assert.equal(w.created, true);
    const r = await call("read_file", { path: "ts/a.txt" });
    assert.equal(r.content, "one\ntwo\n");
    const e = await call("edit_file", { path: "ts/a.txt", old_text: "two", new_text: "deux" });
    assert.match(e.unified_diff, /\+deux/);
    // `{}`: the schema says an empty path is the root.
    const root = await call("list_directory", {});
    assert.ok(root.entries.some((x) => x.name === "ts"), JSON.stringify(root));
    const s = await call("search_files", { pattern: "beta" });
    assert.equal(s.matches[0].path, "ts/seed.txt");
    const f = await call("find_files", { patterns: ["**/*.txt"] });
    assert.ok(f.paths.includes("ts/a.txt"), JSON.stringify(f));
    const m = await call("create_directory", { path: "ts/sub" });
    assert.equal(m.created, true);
    const st = await call("stat_path", { path: "ts/a.txt" });
    assert.equal(st.type, "file");
    const run = await call("run_command", { script: "echo hello" });
    assert.equal(run.stdout.text, "hello\n");
    assert.equal(run.exit_code, 0);
  } finally {
    await c.close();
  }
});

test("a background run is started, listed, read and stopped", async () => {
  const c = await connect();
  try {
    const call = async (name, args) => {
      const r = await c.callTool({ name, arguments: args });
      assert.ok(!r.isError, `${name}: ${text(r)}`);
      return r.structuredContent;
    };
    const started = await call("run_command", {
      script: "echo ready; while :; do echo tick; sleep 0.05; done", background: true,
    });
    assert.equal(started.status, "running");
    assert.equal(started.background, true);
    const id = started.run_id;
    assert.match(id, /\S/);
    const listed = await call("list_runs", {});
    assert.deepEqual(listed.runs.filter((r) => r.run_id === id).map((r) => r.state), ["running"]);
    let read;
    const deadline = Date.now() + 30000;
    do {
      read = await call("read_run_output", { run_id: id });
      if (read.text.startsWith("ready\ntick\n")) break;
      await new Promise((ok) => setTimeout(ok, 50));
    } while (Date.now() < deadline);
    assert.ok(read.text.startsWith("ready\ntick\n"), JSON.stringify(read));
    assert.equal(read.offset, 0);
    assert.equal(read.eof, false);
    const tail = await call("read_run_output", { run_id: id, offset: 6, max_bytes: 5 });
    assert.equal(tail.text, "tick\n");
    assert.equal(tail.next_offset, 11);
    const stopped = await call("stop_run", { run_id: id, kill: true });
    assert.equal(stopped.run.run_id, id);
    let ended;
    do {
      const all = await call("list_runs", { include_finished: true });
      ended = all.runs.find((r) => r.run_id === id);
      if (ended.state !== "running") break;
      await new Promise((ok) => setTimeout(ok, 50));
    } while (Date.now() < deadline);
    assert.equal(ended.state, "exited", JSON.stringify(ended));
    assert.ok(["signaled", "cancelled"].includes(ended.status), JSON.stringify(ended));
    const unknown = await c.callTool({ name: "read_run_output", arguments: { run_id: "run_nosuchrun" } });
    assert.equal(unknown.isError, true);
    assert.equal(unknown.structuredContent.error.reason, "RUN_NOT_FOUND");
  } finally {
    await c.close();
  }
});

test("a call missing a required argument says which", async () => {
  const c = await connect();
  try {
    for (const [name, field] of [["read_file", "path"], ["run_command", "script"],
      ["find_files", "patterns"], ["search_files", "pattern"], ["read_run_output", "run_id"],
      ["stop_run", "run_id"]]) {
      const r = await c.callTool({ name, arguments: {} });
      assert.equal(r.isError, true, name);
      assert.match(text(r), new RegExp(`missing field \`${field}\``), name);
      assert.equal(r.structuredContent.error.code, "INVALID_ARGUMENT");
    }
  } finally {
    await c.close();
  }
});

test("refusals reach the caller: policy deny, failures, ask, approve, human deny", async () => {
  const c = await connect();
  try {
    // The policy denies: an error whose reason and guidance the model reads.
    const deny = await c.callTool({ name: "run_command", arguments: { script: "shutdown -h now" } });
    assert.equal(deny.isError, true);
    assert.equal(deny.structuredContent.decision, "deny");
    assert.equal(deny.structuredContent.rule_id, "no-shutdown");
    assert.match(deny.structuredContent.reason, /never allowed/);
    assert.match(deny.structuredContent.guidance, /do something else/);
    assert.match(text(deny), /no-shutdown.*do something else/s);

    // Failures before any decision.
    const missing = await c.callTool({ name: "read_file", arguments: { path: "ts/none.txt" } });
    assert.equal(missing.isError, true);
    assert.equal(missing.structuredContent.error.reason, "NOT_FOUND");
    const outside = await c.callTool({ name: "read_file", arguments: { path: "../../etc/passwd" } });
    assert.equal(outside.isError, true);
    assert.equal(outside.structuredContent.error.reason, "PATH_OUTSIDE_WORKSPACE");
    const isProtected = await c.callTool({
      name: "write_file", arguments: { path: ".git/hooks/pre-commit", content: "x", create_parents: true },
    });
    assert.equal(isProtected.isError, true, text(isProtected));
    assert.equal(isProtected.structuredContent.error.reason, "PATH_PROTECTED");

    // A human must approve: not an error (nothing failed), the approval id and what to do
    // next in the text and in the structured refusal.
    const args = { path: `deploy/${tag}/ts.yaml`, content: "replicas: 2\n", create_parents: true };
    const ask = await c.callTool({ name: "write_file", arguments: args });
    assert.equal(ask.isError, false, text(ask));
    const s = ask.structuredContent;
    assert.equal(s.decision, "ask");
    assert.equal(s.state, "pending");
    assert.equal(s.rule_id, "deploy-protected");
    assert.match(s.approval_id, /\S/);
    assert.ok(s.expires_at && s.session_id);
    assert.match(s.guidance, /same arguments/);
    assert.ok(text(ask).includes(s.approval_id));
    assert.ok(text(ask).includes(s.session_id));
    assert.equal(ask._meta["dev.toolgate/approval_id"], s.approval_id);
    assert.ok(!fs.existsSync(path.join(env.TG_WORKSPACE, `deploy/${tag}/ts.yaml`)));
    approvals("approve", s.approval_id);
    const ran = await c.callTool({ name: "write_file", arguments: args });
    assert.ok(!ran.isError, text(ran));
    assert.equal(ran._meta["dev.toolgate/approval_id"], s.approval_id);
    assert.equal(fs.readFileSync(path.join(env.TG_WORKSPACE, `deploy/${tag}/ts.yaml`), "utf8"), "replicas: 2\n");

    // A human denies: an error carrying their message.
    const other = { path: `deploy/${tag}/other.yaml`, content: "x\n", create_parents: true };
    const asked = await c.callTool({ name: "write_file", arguments: other });
    approvals("deny", asked.structuredContent.approval_id, "--message", "use staging first");
    const denied = await c.callTool({ name: "write_file", arguments: other });
    assert.equal(denied.isError, true);
    assert.equal(denied.structuredContent.decision, "deny");
    assert.equal(denied.structuredContent.state, "denied");
    assert.equal(denied.structuredContent.approval_id, asked.structuredContent.approval_id);
    assert.match(denied.structuredContent.reason, /use staging first/);
    assert.match(text(denied), /use staging first/);

    // A cancelled approval is gone: the same call asks a human anew.
    const third = { path: `deploy/${tag}/third.yaml`, content: "x\n", create_parents: true };
    const first = await c.callTool({ name: "write_file", arguments: third });
    approvals("cancel", first.structuredContent.approval_id);
    const again = await c.callTool({ name: "write_file", arguments: third });
    assert.equal(again.structuredContent.state, "pending", text(again));
    assert.notEqual(again.structuredContent.approval_id, first.structuredContent.approval_id);
  } finally {
    await c.close();
  }
});

test("a credential the executor refuses is worded for an MCP user", async () => {
  if (env.TG_TRANSPORT === "http") {
    // Over HTTP each request brings its token, checked before any MCP message.
    await assert.rejects(connect("not-a-token"), /unknown or revoked token/);
  } else {
    // Over stdio the server checks its token at start and exits saying what to set.
    await assert.rejects(connect("not-a-token"));
    let stderr = "";
    try {
      execFileSync(env.TG_BIN, ["mcp", "--executor", env.TG_EXECUTOR, "--task-dir", "off"], {
        env: { PATH: env.PATH, TOOLGATE_TOKEN: "not-a-token" }, input: "",
      });
      assert.fail("toolgate mcp started with a bad token");
    } catch (e) {
      stderr = e.stderr.toString();
      assert.notEqual(e.status, 0);
    }
    assert.match(stderr, /TOOLGATE_TOKEN/);
    assert.match(stderr, /--token-file/);
    assert.ok(stderr.includes(env.TG_EXECUTOR), stderr);
  }
});
