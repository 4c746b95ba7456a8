"""gRPC server reflection, as grpcurl and Postman use it: each port lists exactly the services
it serves (its own, health and reflection), for the standalone binaries and for `toolgate up`:
none that the port would answer with UNIMPLEMENTED."""

import grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

COMMON = {"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
          "grpc.reflection.v1alpha.ServerReflection"}
SERVES = {
    "executor": {"toolgate.executor.v1.FilesystemService", "toolgate.executor.v1.ProcessService",
                 "toolgate.executor.v1.ExecutorService"},
    "policy": {"toolgate.policy.v1.PolicyService", "toolgate.policy.v1.ApprovalService",
               "toolgate.policy.v1.SessionService"},
}


def listed(addr):
    with grpc.insecure_channel(addr) as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        answers = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        return {s.name for s in next(answers).list_services_response.service}


def test_each_port_lists_exactly_the_services_it_serves(stack):
    for port, addr in (("executor", stack.executor_addr), ("policy", stack.policy_addr)):
        names = listed(addr)
        assert names == SERVES[port] | COMMON, (stack.mode, port, names)
