"""Two executor processes over one workspace directory, as two pods over one ReadWriteMany
volume: concurrent whole-file writes are never seen torn through either executor, and
every read-modify-write whose `expected_sha256` precondition succeeded is in the final
file (no lost update), while the others fail cleanly with ABORTED ("changed: read it again").

  cargo build -p toolgate-policy -p toolgate-executor
  tests/python/run.sh   # once, for target/python-venv and the stubs in tests/python/gen
  PYTHONPATH=tests/python/gen target/python-venv/bin/python deploy/workspace/two_executors.py target/debug
  ONE_EXECUTOR=1 ...    # the same traffic through one executor process, as a baseline

It runs in tests/run.sh after the Python client tests. Both halves hold since fs writes
rename under their directory's flock and reads re-resolve a file renamed over while opened.
"""

import hashlib
import json
import os
import pathlib
import secrets
import subprocess
import sys
import tempfile
import threading
import uuid

import grpc

from toolgate.common.v1 import common_pb2
from toolgate.executor.v1 import filesystem_pb2, filesystem_pb2_grpc

POLICY = """
default = "ask"
[[rule]]
id = "fs"
decision = "auto"
reason = "the concurrency test reads and writes freely"
tools = ["fs.read", "fs.write", "fs.edit", "fs.stat", "fs.list", "fs.mkdir"]
"""

WRITERS = 4            # threads hammering whole-file writes, alternating executors
READERS = 4            # threads reading the same file through both executors
WRITES_EACH = 40
BLOCK = 256 * 1024     # each write is BLOCK bytes of one repeated letter
INCREMENTERS = 6       # threads doing read-modify-write with expected_sha256
INCREMENTS_EACH = 25


def listening(proc, service):
    for raw in proc.stdout:
        line = raw.decode().strip()
        if line.startswith("{"):
            v = json.loads(line)
            if v.get("service") == service:
                return v["listening"]
    raise SystemExit(f"{service} exited before listening (status {proc.wait()})")


class Auth(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, token):
        self.md = [("authorization", f"Bearer {token}")]

    def intercept_unary_unary(self, continuation, details, request):
        details = details._replace(metadata=list(details.metadata or []) + self.md)
        return continuation(details, request)


RACES = [0]
RACES_LOCK = threading.Lock()


def racing_rename(e: grpc.RpcError) -> bool:
    """Known (libs/fs): an open racing the rename that replaces the file fails with INTERNAL
    ("... while it was being opened"). Not a torn read and not a lost write: counted,
    reported, retried."""
    if e.code() == grpc.StatusCode.INTERNAL and "while it was being opened" in e.details():
        with RACES_LOCK:
            RACES[0] += 1
        return True
    return False


def ctx():
    return common_pb2.CallContext(call_id=str(uuid.uuid4()), session_id="two-executors")


def main(bin_dir: pathlib.Path):
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        workspace = tmp / "workspace"
        workspace.mkdir()
        tokens = {r: secrets.token_hex(32) for r in ("agent", "executor")}
        (tmp / "tokens.toml").write_text("".join(
            f'[[tokens]]\nprincipal = "{r}"\nrole = "{r}"\ntoken = "{t}"\n' for r, t in tokens.items()))
        (tmp / "policy.toml").write_text(POLICY)
        env = {**os.environ, "TOOLGATE_LOG__FILTER": "warn",
               "TOOLGATE_AUTH__TOKENS_FILE": str(tmp / "tokens.toml")}
        try:
            policy = subprocess.Popen(
                [str(bin_dir / "toolgate-policy"), "--listen", "127.0.0.1:0",
                 "--policy", str(tmp / "policy.toml")],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                env={**env, "TOOLGATE_LEDGER__URL": f"sqlite:{tmp / 'ledger.db'}"})
            procs.append(policy)
            policy_addr = listening(policy, "toolgate-policy")
            addrs = []
            for _ in range(2):
                ex = subprocess.Popen(
                    [str(bin_dir / "toolgate-executor"), "--workspace", str(workspace),
                     "--listen", "127.0.0.1:0"],
                    stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                    env={**env, "TOOLGATE_POLICY__ENDPOINT": f"http://{policy_addr}",
                         "TOOLGATE_POLICY__TOKEN": tokens["executor"]})
                procs.append(ex)
                addrs.append(listening(ex, "toolgate-executor"))
            stubs = [filesystem_pb2_grpc.FilesystemServiceStub(
                grpc.intercept_channel(grpc.insecure_channel(a), Auth(tokens["agent"])))
                for a in addrs]
            if os.environ.get("ONE_EXECUTOR"):  # the baseline: both "pods" are one process
                stubs = [stubs[0], stubs[0]]
            check_no_torn_files(stubs)
            check_preconditions(stubs, workspace)
        finally:
            for p in reversed(procs):
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
    print("two executors over one workspace: no torn file, no lost update")


