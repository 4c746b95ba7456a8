"""Fixtures that start the real toolgate binaries on port 0 for the Python client tests.

Every test that uses `stack` (or `executor`) runs twice:

- `up`: one `toolgate up` process hosting both services with a SQLite ledger, the embedded
  default a laptop runs;
- `binaries`: separate `toolgate-policy` (Postgres ledger, a fresh database per stack, from
  DATABASE_URL) and `toolgate-executor` processes, the production form.

Both run under tests/python/policy.toml and hand out agent, approver and admin tokens.
"""

import json
import os
import pathlib
import secrets
import subprocess
import tempfile
import uuid

import grpc
import pytest

BIN_DIR = pathlib.Path(os.environ.get("TOOLGATE_TEST_BIN_DIR", "target/debug"))
HERE = pathlib.Path(__file__).resolve().parent
POLICY = HERE / "policy.toml"
DATABASE_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")


class _Metadata(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds `authorization: Bearer <token>` to every call on a channel."""

    def __init__(self, token: str):
        self._pair = ("authorization", f"Bearer {token}")

    def _add(self, details):
        metadata = list(details.metadata or ()) + [self._pair]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._add(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._add(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._add(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._add(details), request_iterator)


def authed_channel(addr: str, token: str) -> grpc.Channel:
    """A channel to `addr` whose calls carry `token`."""
    raw = grpc.insecure_channel(addr)
    return grpc.intercept_channel(raw, _Metadata(token))


def _listening(proc: subprocess.Popen, service: str) -> dict:
    """Reads stdout lines until the JSON line of `service`."""
    for raw in proc.stdout:
        line = raw.decode().strip()
        if not line.startswith("{"):
            continue
        v = json.loads(line)
        if v.get("service") == service:
            return v
    raise AssertionError(f"{service} exited before listening (status {proc.wait()})")


def _psql(sql: str):
    subprocess.run(["psql", DATABASE_URL, "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True,
                   stdout=subprocess.DEVNULL)


class Stack:
    """A running policy service + executor, whichever way they were started."""

    workspace: pathlib.Path
    executor_addr: str
    policy_addr: str
    tokens: dict  # role -> token
    ledger_url: str

    def __init__(self, mode: str, tmp: pathlib.Path):
        self.mode = mode
        self.workspace = tmp / "workspace"
        self.workspace.mkdir()
        self._procs = []
        self._channels = []
        self._database = None
        log_env = {**os.environ, "TOOLGATE_LOG__FILTER": "warn", "RUST_LOG": "warn"}
        if mode == "up":
            data = tmp / "data"
            proc = subprocess.Popen(
                [str(BIN_DIR / "toolgate"), "up", "--workspace", str(self.workspace),
                 "--data-dir", str(data), "--executor-listen", "127.0.0.1:0",
                 "--policy-listen", "127.0.0.1:0", "--mcp-listen", "127.0.0.1:0",
                 "--policy", str(POLICY), "--json"],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=log_env)
            self._procs.append(proc)
            info = _listening(proc, "toolgate")
            self.executor_addr = info["executor"]
            self.policy_addr = info["policy"]
            self.tokens = info["tokens"]
            self.ledger_url = info["ledger"]
            self.mcp_url = info["mcp"]
        else:
            self.mcp_url = None
            self._database = f"toolgate_py_{uuid.uuid4().hex}"
            _psql(f"CREATE DATABASE {self._database}")
            base = DATABASE_URL.rsplit("/", 1)[0]
            self.ledger_url = f"{base}/{self._database}"
            self.tokens = {role: secrets.token_hex(32) for role in ("agent", "approver", "admin", "executor")}
            tokens_file = tmp / "tokens.toml"
            tokens_file.write_text("".join(
                f'[[tokens]]\nprincipal = "{role}"\nrole = "{role}"\ntoken = "{tok}"\n\n'
                for role, tok in self.tokens.items()))
            tokens_file.chmod(0o600)
            policy = subprocess.Popen(
                [str(BIN_DIR / "toolgate-policy"), "--listen", "127.0.0.1:0", "--policy", str(POLICY)],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                env={**log_env, "TOOLGATE_LEDGER__URL": self.ledger_url,
                     "TOOLGATE_AUTH__TOKENS_FILE": str(tokens_file)})
            self._procs.append(policy)
            self.policy_addr = _listening(policy, "toolgate-policy")["listening"]
            executor = subprocess.Popen(
                [str(BIN_DIR / "toolgate-executor"), "--workspace", str(self.workspace),
                 "--listen", "127.0.0.1:0"],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                env={**log_env, "TOOLGATE_POLICY__ENDPOINT": f"http://{self.policy_addr}",
                     "TOOLGATE_POLICY__TOKEN": self.tokens["executor"],
                     "TOOLGATE_AUTH__TOKENS_FILE": str(tokens_file)})
            self._procs.append(executor)
            self.executor_addr = _listening(executor, "toolgate-executor")["listening"]

    def channel(self, role: str, service: str = "executor") -> grpc.Channel:
        """A channel to the executor or the policy service carrying `role`'s token."""
        addr = self.executor_addr if service == "executor" else self.policy_addr
        ch = authed_channel(addr, self.tokens[role])
        self._channels.append(ch)
        return ch

    def close(self):
        for ch in self._channels:
            ch.close()
        for proc in reversed(self._procs):
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._database:
            _psql(f"DROP DATABASE IF EXISTS {self._database} WITH (FORCE)")


@pytest.fixture(params=["up", "binaries"])
def stack(request):
    with tempfile.TemporaryDirectory() as tmp:
        s = Stack(request.param, pathlib.Path(tmp))
        try:
            yield s
        finally:
            s.close()


class Executor:
    """What the filesystem tests need: the workspace and an agent channel to the executor."""

    def __init__(self, stack: Stack):
        self.workspace = stack.workspace
        self.channel = stack.channel("agent")


@pytest.fixture
def executor(stack):
    return Executor(stack)
