"""grpcio over TLS and mutual TLS, against the production binaries with certificates made
here by the openssl command line: the way an orchestrator in another language connects."""

import pathlib
import secrets
import subprocess
import uuid

import grpc
import pytest

from conftest import BIN_DIR, POLICY, _listening, _Metadata
from test_filesystem import error_reason
from toolgate.common.v1 import common_pb2
from toolgate.executor.v1 import filesystem_pb2, filesystem_pb2_grpc
from toolgate.policy.v1 import approval_pb2, approval_pb2_grpc, policy_pb2, policy_pb2_grpc


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _pki(d: pathlib.Path):
    """A CA, a server certificate for localhost and 127.0.0.1, and a client certificate."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=toolgate python test CA", cwd=d)
    for name, san in (("server", "DNS:localhost,IP:127.0.0.1"), ("client", "DNS:executor")):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=d)
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                 "-extfile", f"{name}.ext", cwd=d)


def _secure(addr: str, d: pathlib.Path, token: str, client: bool = False) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(
        root_certificates=(d / "ca.pem").read_bytes(),
        private_key=(d / "client.key").read_bytes() if client else None,
        certificate_chain=(d / "client.pem").read_bytes() if client else None,
    )
    port = addr.rsplit(":", 1)[1]
    raw = grpc.secure_channel(f"localhost:{port}", creds)
    return grpc.intercept_channel(raw, _Metadata(token))


@pytest.fixture
def tls_stack(tmp_path):
    _pki(tmp_path)
    ws = tmp_path / "workspace"
    ws.mkdir()
    tokens = {r: secrets.token_hex(32) for r in ("agent", "approver", "executor")}
    tokens_file = tmp_path / "tokens.toml"
    tokens_file.write_text("".join(
        f'[[tokens]]\nprincipal = "{r}"\nrole = "{r}"\ntoken = "{t}"\n\n' for r, t in tokens.items()))
    tls = {
        "TOOLGATE_TRANSPORT__TLS__CERT_FILE": str(tmp_path / "server.pem"),
        "TOOLGATE_TRANSPORT__TLS__KEY_FILE": str(tmp_path / "server.key"),
        "TOOLGATE_AUTH__TOKENS_FILE": str(tokens_file),
        "TOOLGATE_LOG__FILTER": "warn",
    }
    procs = []
    try:
        policy = subprocess.Popen(
            [str(BIN_DIR / "toolgate-policy"), "--listen", "127.0.0.1:0", "--policy", str(POLICY)],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
            env={**tls,
                 "TOOLGATE_LEDGER__URL": f"sqlite:{tmp_path / 'ledger.db'}",
                 "TOOLGATE_TRANSPORT__TLS__CLIENT_CA_FILE": str(tmp_path / "ca.pem"),
                 "TOOLGATE_TRANSPORT__TLS__CLIENT_CERT_OPTIONAL": "true",
                 "TOOLGATE_TRANSPORT__TLS__CLIENT_CERT_ROLES": '["executor"]'})
        procs.append(policy)
        line = _listening(policy, "toolgate-policy")
        assert line["scheme"] == "https"
        policy_addr = line["listening"]
        executor = subprocess.Popen(
            [str(BIN_DIR / "toolgate-executor"), "--workspace", str(ws), "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
            env={**tls,
                 "TOOLGATE_POLICY__ENDPOINT": f"https://localhost:{policy_addr.rsplit(':', 1)[1]}",
                 "TOOLGATE_POLICY__TOKEN": tokens["executor"],
                 "TOOLGATE_POLICY__TLS__CA_FILE": str(tmp_path / "ca.pem"),
                 "TOOLGATE_POLICY__TLS__CERT_FILE": str(tmp_path / "client.pem"),
                 "TOOLGATE_POLICY__TLS__KEY_FILE": str(tmp_path / "client.key")})
        procs.append(executor)
        executor_addr = _listening(executor, "toolgate-executor")["listening"]
        yield tmp_path, ws, tokens, policy_addr, executor_addr
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=15)


def test_grpcio_over_tls_and_mutual_tls(tls_stack):
    d, ws, tokens, policy_addr, executor_addr = tls_stack
    (ws / "hello.txt").write_text("hi over tls\n")

    fs = filesystem_pb2_grpc.FilesystemServiceStub(_secure(executor_addr, d, tokens["agent"]))
    ctx = common_pb2.CallContext(call_id=str(uuid.uuid4()), session_id="py-tls")
    read = fs.ReadFile(filesystem_pb2.ReadFileRequest(context=ctx, path="hello.txt"), timeout=30)
    assert read.content == b"hi over tls\n"

    # Plaintext to the TLS port fails.
    plain = filesystem_pb2_grpc.FilesystemServiceStub(
        grpc.intercept_channel(grpc.insecure_channel(executor_addr), _Metadata(tokens["agent"])))
    with pytest.raises(grpc.RpcError):
        plain.ReadFile(filesystem_pb2.ReadFileRequest(context=ctx, path="hello.txt"), timeout=5)

    # Approvers connect to the policy service without a client certificate...
    approvals = approval_pb2_grpc.ApprovalServiceStub(_secure(policy_addr, d, tokens["approver"]))
    approvals.ListApprovals(approval_pb2.ListApprovalsRequest(), timeout=10)

    # ...the executor role may not: a stolen token alone does not authorize.
    policy = policy_pb2_grpc.PolicyServiceStub(_secure(policy_addr, d, tokens["executor"]))
    with pytest.raises(grpc.RpcError) as err:
        policy.Authorize(policy_pb2.AuthorizeRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error_reason(err.value) == "UNAUTHENTICATED"
    assert "mutual TLS" in err.value.details()

    # With the certificate, authentication passes (the empty request is then invalid).
    policy = policy_pb2_grpc.PolicyServiceStub(
        _secure(policy_addr, d, tokens["executor"], client=True))
    with pytest.raises(grpc.RpcError) as err:
        policy.Authorize(policy_pb2.AuthorizeRequest(), timeout=10)
    assert err.value.code() != grpc.StatusCode.UNAUTHENTICATED, err.value
