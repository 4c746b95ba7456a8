"""toolgate as an MCP server, driven by the official Python SDK (`mcp` from PyPI): over
streamable HTTP (`toolgate up --mcp-listen`) and over stdio (`toolgate mcp` against the
separate binaries on Postgres). Every tool call is one executor call: reads and writes land in
the real workspace, denials and asks come back as tool errors the model can read, and a human
decides through ApprovalService.

The SDK's client (2.3.0) has no built-in support for the tasks extension, so the task path is
not exercised here; see the README."""

import asyncio
import hashlib
import os
import tempfile
import pathlib

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from conftest import BIN_DIR, Stack
from toolgate.policy.v1 import approval_pb2, approval_pb2_grpc

TOOLS = [
    "read_file", "write_file", "edit_file", "list_directory", "search_files", "find_files",
    "create_directory", "stat_path", "delete_path", "run_command", "list_runs", "read_run_output",
    "stop_run",
]


@pytest.fixture(params=["http", "stdio"], scope="module")
def served(request):
    """A running stack and a factory of MCP clients for it, over one transport."""
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack("up" if request.param == "http" else "binaries", pathlib.Path(tmp))
        try:
            yield request.param, stack
        finally:
            stack.close()


def client(served, token_role="agent"):
    transport, stack = served
    token = stack.tokens[token_role]
    if transport == "http":
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        return Client(streamable_http_client(stack.mcp_url, http_client=http))
    env = {"PATH": os.environ["PATH"], "TOOLGATE_TOKEN": token, "TOOLGATE_LOG": "warn"}
    return Client(StdioServerParameters(
        command=str(BIN_DIR / "toolgate"),
        args=["mcp", "--executor", f"http://{stack.executor_addr}", "--task-dir", "off"],
        env=env))


def run(coro):
    return asyncio.run(coro)


def decide(stack, approval_id, verdict, message=""):
    approvals = approval_pb2_grpc.ApprovalServiceStub(stack.channel("approver", "policy"))
    return approvals.DecideApproval(approval_pb2.DecideApprovalRequest(
        approval_id=approval_id, verdict=verdict, reason="test", message_to_model=message)).approval


def test_tools_are_listed_in_order_with_annotations_and_schemas(served):
    async def go():
        async with client(served) as c:
            return (await c.list_tools()).tools
    tools = run(go())
    assert [t.name for t in tools] == TOOLS
    by = {t.name: t for t in tools}
    for name in ["read_file", "list_directory", "search_files", "find_files", "stat_path",
                 "list_runs", "read_run_output"]:
        a = by[name].annotations
        assert a.read_only_hint is True and a.destructive_hint is False and a.idempotent_hint is True
    assert by["write_file"].annotations.destructive_hint is True
    assert by["edit_file"].annotations.destructive_hint is True
    assert by["edit_file"].annotations.idempotent_hint is False
    assert by["create_directory"].annotations.destructive_hint is False
    run_cmd = by["run_command"].annotations
    assert run_cmd.destructive_hint is True and run_cmd.idempotent_hint is False
    # The default sandbox profile (`workspace`) has no network: not open-world.
    assert run_cmd.open_world_hint is False
    for t in tools:
        assert t.title and t.description
        assert t.input_schema["type"] == "object"
        assert t.output_schema and t.output_schema["type"] == "object"
        # What it returns when it ran, a refusal, or a failure.
        assert [b["title"] for b in t.output_schema["anyOf"]] == ["Ran", "Refusal", "Failure"]
    assert by["read_file"].input_schema["required"] == ["path"]
    assert set(by["run_command"].input_schema["properties"]) >= {
        "script", "cwd", "timeout_ms", "env", "stdin", "background", "persist_cwd"}
    stop = by["stop_run"].annotations
    assert stop.read_only_hint is False and stop.destructive_hint is True
    assert stop.idempotent_hint is True and stop.open_world_hint is False
    assert by["read_run_output"].input_schema["required"] == ["run_id"]
    assert by["stop_run"].input_schema["required"] == ["run_id"]
    assert {"text", "next_offset", "eof"} <= set(
        by["read_run_output"].output_schema["anyOf"][0]["properties"])
    assert "file_sha256" in by["read_file"].output_schema["anyOf"][0]["properties"]


