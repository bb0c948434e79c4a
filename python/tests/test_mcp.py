"""`interlock mcp serve` with the Python MCP SDK's client (a real client over stdio)."""

from __future__ import annotations

import json
from typing import Any

from conftest import Server
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import TextContent

import interlock


def text_of(result: Any) -> str:
    """The first text content of a tool result."""
    for c in result.content:
        if isinstance(c, TextContent):
            return c.text
    raise AssertionError(f"no text in {result!r}")


async def test_mcp_serve_approval_with_python_client(server: Server, client: interlock.Client) -> None:
    server.cli("provision", "--agent", "mcp", check=True)
    params = StdioServerParameters(
        command=str(server.binary), args=["--nats-url", server.url, "mcp", "serve", "--poll", "100ms"]
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        assert {t.name for t in tools.tools} == {"request_approval", "check_approval", "wait_approval"}

        asked = json.loads(
            text_of(
                await session.call_tool(
                    "request_approval",
                    {"action": "rotate the signing key", "arguments": {"key": "k1"}, "approvers": ["ada"]},
                )
            )
        )
        assert asked["status"] == "pending"

        await client.approve(asked["id"], asked["interruptId"], approver="ada", comment="go")
        done = json.loads(text_of(await session.call_tool("wait_approval", {"id": asked["id"]})))
        assert done["status"] == "approved"
        assert done["approver"] == "ada"
        assert done["comment"] == "go"

        asked = json.loads(text_of(await session.call_tool("request_approval", {"action": "drop the table"})))
        await client.deny(asked["id"], asked["interruptId"], comment="no")
        done = json.loads(text_of(await session.call_tool("wait_approval", {"id": asked["id"]})))
        assert done["status"] == "denied"
        assert done["comment"] == "no"
