"""toolgate's MCP server driven by other real clients than the Python SDK:

- the official TypeScript SDK (`@modelcontextprotocol/sdk`, pinned, installed by run.sh), over
  stdio and streamable HTTP: tests/typescript/mcp_client.cjs under node's test runner. The SDK
  checks every `structuredContent` against the tool's `outputSchema`, refusals included;
- pydantic-ai (pinned in requirements.txt) with its defaults: an agent driven by a
  FunctionModel survives a deny and an ask on the same tool, and its model reads toolgate's
  guidance in what the tool calls returned."""

import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

from conftest import BIN_DIR, Stack

HERE = pathlib.Path(__file__).resolve().parent
TS_CLIENT = HERE.parent / "typescript" / "mcp_client.cjs"
NODE_PATH = os.environ.get("TOOLGATE_TEST_NODE_PATH", "")


@pytest.fixture(params=["http", "stdio"], scope="module")
def served(request):
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack("up" if request.param == "http" else "binaries", pathlib.Path(tmp))
        try:
            yield request.param, stack
        finally:
            stack.close()


def test_the_typescript_sdk_reads_every_tool_and_every_refusal(served):
    transport, stack = served
    if not NODE_PATH or shutil.which("node") is None:
        pytest.fail("node and TOOLGATE_TEST_NODE_PATH (set by tests/python/run.sh) are needed")
    env = {
        "PATH": os.environ["PATH"],
        "NODE_PATH": NODE_PATH,
        "TG_TRANSPORT": transport,
        "TG_BIN": str((BIN_DIR / "toolgate").resolve()),
        "TG_EXECUTOR": f"http://{stack.executor_addr}",
        "TG_POLICY": f"http://{stack.policy_addr}",
        "TG_MCP_URL": stack.mcp_url or "",
        "TG_AGENT_TOKEN": stack.tokens["agent"],
        "TG_APPROVER_TOKEN": stack.tokens["approver"],
        "TG_WORKSPACE": str(stack.workspace),
    }
    r = subprocess.run(["node", "--test", "--test-reporter=tap", str(TS_CLIENT)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "# fail 0" in r.stdout and "# pass 5" in r.stdout, r.stdout


def test_a_pydantic_ai_agent_survives_a_deny_and_an_ask_and_reads_the_guidance(served):
    transport, stack = served
    if transport != "http":
        pytest.skip("one transport is enough for the agent loop; the SDK tests cover both")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models.function import FunctionModel

    # The model's plan: a command the policy denies, then one a human must approve (the same
    # tool both times), then an answer. What it read back after each step is kept.
    plan = [
        ToolCallPart("run_command", {"script": "shutdown -h now"}, tool_call_id="c1"),
        # Writes under deploy/ ask whatever the sandbox contains (a rule of the test policy).
        ToolCallPart("run_command", {"script": "tee deploy/pyai.txt", "stdin": "x\n"}, tool_call_id="c2"),
        TextPart("done"),
    ]
    seen = []

    def model(messages, info):
        last = messages[-1]
        seen.extend(p.model_response_str() for p in last.parts
                    if type(p).__name__ in ("ToolReturnPart", "RetryPromptPart"))
        return ModelResponse(parts=[plan[len(messages) // 2]])

    toolset = MCPToolset(stack.mcp_url, headers={"Authorization": f"Bearer {stack.tokens['agent']}"})
    agent = Agent(FunctionModel(model), toolsets=[toolset])

    async def go():
        async with agent:
            return await agent.run("tidy the machine")
    result = asyncio.run(go())
    assert result.output == "done"
    assert len(seen) == 2, seen
    denied, asked = seen
    # What the policy said and what to do next, in what the model read.
    assert "no-shutdown" in denied and "do something else" in denied, denied
    assert "apr_" in asked and "same arguments" in asked, asked
    assert not (stack.workspace / "deploy/pyai.txt").exists()