def test_write_read_edit_and_a_stale_sha(served):
    _, stack = served

    async def go():
        async with client(served) as c:
            w = await c.call_tool("write_file", {"path": "notes/a.txt", "content": "one\ntwo\n",
                                                "create_parents": True})
            r = await c.call_tool("read_file", {"path": "notes/a.txt"})
            e = await c.call_tool("edit_file", {"path": "notes/a.txt", "old_text": "two",
                                               "new_text": "deux",
                                               "expected_sha256": r.structured_content["file_sha256"]})
            stale = await c.call_tool("edit_file", {"path": "notes/a.txt", "old_text": "one",
                                                   "new_text": "un",
                                                   "expected_sha256": r.structured_content["file_sha256"]})
            ls = await c.call_tool("list_directory", {"path": "notes"})
            found = await c.call_tool("search_files", {"pattern": "deux"})
            return w, r, e, stale, ls, found
    w, r, e, stale, ls, found = run(go())
    assert not w.is_error and w.structured_content["created"] is True
    assert w.structured_content["sha256"] == hashlib.sha256(b"one\ntwo\n").hexdigest()
    assert w.meta["dev.toolgate/decision"] == "auto"
    assert w.meta["dev.toolgate/rule_id"] == "fs-write"
    assert w.meta["dev.toolgate/decision_id"].startswith("dec_")
    assert not r.is_error and r.content[0].text == "one\ntwo\n"
    assert r.structured_content["content"] == "one\ntwo\n"
    assert not e.is_error and "+deux" in e.structured_content["unified_diff"]
    assert (stack.workspace / "notes/a.txt").read_text() == "one\ndeux\n"
    # A stale sha is a readable tool error, and nothing changed.
    assert stale.is_error
    assert "CONFLICT" in stale.content[0].text and "read it again" in stale.content[0].text
    assert stale.structured_content["error"]["reason"] == "CONFLICT"
    assert (stack.workspace / "notes/a.txt").read_text() == "one\ndeux\n"
    assert [x["name"] for x in ls.structured_content["entries"]] == ["a.txt"]
    assert found.structured_content["matches"][0]["path"] == "notes/a.txt"


def test_run_a_command_and_read_its_output_with_progress(served):
    progress = []

    async def on_progress(value, total, message):
        progress.append(message)

    async def go_ok():
        async with client(served) as c:
            return await c.call_tool(
                "run_command", {"script": "for i in 1 2 3; do echo line $i; done; echo oops >&2; false"},
                progress_callback=on_progress)
    r = run(go_ok())
    assert not r.is_error, r.content[0].text
    s = r.structured_content
    assert s["status"] == "exited" and s["exit_code"] == 1
    assert s["stdout"]["text"] == "line 1\nline 2\nline 3\n"
    assert s["stderr"]["text"] == "oops\n"
    assert s["stdout"]["total_bytes"] == 21 and s["stdout"]["truncated"] is False
    assert "exit code 1" in r.content[0].text and "line 3" in r.content[0].text
    assert r.meta["dev.toolgate/decision"] == "auto"
    # Output arrived as progress notifications while it ran.
    assert any(m and "line" in m for m in progress), progress


def test_huge_output_keeps_head_and_tail_with_a_marker(served):
    async def go():
        async with client(served) as c:
            return await c.call_tool("run_command", {"script": "head -c 3000000 /dev/zero | tr '\\0' a; echo; echo END"})
    r = run(go())
    assert not r.is_error, r.content[0].text
    out = r.structured_content["stdout"]
    assert out["truncated"] is True and out["dropped_bytes"] > 0
    assert f"[… {out['dropped_bytes']} bytes dropped …]" in out["text"]
    assert out["text"].startswith("aaaa") and out["text"].rstrip().endswith("END")


def test_a_deny_is_a_tool_error_naming_the_rule(served):
    _, stack = served

    async def go():
        async with client(served) as c:
            return await c.call_tool("run_command", {"script": "shutdown -h now"})
    r = run(go())
    assert r.is_error
    assert r.structured_content["decision"] == "deny"
    assert r.structured_content["rule_id"] == "no-shutdown"
    assert "do something else" in r.structured_content["guidance"]
    assert "never allowed" in r.structured_content["reason"]
    assert "no-shutdown" in r.content[0].text
    assert r.meta["dev.toolgate/decision"] == "deny"
    assert r.meta["dev.toolgate/rule_id"] == "no-shutdown"


