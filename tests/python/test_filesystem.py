"""Reads, writes, edits and searches a workspace through the executor with grpcio stubs
generated from proto/ -- the same code the README shows as the example client."""

import uuid

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from toolgate.common.v1 import common_pb2
from toolgate.executor.v1 import filesystem_pb2, filesystem_pb2_grpc


def ctx():
    return common_pb2.CallContext(call_id=str(uuid.uuid4()), session_id="py-session")


def error_reason(err: grpc.RpcError) -> str:
    """The google.rpc.ErrorInfo reason carried in the grpc-status-details-bin trailer."""
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info.reason
    raise AssertionError(f"no ErrorInfo in {err}")


def test_read_write_edit_search(executor):
    fs = filesystem_pb2_grpc.FilesystemServiceStub(executor.channel)

    written = fs.WriteFile(filesystem_pb2.WriteFileRequest(
        context=ctx(), path="notes/todo.txt", content=b"buy milk\ncall bob\n", create_parents=True))
    assert written.created
    assert (executor.workspace / "notes/todo.txt").read_bytes() == b"buy milk\ncall bob\n"

    read = fs.ReadFile(filesystem_pb2.ReadFileRequest(context=ctx(), path="notes/todo.txt"))
    assert read.content == b"buy milk\ncall bob\n"
    assert read.file_sha256 == written.sha256

    lines = fs.ReadFile(filesystem_pb2.ReadFileRequest(
        context=ctx(), path="notes/todo.txt", lines=filesystem_pb2.LineRange(start_line=2, line_count=1)))
    assert lines.content == b"call bob\n"

    edited = fs.EditFile(filesystem_pb2.EditFileRequest(
        context=ctx(), path="notes/todo.txt", old_text="bob", new_text="alice",
        expected_sha256=read.file_sha256))
    assert edited.occurrences == 1
    assert "+call alice" in edited.unified_diff

    found = fs.SearchFiles(filesystem_pb2.SearchFilesRequest(context=ctx(), pattern=r"call \w+"))
    assert [(m.path, m.line_number, m.line) for m in found.matches] == [("notes/todo.txt", 2, "call alice")]
    assert not found.truncated


def test_errors_carry_a_reason(executor):
    fs = filesystem_pb2_grpc.FilesystemServiceStub(executor.channel)

    with pytest.raises(grpc.RpcError) as escape:
        fs.ReadFile(filesystem_pb2.ReadFileRequest(context=ctx(), path="../../etc/passwd"))
    assert escape.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error_reason(escape.value) == "PATH_OUTSIDE_WORKSPACE"

    (executor.workspace / "a.txt").write_text("one one")
    with pytest.raises(grpc.RpcError) as mismatch:
        fs.EditFile(filesystem_pb2.EditFileRequest(context=ctx(), path="a.txt", old_text="one", new_text="two"))
    assert mismatch.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_reason(mismatch.value) == "EDIT_MISMATCH"
    assert (executor.workspace / "a.txt").read_text() == "one one"
