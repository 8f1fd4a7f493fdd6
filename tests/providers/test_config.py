"""The ``mcpServers`` file: the shape MCP hosts use, and errors that name the file, server and key."""

from __future__ import annotations

import json

import pytest

from openfunctions.providers import UpstreamConfigError, load_upstreams, parse_upstreams


def _one(entry: dict, name: str = "s"):
    return parse_upstreams({"mcpServers": {name: entry}})[0]


def test_a_claude_desktop_style_file(tmp_path, monkeypatch):
    monkeypatch.setenv("FS_ROOT", "/srv/files")
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps({"globalShortcut": "x", "mcpServers": {
        "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "${FS_ROOT}"],
                       "env": {"DEBUG": "1"}},
        "remote": {"type": "http", "url": "https://mcp.example.test/mcp", "headers": {"X-Team": "a"},
                   "bearerTokenEnv": "REMOTE_TOKEN", "timeout": 5, "trustAnnotations": False},
        "off": {"command": "x", "disabled": True},
    }}))
    fs, remote = load_upstreams(path)
    assert (fs.name, fs.transport, fs.command) == ("filesystem", "stdio", "npx")
    assert fs.args == ("-y", "@modelcontextprotocol/server-filesystem", "/srv/files")
    assert fs.env == {"DEBUG": "1"} and fs.timeout == 60.0
    assert (remote.transport, remote.url, remote.timeout, remote.trust_annotations) == (
        "http", "https://mcp.example.test/mcp", 5.0, False)
    monkeypatch.setenv("REMOTE_TOKEN", "t0k")
    assert remote.http_headers() == {"X-Team": "a", "Authorization": "Bearer t0k"}
    assert remote.describe() == "https://mcp.example.test/mcp"  # no secrets


def test_bearer_token_from_a_file(tmp_path):
    token = tmp_path / "token"
    token.write_text("abc\n")
    cfg = _one({"url": "http://127.0.0.1:1/mcp", "bearerTokenFile": str(token)})
    assert cfg.http_headers()["Authorization"] == "Bearer abc"
    token.write_text("")
    with pytest.raises(UpstreamConfigError, match="is empty"):
        cfg.http_headers()


@pytest.mark.parametrize("entry, message", [
    ({"command": "x", "url": "http://a/mcp"}, r"give either 'command' \(stdio\) or 'url' \(streamable HTTP\), not both"),
    ({}, "not neither"),
    ({"command": ""}, "'command' must be a non-empty string"),
    ({"command": "x", "args": "a b"}, "'args' must be a list of strings"),
    ({"command": "x", "env": {"A": 1}}, "'env' must be an object of strings"),
    ({"command": "x", "headers": {}}, "'headers' applies to a 'url' server"),
    ({"url": "http://a/mcp", "env": {}}, "'env' applies to a 'command' server"),
    ({"url": "ftp://a"}, "'url' must start with http:// or https://"),
    ({"url": "http://a/mcp", "type": "stdio"}, "'type' is 'stdio' but the entry has 'url'"),
    ({"command": "x", "type": "sse"}, "'type' must be one of"),
    ({"command": "x", "timeout": 0}, "'timeout' must be a positive number"),
    ({"command": "x", "maxResultBytes": 1.5}, "'maxResultBytes' must be a positive whole number"),
    ({"command": "x", "args": ["${NOT_SET_ANYWHERE_42}"]}, r"args\[0\]: environment variable NOT_SET_ANYWHERE_42"),
    ({"url": "http://a/mcp", "bearerTokenEnv": "A", "bearerTokenFile": "/f"}, "not both"),
    ("npx", "the entry must be an object"),
])
def test_bad_entries_name_the_server_and_key(entry, message):
    with pytest.raises(UpstreamConfigError, match=message) as info:
        _one(entry)
    assert info.value.message.startswith("mcpServers: server 's'")
    assert info.value.code == "upstream_config_invalid"


@pytest.mark.parametrize("name", ["a b", "x" * 49, "fs__x", ""])
def test_server_names_that_cannot_be_part_of_a_tool_name(name):
    with pytest.raises(UpstreamConfigError, match="server name|may not contain '__'"):
        _one({"command": "x"}, name)


def test_file_errors(tmp_path):
    with pytest.raises(UpstreamConfigError, match="cannot read the upstreams file"):
        load_upstreams(tmp_path / "missing.json")
    p = tmp_path / "s.json"
    p.write_text("{ nope")
    with pytest.raises(UpstreamConfigError, match=r"is not valid JSON: .* at line 1, column 3"):
        load_upstreams(p)
    p.write_text(json.dumps({"servers": {}}))
    with pytest.raises(UpstreamConfigError, match="expected a JSON object with an 'mcpServers' object"):
        load_upstreams(p)


def test_unknown_host_keys_are_ignored():
    cfg = _one({"command": "x", "autoApprove": ["read_file"], "description": "mine"})
    assert cfg.command == "x"