def test_ask_approve_and_the_same_call_runs(served):
    _, stack = served
    args = {"path": "deploy/prod.yaml", "content": "replicas: 3\n", "create_parents": True}

    async def go():
        async with client(served) as c:
            asked = await c.call_tool("write_file", args)
            s = asked.structured_content
            assert s["decision"] == "ask" and s["state"] == "pending", asked
            assert not (stack.workspace / "deploy/prod.yaml").exists()
            decide(stack, s["approval_id"], approval_pb2.VERDICT_APPROVE)
            ran = await c.call_tool("write_file", args)
            again = await c.call_tool("write_file", args)
            return asked, ran, again
    asked, ran, again = run(go())
    # Waiting for a human is not an error: nothing failed, and the same call runs once approved.
    assert not asked.is_error
    s = asked.structured_content
    assert s["expires_at"] and s["rule_id"] == "deploy-protected"
    approval_id = s["approval_id"]
    assert approval_id in asked.content[0].text
    assert "same arguments" in asked.content[0].text
    assert "same arguments" in s["guidance"] and s["session_id"] in asked.content[0].text
    assert asked.meta["dev.toolgate/approval_id"] == approval_id
    assert asked.meta["dev.toolgate/decision"] == "ask"

    assert not ran.is_error, ran.content[0].text
    assert (stack.workspace / "deploy/prod.yaml").read_text() == "replicas: 3\n"
    assert ran.meta["dev.toolgate/decision"] == "ask"
    assert ran.meta["dev.toolgate/approval_id"] == approval_id
    # Once means once: the approval was consumed, the next identical call asks again.
    assert again.structured_content["state"] == "pending", again.content[0].text
    assert again.structured_content["approval_id"] != approval_id


def test_ask_deny_returns_the_approvers_message_without_asking_again(served):
    _, stack = served
    args = {"path": "deploy/staging.yaml", "content": "replicas: 9\n", "create_parents": True}

    async def go():
        async with client(served) as c:
            asked = await c.call_tool("write_file", args)
            approval_id = asked.structured_content["approval_id"]
            decide(stack, approval_id, approval_pb2.VERDICT_DENY, "not on a Friday")
            denied = [await c.call_tool("write_file", args) for _ in range(2)]
            other = await c.call_tool("write_file", {**args, "content": "replicas: 2\n"})
            return approval_id, denied, other
    approval_id, denied, other = run(go())
    for d in denied:
        assert d.is_error
        s = d.structured_content
        assert s["decision"] == "deny" and s["state"] == "denied", s
        assert s["approval_id"] == approval_id
        assert s["reason"] == "not on a Friday"
        assert "not on a Friday" in d.content[0].text
        assert d.meta["dev.toolgate/decision"] == "deny"
    # Nobody is asked the same question twice.
    approvals = approval_pb2_grpc.ApprovalServiceStub(stack.channel("approver", "policy"))
    pending = approvals.ListApprovals(approval_pb2.ListApprovalsRequest(
        states=[approval_pb2.APPROVAL_STATE_PENDING])).approvals
    assert [a for a in pending if a.call.path == "deploy/staging.yaml"
            and a.call.content_sha256 == hashlib.sha256(b"replicas: 9\n").hexdigest()] == []
    # Different arguments ask again.
    assert other.structured_content["state"] == "pending"
    assert other.structured_content["approval_id"] != approval_id


def test_http_refuses_a_missing_or_unknown_token(served):
    transport, stack = served
    if transport != "http":
        pytest.skip("stdio has no HTTP layer")
    import httpx2 as h
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    r = h.post(stack.mcp_url, json=body, headers=headers)
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    r = h.post(stack.mcp_url, json=body, headers={**headers, "Authorization": "Bearer nope"})
    assert r.status_code == 401
    # The approver's credential may not call tools.
    r = h.post(stack.mcp_url, json=body,
               headers={**headers, "Authorization": f"Bearer {stack.tokens['approver']}"})
    assert r.status_code == 403


def test_malformed_json_is_a_json_rpc_parse_error(served):
    transport, stack = served
    if transport != "http":
        pytest.skip("stdio has no HTTP layer")
    import httpx2 as h
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25",
               "Content-Type": "application/json",
               "Authorization": f"Bearer {stack.tokens['agent']}"}
    for body in [b'{"jsonrpc": "2.0", "id": 1, "method": ', b"not json", b"\xff\xfe"]:
        r = h.post(stack.mcp_url, content=body, headers=headers)
        assert r.status_code == 400, (body, r.status_code, r.text)
        err = r.json()["error"]
        assert err["code"] == -32700 and "not valid JSON" in err["message"], r.text


