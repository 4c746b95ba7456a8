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


def error_info(err: grpc.RpcError):
    """The google.rpc.ErrorInfo of a failed call (reason and metadata)."""
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info
    raise AssertionError(f"no ErrorInfo in {err}")


def test_every_error_fits_in_the_clients_metadata_and_carries_a_reason(executor):
    """grpcio refuses statuses larger than its metadata limit (8 KiB) and reports
    RESOURCE_EXHAUSTED instead of the real error: echoed values are capped."""
    fs = filesystem_pb2_grpc.FilesystemServiceStub(executor.channel)

    # A 5 KB path: the real status, with the echo capped and its full length said.
    long_path = "deep/" * 1000 + "missing.txt"
    with pytest.raises(grpc.RpcError) as missing:
        fs.ReadFile(filesystem_pb2.ReadFileRequest(context=ctx(), path=long_path))
    assert missing.value.code() != grpc.StatusCode.RESOURCE_EXHAUSTED, missing.value.details()
    info = error_info(missing.value)
    assert info.reason in {"NOT_FOUND", "INVALID_PATH"}, info
    assert len(missing.value.details().encode()) <= 1100
    for value in info.metadata.values():
        assert len(value.encode()) <= 300, value
    assert any(f"[{len(long_path)} bytes]" in v for v in info.metadata.values()), info.metadata

    # A 100 MiB message: refused by size with a reason, not a bare OUT_OF_RANGE.
    with pytest.raises(grpc.RpcError) as big:
        fs.WriteFile(filesystem_pb2.WriteFileRequest(
            context=ctx(), path="big.bin", content=b"\0" * (100 << 20)))
    assert error_info(big.value).reason == "TOO_LARGE", big.value.details()
    assert not (executor.workspace / "big.bin").exists()

    # A string field that is not UTF-8 (hand-encoded: ReadFileRequest.path = 0xff 0xfe).
    raw = executor.channel.unary_unary(
        "/toolgate.executor.v1.FilesystemService/ReadFile",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as garbled:
        raw(bytes([0x12, 0x02, 0xFF, 0xFE]))
    assert garbled.value.code() == grpc.StatusCode.INVALID_ARGUMENT, garbled.value.details()
    assert error_info(garbled.value).reason == "INVALID_REQUEST"

    # A method nobody implements.
    nope = executor.channel.unary_unary(
        "/toolgate.executor.v1.FilesystemService/Shred",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as unknown:
        nope(b"")
    assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED
    info = error_info(unknown.value)
    assert info.reason == "UNSUPPORTED"
    assert info.metadata["method"] == "toolgate.executor.v1.FilesystemService/Shred"
