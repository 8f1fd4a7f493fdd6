"""An unknown resource URI: -32602 with data.uri from 2026-07-28 (SEP-2164), -32002 before."""

from __future__ import annotations

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from openfunctions.core import ToolRegistry
from openfunctions.servers import create_mcp_server


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "version", "code"), [("auto", "2026-07-28", -32602), ("legacy", None, -32002)])
async def test_unknown_resource_error_code_follows_the_negotiated_protocol(mode, version, code):
    server = create_mcp_server(ToolRegistry([]), name="t", version="0")
    server.add_resource("test://known", "known", "text/plain", lambda: "here")
    async with Client(server.lowlevel, mode=mode) as client:
        negotiated = client.protocol_version
        assert (await client.read_resource("test://known")).contents[0].text == "here"
        with pytest.raises(MCPError) as missing:
            await client.read_resource("test://nonexistent")
    if version is not None:
        assert negotiated == version
    else:
        assert negotiated < "2026-07-28"  # a handshake-era version
    assert missing.value.error.code == code
    assert missing.value.error.data == {"uri": "test://nonexistent"}
    assert "test://nonexistent" in missing.value.error.message