def test_an_oversized_token_fails_nobody_elses_call(served):
    """A 64 KiB bearer token used to be forwarded to the executor over the connection every
    agent's calls share; the executor's header limit reset it and every call in flight failed."""
    transport, stack = served
    if transport != "http":
        pytest.skip("stdio has no HTTP layer")

    async def go():
        async with client(served) as c:
            slow = asyncio.create_task(c.call_tool(
                "run_command", {"script": "for i in $(seq 1 300000); do :; done; echo still-here"}))
            await asyncio.sleep(0.3)
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            headers = {"Accept": "application/json, text/event-stream",
                       "MCP-Protocol-Version": "2025-11-25"}
            for token in ["a" * 65536, "x" * 2000]:
                async with httpx2.AsyncClient(timeout=30) as h:
                    r = await h.post(stack.mcp_url, json=body,
                                     headers={**headers, "Authorization": f"Bearer {token}"})
                    assert r.status_code == 401, (len(token), r.status_code, r.text)
            return await slow
    r = run(go())
    assert not r.is_error, r.content[0].text
    assert "still-here" in r.content[0].text, (r.content, r.structured_content)


def test_hostile_input_is_a_readable_tool_error_and_nothing_escapes(served):
    _, stack = served
    outside = pathlib.Path(tempfile.gettempdir()) / f"toolgate-mcp-escape-{os.getpid()}"

    async def go():
        async with client(served) as c:
            out = {}
            for path in ["../escape.txt", str(outside), "a/../../escape.txt"]:
                out[path] = await c.call_tool("write_file", {"path": path, "content": "x"})
            out["extra"] = await c.call_tool("read_file", {"path": "x", "no_such_arg": 1})
            out["missing"] = await c.call_tool("edit_file", {"path": "x"})
            out["session"] = await c.call_tool(
                "stat_path", {"path": "."}, meta={"dev.toolgate/session_id": "s" * 500})
            try:
                await c.call_tool("delete_everything", {})
                out["unknown"] = None
            except Exception as e:  # a protocol error: the tool does not exist
                out["unknown"] = e
            return out
    out = run(go())
    for path in ["../escape.txt", str(outside), "a/../../escape.txt"]:
        r = out[path]
        assert r.is_error, r
        assert r.structured_content["error"]["reason"] in ("PATH_OUTSIDE_WORKSPACE", "INVALID_PATH", "NOT_FOUND"), r
    assert not outside.exists()
    assert not (stack.workspace.parent / "escape.txt").exists()
    for key in ["extra", "missing"]:
        assert out[key].is_error
        assert out[key].structured_content["error"]["reason"] == "INVALID_REQUEST"
        assert "invalid arguments" in out[key].content[0].text
    assert out["session"].is_error and "128 bytes" in out["session"].content[0].text
    assert out["unknown"] is not None and "unknown tool" in str(out["unknown"])


def test_approval_wait_parks_the_call_until_a_human_decides(served):
    transport, stack = served
    if transport != "stdio":
        pytest.skip("the wait is a flag of `toolgate mcp`; `up --mcp-approval-wait` sets the same")
    import threading
    import time

    approvals = approval_pb2_grpc.ApprovalServiceStub(stack.channel("approver", "policy"))
    done = threading.Event()
    approved = []

    def human():
        # Approves each call as it parks, the way an operator watching the queue would.
        while not done.is_set():
            for a in approvals.ListApprovals(approval_pb2.ListApprovalsRequest(
                    states=[approval_pb2.APPROVAL_STATE_PENDING])).approvals:
                if a.call.path != "deploy/waited.yaml" and "deploy/run.txt" not in a.call.script:
                    continue  # another test's leftover
                decide(stack, a.approval_id, approval_pb2.VERDICT_APPROVE)
                approved.append(a.approval_id)
            time.sleep(0.05)

    progress = []

    async def note(value, total, message):
        progress.append(message)

    async def go():
        env = {"PATH": os.environ["PATH"], "TOOLGATE_TOKEN": stack.tokens["agent"]}
        params = StdioServerParameters(
            command=str(BIN_DIR / "toolgate"),
            args=["mcp", "--executor", f"http://{stack.executor_addr}", "--approval-wait", "30s",
                  "--task-dir", "off"],
            env=env)
        async with Client(params) as c:
            written = await c.call_tool("write_file", {"path": "deploy/waited.yaml",
                                                       "content": "waited\n", "create_parents": True})
            ran = await c.call_tool("run_command", {"script": "echo parked > deploy/run.txt"},
                                    progress_callback=note)
            return written, ran

    t = threading.Thread(target=human)
    t.start()
    try:
        written, ran = run(go())
    finally:
        done.set()
        t.join()
    # Both calls parked, a human approved each, and each then ran within the same tool call.
    assert len(approved) == 2, approved
    assert not written.is_error, written.content[0].text
    assert written.meta["dev.toolgate/decision"] == "ask"
    assert written.meta["dev.toolgate/approval_id"] == approved[0]
    assert (stack.workspace / "deploy/waited.yaml").read_text() == "waited\n"
    assert not ran.is_error, ran.content[0].text
    assert ran.meta["dev.toolgate/approval_id"] == approved[1]
    assert (stack.workspace / "deploy/run.txt").read_text() == "parked\n"
    # While it waited, the run said so as progress.
    assert any("waiting for a human" in (m or "") for m in progress), progress


