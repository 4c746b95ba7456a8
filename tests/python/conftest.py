"""Fixtures that start the real toolgate binaries on port 0 for the Python client tests."""

import json
import os
import pathlib
import subprocess
import tempfile

import grpc
import pytest

BIN_DIR = pathlib.Path(os.environ.get("TOOLGATE_TEST_BIN_DIR", "target/debug"))


class Executor:
    """A running `toolgate-executor` process."""

    def __init__(self, workspace: pathlib.Path):
        self.workspace = workspace
        self.proc = subprocess.Popen(
            [str(BIN_DIR / "toolgate-executor"), "--workspace", str(workspace), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "TOOLGATE_LOG__FILTER": "warn"},
        )
        line = self.proc.stdout.readline().decode()
        self.addr = json.loads(line)["listening"]
        self.channel = grpc.insecure_channel(self.addr)

    def close(self):
        self.channel.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def executor():
    with tempfile.TemporaryDirectory() as tmp:
        ex = Executor(pathlib.Path(tmp))
        try:
            yield ex
        finally:
            ex.close()
