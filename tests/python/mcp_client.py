"""Talks to Catena's MCP server with the official MCP Python SDK, the way an MCP host would, and
prints one JSON object with what it saw. The Rust end-to-end test (tests/tests/mcp.rs) starts the
server or names the command, runs this with a plan, and checks the result.

usage: mcp_client.py PLAN.json

The plan: {"transport": "stdio", "command": PATH, "args": [...], "env": {...}} or
{"transport": "http", "url": URL, "key": KEY or null}; "mode": "legacy" (the initialize
handshake, 2025-11-25) or "2026-07-28" (no handshake); "calls": [{"name": ..., "arguments": {...}}].
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

# Longest a call may take: an agent run of the small default model on two cores.
CALL_TIMEOUT = 600


def server_of(plan):
    if plan["transport"] == "stdio":
        return StdioServerParameters(command=plan["command"], args=plan["args"], env=plan.get("env"))
    headers = {"Authorization": f"Bearer {plan['key']}"} if plan.get("key") else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(CALL_TIMEOUT, connect=30))
    return streamable_http_client(plan["url"], http_client=http)


async def main(plan):
    out = {"results": []}
    async with Client(server_of(plan), mode=plan["mode"], read_timeout_seconds=CALL_TIMEOUT) as client:
        out["protocol_version"] = client.protocol_version
        info = client.server_info
        out["server_name"] = info.name if info else None
        listed = await client.list_tools()
        out["tools"] = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in listed.tools]
        for call in plan["calls"]:
            try:
                result = await client.call_tool(call["name"], call["arguments"])
                out["results"].append(
                    {
                        "is_error": bool(result.is_error),
                        "text": "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text"),
                        "structured": result.structured_content,
                    }
                )
            except Exception as error:  # what the client raised is itself the result to check
                out["results"].append({"raised": type(error).__name__, "message": str(error)})
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as file:
        plan = json.load(file)
    print(json.dumps(asyncio.run(main(plan))))