def test_session_id_metrics_listen_and_named_sessions_are_honoured(served):
    """`--session-id` pins the session approvals bind to, `_meta["dev.toolgate/session_id"]`
    names one per call, and `--metrics-listen` serves the MCP server's metrics."""
    transport, stack = served
    if transport != "stdio":
        pytest.skip("flags of `toolgate mcp`")
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    approvals = approval_pb2_grpc.ApprovalServiceStub(stack.channel("approver", "policy"))

    def session_of(approval_id):
        return approvals.GetApproval(
            approval_pb2.GetApprovalRequest(approval_id=approval_id)).approval.session_id

    async def go():
        env = {"PATH": os.environ["PATH"], "TOOLGATE_TOKEN": stack.tokens["agent"]}
        params = StdioServerParameters(
            command=str(BIN_DIR / "toolgate"),
            args=["mcp", "--executor", f"http://{stack.executor_addr}", "--task-dir", "off",
                  "--session-id", "py-pinned", "--metrics-listen", f"127.0.0.1:{port}"],
            env=env)
        async with Client(params) as c:
            pinned = await c.call_tool("write_file", {"path": "deploy/pinned.yaml", "content": "p",
                                                      "create_parents": True})
            named = await c.call_tool("write_file", {"path": "deploy/named.yaml", "content": "n",
                                                     "create_parents": True},
                                      meta={"dev.toolgate/session_id": "py-named"})
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                metrics = r.read().decode()
            return pinned, named, metrics
    pinned, named, metrics = run(go())
    assert session_of(pinned.structured_content["approval_id"]) == "py-pinned"
    assert session_of(named.structured_content["approval_id"]) == "py-named"
    assert 'mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="write_file",error_type="approval_required"} 2' in metrics, metrics


def test_a_restarted_stdio_server_keeps_its_session_and_its_approvals(served):
    """Over stdio the default session is derived from the workspace, the token and the
    client's name: an approval granted while the agent's MCP process was gone covers the
    same call from its next process; another client name is another session."""
    transport, stack = served
    if transport != "stdio":
        pytest.skip("the derived session is the stdio default")
    args = {"path": "deploy/restart.yaml", "content": "r\n", "create_parents": True}

    async def call(name="toolgate-py"):
        env = {"PATH": os.environ["PATH"], "TOOLGATE_TOKEN": stack.tokens["agent"]}
        params = StdioServerParameters(
            command=str(BIN_DIR / "toolgate"),
            args=["mcp", "--executor", f"http://{stack.executor_addr}", "--task-dir", "off"],
            env=env)
        from mcp.types import Implementation
        async with Client(params, client_info=Implementation(name=name, version="1")) as c:
            return await c.call_tool("write_file", args)
    asked = run(call())
    s = asked.structured_content
    assert s["state"] == "pending", asked.content[0].text
    decide(stack, s["approval_id"], approval_pb2.VERDICT_APPROVE)
    other = run(call("another-agent"))
    assert other.structured_content["state"] == "pending"
    assert other.structured_content["session_id"] != s["session_id"]
    ran = run(call())
    assert not ran.is_error, ran.content[0].text
    assert ran.meta["dev.toolgate/approval_id"] == s["approval_id"]
    assert (stack.workspace / "deploy/restart.yaml").read_text() == "r\n"
