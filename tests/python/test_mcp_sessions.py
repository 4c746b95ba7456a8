"""Sessions and background runs from Python (issue 28), against `toolgate up` and against the
separate binaries on Postgres:

- grpcio: `ProcessService.Run` with `background=True` ends its call after `started`; the run's
  output is read again from offset 0 with `ReadRunOutput` after that call ended, `ListRuns`
  shows it, `SignalRun` ends it and `AttachRun` delivers its exit;
- the official MCP SDK: `run_command` with `background` returns the run id at once,
  `list_runs` shows the run, `read_run_output` reads it, `stop_run` ends it; `persist_cwd` keeps
  a `cd` for the session's next call."""

import asyncio
import pathlib
import tempfile
import time
import uuid

import grpc
import pytest

from conftest import Stack
from test_enforcement import error_info
from test_mcp import client
from toolgate.common.v1 import common_pb2
from toolgate.executor.v1 import process_pb2, process_pb2_grpc

SESSION = "py-sessions"

# Prints a line, then one more every 50 ms until stopped: a dev server's log in small.
TICKER = "echo ready; i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.05; done"


def ctx(session: str = SESSION):
    return common_pb2.CallContext(call_id=str(uuid.uuid4()), session_id=session,
                                  description="python sessions test")


def wait_for(what, check, timeout=30):
    """Polls `check` until it returns something true, or fails naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = check()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_background_run_outlives_its_call_and_is_read_listed_and_stopped(stack):
    proc = process_pb2_grpc.ProcessServiceStub(stack.channel("agent"))
    events = list(proc.Run(process_pb2.RunRequest(context=ctx(), script=TICKER, background=True)))
    # The call ended right after `started`: no output, no exit on it.
    assert [e.WhichOneof("event") for e in events] == ["started"], events
    started = events[0].started
    assert started.background and started.run_id and started.pid > 0
    assert started.decision_id.startswith("dec_")
    assert started.executor.executor_id, "the executor holding the session names itself"
    run_id = started.run_id

    # Re-read from offset 0, long after the starting call ended.
    def read(offset=0, stream=process_pb2.STREAM_STDOUT):
        return proc.ReadRunOutput(process_pb2.ReadRunOutputRequest(
            run_id=run_id, stream=stream, offset=offset))
    first = wait_for("three ticks", lambda: (r := read()).data.count(b"tick") >= 3 and r)
    assert first.offset == 0 and first.data.startswith(b"ready\ntick 1\ntick 2\n"), first.data
    assert first.run.state == process_pb2.RUN_STATE_RUNNING and not first.eof
    assert first.next_offset == len(first.data) and first.total_bytes >= len(first.data)
    assert first.retained[0].start == 0
    # Any retained offset reads the same bytes.
    later = read(offset=6)
    assert later.offset == 6 and later.data[:len(first.data) - 6] == first.data[6:]
    assert read(stream=process_pb2.STREAM_STDERR).data == b""

    listed = proc.ListRuns(process_pb2.ListRunsRequest(session_id=SESSION)).runs
    mine = [r for r in listed if r.run_id == run_id]
    assert len(mine) == 1 and mine[0].state == process_pb2.RUN_STATE_RUNNING, listed
    assert mine[0].session_id == SESSION and mine[0].background
    assert mine[0].decision_id == started.decision_id and "echo ready" in mine[0].command
    assert not [r for r in proc.ListRuns(process_pb2.ListRunsRequest(session_id="other")).runs
                if r.run_id == run_id]

    stopped = proc.SignalRun(process_pb2.SignalRunRequest(
        run_id=run_id, signal=process_pb2.RUN_SIGNAL_TERM)).run
    assert stopped.run_id == run_id
    # Followed to its end: `exited` is the last event, and it did not exit by itself.
    followed = list(proc.AttachRun(process_pb2.AttachRunRequest(run_id=run_id)))
    assert followed[-1].event.WhichOneof("event") == "exited", followed[-1]
    assert followed[-1].event.exited.status.WhichOneof("status") in ("signaled", "cancelled")
    out = b"".join(e.event.output.data for e in followed
                   if e.event.WhichOneof("event") == "output"
                   and e.event.output.stream == process_pb2.STREAM_STDOUT)
    assert out.startswith(b"ready\ntick 1\n")
    end = read()
    assert end.run.state == process_pb2.RUN_STATE_EXITED and end.run.pid == 0
    # Read to the end in small pieces: eof once nothing more will come.
    offset, whole = 0, b""
    while True:
        r = proc.ReadRunOutput(process_pb2.ReadRunOutputRequest(run_id=run_id, offset=offset,
                                                                max_bytes=5))
        assert r.offset == offset and len(r.data) <= 5
        whole += r.data
        offset = r.next_offset
        if r.eof:
            break
    assert offset == r.total_bytes == len(whole) and whole == out
    finished = [r for r in proc.ListRuns(process_pb2.ListRunsRequest(
        session_id=SESSION, include_finished=True)).runs if r.run_id == run_id]
    assert finished and finished[0].state == process_pb2.RUN_STATE_EXITED
    assert not [r for r in proc.ListRuns(process_pb2.ListRunsRequest(session_id=SESSION)).runs
                if r.run_id == run_id], "no longer running"

    # An unknown run: NOT_FOUND / RUN_NOT_FOUND naming it.
    with pytest.raises(grpc.RpcError) as e:
        proc.ReadRunOutput(process_pb2.ReadRunOutputRequest(run_id="run_nosuchrun"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    reason, md = error_info(e.value)
    assert reason == "RUN_NOT_FOUND" and md.get("run_id") == "run_nosuchrun", md


@pytest.fixture(params=["http", "stdio"], scope="module")
def served(request):
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack("up" if request.param == "http" else "binaries", pathlib.Path(tmp))
        try:
            yield request.param, stack
        finally:
            stack.close()


def test_mcp_tools_start_list_read_and_stop_a_background_run(served):
    async def go():
        async with client(served) as c:
            started = await c.call_tool("run_command", {"script": TICKER, "background": True})
            assert not started.is_error, started.content[0].text
            s = started.structured_content
            run_id = s["run_id"]
            listed = await c.call_tool("list_runs", {})
            deadline = time.monotonic() + 30
            while True:
                read = await c.call_tool("read_run_output", {"run_id": run_id})
                assert not read.is_error, read.content[0].text
                if read.structured_content["text"].count("tick") >= 3 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            on = await c.call_tool("read_run_output", {"run_id": run_id, "offset": 6,
                                                       "max_bytes": 7})
            stopped = await c.call_tool("stop_run", {"run_id": run_id, "kill": True})
            deadline = time.monotonic() + 30
            while True:
                after = await c.call_tool("list_runs", {"include_finished": True})
                runs = {r["run_id"]: r for r in after.structured_content["runs"]}
                if runs[run_id]["state"] != "running" or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            unknown = await c.call_tool("read_run_output", {"run_id": "run_nosuchrun"})
            return started, listed, read, on, stopped, runs[run_id], unknown
    started, listed, read, on, stopped, ended, unknown = asyncio.run(go())
    s = started.structured_content
    assert s["status"] == "running" and s["background"] is True and s["pid"] > 0, s
    assert s["run_id"] in started.content[0].text and "read_run_output" in started.content[0].text
    assert started.meta["dev.toolgate/decision"] == "auto"
    assert started.meta["dev.toolgate/decision_id"].startswith("dec_")

    runs = listed.structured_content["runs"]
    assert [r["state"] for r in runs if r["run_id"] == s["run_id"]] == ["running"], runs
    r = read.structured_content
    assert r["text"].startswith("ready\ntick 1\ntick 2\n") and r["exact"] and r["offset"] == 0
    assert r["next_offset"] == len(r["text"].encode()) and r["eof"] is False
    assert r["run"]["state"] == "running"
    assert on.structured_content["text"] == "tick 1\n" and on.structured_content["next_offset"] == 13

    assert not stopped.is_error, stopped.content[0].text
    assert stopped.structured_content["run"]["run_id"] == s["run_id"]
    # Ended from outside: killed by the signal, or cancelled by the executor on its behalf.
    assert ended["state"] == "exited" and ended["status"] in ("signaled", "cancelled"), ended
    assert ended["exit_code"] is None and ended["pid"] == 0

    assert unknown.is_error
    assert unknown.structured_content["error"]["reason"] == "RUN_NOT_FOUND"


def test_mcp_persist_cwd_keeps_a_cd_for_the_sessions_next_call(served):
    _, stack = served
    (stack.workspace / "pc").mkdir(exist_ok=True)

    async def go():
        async with client(served) as c:
            cd = await c.call_tool("run_command", {"script": "cd pc", "persist_cwd": True})
            kept = await c.call_tool("run_command", {"script": "pwd", "persist_cwd": True})
            plain = await c.call_tool("run_command", {"script": "pwd"})
            back = await c.call_tool("run_command", {"script": "cd ..", "persist_cwd": True})
            return cd, kept, plain, back
    cd, kept, plain, back = asyncio.run(go())
    assert not cd.is_error, cd.content[0].text
    assert cd.structured_content["session"]["cwd"] == "pc", cd.structured_content
    assert kept.structured_content["stdout"]["text"].rstrip().endswith("/pc")
    assert kept.structured_content["cwd"] == "pc"
    assert not plain.structured_content["stdout"]["text"].rstrip().endswith("/pc")
    assert back.structured_content["session"]["cwd"] == "."