def check_no_torn_files(stubs):
    stubs[0].WriteFile(filesystem_pb2.WriteFileRequest(
        context=ctx(), path="big.txt", content=b"@" * BLOCK))
    errors = []
    stop = threading.Event()

    def writer(i):
        try:
            for n in range(WRITES_EACH):
                letter = bytes([ord("a") + (i * WRITES_EACH + n) % 26])
                stubs[(i + n) % 2].WriteFile(filesystem_pb2.WriteFileRequest(
                    context=ctx(), path="big.txt", content=letter * BLOCK))
        except Exception as e:  # noqa: BLE001
            errors.append(f"writer {i}: {e}")

    def reader(i):
        reads = 0
        try:
            while not stop.is_set() or reads == 0:
                try:
                    r = stubs[i % 2].ReadFile(filesystem_pb2.ReadFileRequest(
                        context=ctx(), path="big.txt", max_bytes=2 * BLOCK))
                except grpc.RpcError as e:
                    if racing_rename(e):
                        continue
                    raise
                reads += 1
                c = r.content
                if len(c) != BLOCK or c.count(c[:1]) != BLOCK:
                    errors.append(f"reader {i}: torn read: {len(c)} bytes, "
                                  f"{len(set(c))} distinct letters")
                    return
                if r.file_sha256 and r.file_sha256 != hashlib.sha256(c).hexdigest():
                    errors.append(f"reader {i}: sha256 does not match the content")
                    return
        except Exception as e:  # noqa: BLE001
            errors.append(f"reader {i}: {e}")

    readers = [threading.Thread(target=reader, args=(i,)) for i in range(READERS)]
    writers = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    if errors:
        raise SystemExit("\n".join(errors[:10]))
    print(f"{WRITERS * WRITES_EACH} writes of {BLOCK} bytes, no torn read; "
          f"{RACES[0]} calls failed with INTERNAL while racing a rename")


def check_preconditions(stubs, workspace):
    stubs[0].WriteFile(filesystem_pb2.WriteFileRequest(context=ctx(), path="log.txt", content=b""))
    done = []
    refused = [0]
    errors = []
    lock = threading.Lock()

    def incrementer(i):
        try:
            for n in range(INCREMENTS_EACH):
                line = f"{i}:{n}\n".encode()
                while True:
                    stub = stubs[(i + n) % 2]
                    try:
                        r = stub.ReadFile(filesystem_pb2.ReadFileRequest(
                            context=ctx(), path="log.txt", max_bytes=1 << 20))
                    except grpc.RpcError as e:
                        if racing_rename(e):
                            continue
                        raise
                    try:
                        stubs[(i + n + 1) % 2].WriteFile(filesystem_pb2.WriteFileRequest(
                            context=ctx(), path="log.txt", content=r.content + line,
                            expected_sha256=r.file_sha256))
                    except grpc.RpcError as e:
                        if racing_rename(e):
                            continue
                        if e.code() != grpc.StatusCode.ABORTED:
                            raise
                        with lock:
                            refused[0] += 1
                        continue
                    with lock:
                        done.append(line)
                    break
        except Exception as e:  # noqa: BLE001
            errors.append(f"incrementer {i}: {e}")

    threads = [threading.Thread(target=incrementer, args=(i,)) for i in range(INCREMENTERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit("\n".join(errors[:10]))
    final = (workspace / "log.txt").read_bytes().splitlines(keepends=True)
    lost = set(done) - set(final)
    if lost or len(final) != len(done):
        raise SystemExit(f"lost updates: {len(done)} writes succeeded, the file has "
                         f"{len(final)} lines; missing {sorted(lost)[:5]}")
    print(f"{len(done)} conditional writes kept, {refused[0]} refused with ABORTED "
          f"(changed: read it again); {RACES[0]} calls failed with INTERNAL racing a rename")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
