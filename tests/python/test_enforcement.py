"""The whole enforcement flow from Python, against `toolgate up` and against the separate
binaries on Postgres: read and write, a streamed run, an ask parked in the ledger, a human
approval through ApprovalService, the repeated call running, the outcome in the ledger, and a
deny carrying its rule id."""

import hashlib
import uuid

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

from toolgate.common.v1 import common_pb2
from toolgate.executor.v1 import filesystem_pb2, filesystem_pb2_grpc, process_pb2, process_pb2_grpc
from toolgate.policy.v1 import approval_pb2, approval_pb2_grpc

SESSION = "py-enforcement"


def ctx(wait_seconds: int = 0):
    c = common_pb2.CallContext(call_id=str(uuid.uuid4()), session_id=SESSION,
                               description="python cross-language test")
    if wait_seconds:
        c.approval_wait.CopyFrom(duration_pb2.Duration(seconds=wait_seconds))
    return c


def error_info(err: grpc.RpcError):
    """The google.rpc.ErrorInfo (reason, metadata) in the grpc-status-details-bin trailer."""
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info.reason, dict(info.metadata)
    raise AssertionError(f"no ErrorInfo in {err}")


def test_read_write_and_stream_a_run(stack):
    fs = filesystem_pb2_grpc.FilesystemServiceStub(stack.channel("agent"))
    written = fs.WriteFile(filesystem_pb2.WriteFileRequest(
        context=ctx(), path="notes/todo.txt", content=b"ship it\n", create_parents=True))
    assert written.created
    assert (stack.workspace / "notes/todo.txt").read_bytes() == b"ship it\n"
    read = fs.ReadFile(filesystem_pb2.ReadFileRequest(context=ctx(), path="notes/todo.txt"))
    assert read.content == b"ship it\n"

    proc = process_pb2_grpc.ProcessServiceStub(stack.channel("agent"))
    events = list(proc.Run(process_pb2.RunRequest(
        context=ctx(), script="cat notes/todo.txt; echo done >&2")))
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "started" and kinds[-1] == "exited", kinds
    assert events[0].started.decision_id
    out = b"".join(e.output.data for e in events
                   if e.WhichOneof("event") == "output" and e.output.stream == process_pb2.STREAM_STDOUT)
    err = b"".join(e.output.data for e in events
                   if e.WhichOneof("event") == "output" and e.output.stream == process_pb2.STREAM_STDERR)
    assert (out, err) == (b"ship it\n", b"done\n")
    assert events[-1].exited.status.exited == 0


def test_ask_approve_repeat_and_the_outcome_in_the_ledger(stack):
    fs = filesystem_pb2_grpc.FilesystemServiceStub(stack.channel("agent"))
    approvals = approval_pb2_grpc.ApprovalServiceStub(stack.channel("approver", "policy"))
    content = b"replicas: 3\n"

    def write():
        return fs.WriteFile(filesystem_pb2.WriteFileRequest(
            context=ctx(), path="deploy/prod.yaml", content=content, create_parents=True))

    with pytest.raises(grpc.RpcError) as ask:
        write()
    assert ask.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    reason, md = error_info(ask.value)
    assert reason == "APPROVAL_REQUIRED"
    approval_id = md["approval_id"]
    assert not (stack.workspace / "deploy/prod.yaml").exists()

    # The approver sees exactly what would be written.
    pending = approvals.GetApproval(approval_pb2.GetApprovalRequest(approval_id=approval_id)).approval
    assert pending.state == approval_pb2.APPROVAL_STATE_PENDING
    assert pending.session_id == SESSION
    assert pending.call.path == "deploy/prod.yaml"
    assert pending.call.content_size == len(content)
    assert pending.call.content_sha256 == hashlib.sha256(content).hexdigest()
    assert "deploy-protected" in [m.rule_id for m in pending.explanation.matches]

    # A watch started now sees the pending approval first, then every change after it.
    watch = approvals.WatchApprovals(approval_pb2.WatchApprovalsRequest(session_id=SESSION), timeout=60)
    first = next(watch)
    assert first.approval.approval_id == approval_id and first.cursor

    # The agent's credential cannot approve.
    agent_approvals = approval_pb2_grpc.ApprovalServiceStub(stack.channel("agent", "policy"))
    with pytest.raises(grpc.RpcError) as refused:
        agent_approvals.DecideApproval(approval_pb2.DecideApprovalRequest(
            approval_id=approval_id, verdict=approval_pb2.VERDICT_APPROVE))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED

    decided = approvals.DecideApproval(approval_pb2.DecideApprovalRequest(
        approval_id=approval_id, verdict=approval_pb2.VERDICT_APPROVE, reason="reviewed the diff")).approval
    assert decided.state == approval_pb2.APPROVAL_STATE_APPROVED
    assert decided.decided_by == "approver"

    # Resume: the same call again (a new call id) consumes the approval and runs.
    written = write()
    assert written.size == len(content)
    assert (stack.workspace / "deploy/prod.yaml").read_bytes() == content

    # The ledger links the approval to the decision that consumed it and its outcome.
    for event in watch:
        a = event.approval
        if a.approval_id == approval_id and a.state == approval_pb2.APPROVAL_STATE_COMPLETED:
            break
    else:
        raise AssertionError("the watch ended before the approval completed")
    watch.cancel()
    done = approvals.GetApproval(approval_pb2.GetApprovalRequest(approval_id=approval_id)).approval
    assert done.state == approval_pb2.APPROVAL_STATE_COMPLETED
    assert done.consumed_decision_id
    assert done.consumed_by

    # Once means once: a third identical write asks again.
    with pytest.raises(grpc.RpcError) as again:
        write()
    reason, md = error_info(again.value)
    assert reason == "APPROVAL_REQUIRED" and md["approval_id"] != approval_id


def test_a_streamed_run_waits_for_a_human(stack):
    proc = process_pb2_grpc.ProcessServiceStub(stack.channel("agent"))
    approvals = approval_pb2_grpc.ApprovalServiceStub(stack.channel("approver", "policy"))
    (stack.workspace / "build").mkdir()
    (stack.workspace / "build/out.o").write_bytes(b"x")

    run = proc.Run(process_pb2.RunRequest(context=ctx(wait_seconds=60), script="rm -rf build"), timeout=90)
    first = next(run)
    assert first.WhichOneof("event") == "awaiting_approval"
    approval_id = first.awaiting_approval.approval_id
    assert (stack.workspace / "build/out.o").exists()
    approvals.DecideApproval(approval_pb2.DecideApprovalRequest(
        approval_id=approval_id, verdict=approval_pb2.VERDICT_APPROVE, reason="it is generated"))
    rest = list(run)
    assert rest[0].WhichOneof("event") == "started"
    assert rest[-1].exited.status.exited == 0
    assert not (stack.workspace / "build").exists()


def test_a_denied_command_names_its_rule(stack):
    proc = process_pb2_grpc.ProcessServiceStub(stack.channel("agent"))
    with pytest.raises(grpc.RpcError) as denied:
        list(proc.Run(process_pb2.RunRequest(context=ctx(), script="shutdown -h now")))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    reason, md = error_info(denied.value)
    assert reason == "POLICY_DENIED"
    assert md["rule_id"] == "no-shutdown"
    assert "never allowed" in denied.value.details()


def test_no_credential_is_unauthenticated(stack):
    fs = filesystem_pb2_grpc.FilesystemServiceStub(grpc.insecure_channel(stack.executor_addr))
    with pytest.raises(grpc.RpcError) as anonymous:
        fs.ReadFile(filesystem_pb2.ReadFileRequest(context=ctx(), path="x"))
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
