"""The front door: ``openfunctions`` exports the names a user needs, lazily, and README's examples run.

Every name in ``openfunctions.__all__`` resolves to the object its subpackage
defines; ``import openfunctions`` imports nothing else (no subpackage, no
optional dependency); docs/API.md lists exactly ``__all__``; README's python
blocks run as written, each in its own subprocess, with imports from
``openfunctions`` alone, and the first one is a real stdio MCP server.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import openfunctions
from openfunctions.core import ConfigurationError

REPO = Path(__file__).resolve().parents[1]
OPTIONAL = ("psycopg", "numpy", "httpx")


def _fresh(code: str) -> str:
    """Run ``code`` in a new interpreter (nothing imported yet) and return its stdout."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_every_exported_name_resolves_to_its_subpackages_object():
    exports = openfunctions._EXPORTS
    assert sorted([*exports, "__version__"]) == openfunctions.__all__
    for name in openfunctions.__all__:
        value = getattr(openfunctions, name)
        assert value is not None, name
        if name in exports:
            assert value is getattr(importlib.import_module(exports[name]), name), name
    assert openfunctions.__version__ == openfunctions.servers.__version__
    # the names a newcomer writes a tool, an agent and a workflow with
    for name in ("tool", "ToolRegistry", "serve", "define_agent", "run_agent", "pipe", "OpenFunctionsError"):
        assert name in openfunctions.__all__, name


def test_dir_lists_all_and_an_unknown_name_says_which():
    assert dir(openfunctions) == openfunctions.__all__
    with pytest.raises(AttributeError, match="'openfunctions' has no attribute 'nope'"):
        openfunctions.nope  # noqa: B018
    assert openfunctions.core is importlib.import_module("openfunctions.core")
    assert openfunctions.plugins is importlib.import_module("openfunctions.plugins")  # any subpackage, by name
    with pytest.raises(AttributeError, match="no attribute '_hidden'"):
        openfunctions._hidden  # noqa: B018


def test_import_openfunctions_imports_no_subpackage_and_no_optional_dependency():
    out = _fresh(
        "import sys, openfunctions\n"
        "print(sorted(m for m in sys.modules if m.startswith('openfunctions') or m.split('.')[0] in "
        f"{OPTIONAL + ('mcp', 'pydantic', 'anyio')!r}))"
    )
    assert out.strip() == "['openfunctions']"


def test_a_tool_and_its_server_need_no_optional_dependency():
    out = _fresh(
        "import sys\nfrom openfunctions import ToolRegistry, create_mcp_server, serve, tool\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r}))"
    )
    assert out.strip() == "[]"


def test_the_editable_install_maps_the_root_and_the_subpackages_to_the_checkout(tmp_path):
    """Outside the checkout (no cwd on the path), as an editable install resolves them (the wheel: test_release.py)."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", "import openfunctions, openfunctions.core as c; from openfunctions import tool\n"
         "print(openfunctions.__file__, c.__file__, tool is c.tool)"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    root, core, same = proc.stdout.split()
    assert (root, core, same) == (str(REPO / "openfunctions" / "__init__.py"), str(REPO / "core" / "__init__.py"),
                                  "True"), "an editable install from before the root package: pip install -e . again"


def test_docs_api_lists_exactly_the_exported_names():
    text = (REPO / "docs" / "API.md").read_text()
    listed = re.findall(r"^\| `([A-Za-z_]+)`", text, re.M)
    assert len(listed) == len(set(listed)), "a name is listed twice"
    assert sorted(listed) == sorted(openfunctions._EXPORTS)
    for name, module in openfunctions._EXPORTS.items():  # and says where each lives
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}`"))
        assert f"`{module}`" in row, row


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ((), {}, "serve() needs tools"),
    ((42,), {}, "got int 42"),
    (("add",), {}, "got str 'add'"),
    ((openfunctions.ToolRegistry(), openfunctions.ToolRegistry()), {}, "a registry among other tools"),
    ((), {"transport": "sse"}, "transport='sse'"),
])
def test_serve_refuses_bad_arguments_before_starting_anything(args, kwargs, message):
    with pytest.raises(ConfigurationError, match=re.escape(message)) as info:
        openfunctions.serve(*args, **kwargs)
    assert info.value.code == "configuration_invalid"


# --- README ----------------------------------------------------------------------------------------------------------

def _readme_blocks() -> dict[str, str]:
    """README's python blocks by the file name on their first line (``# server.py``)."""
    blocks = re.findall(r"^```python\n(.*?)^```", (REPO / "README.md").read_text(), re.S | re.M)
    named = {}
    for block in blocks:
        first = block.splitlines()[0]
        assert re.fullmatch(r"# \w+\.py", first), f"a README python block starts with '# name.py': {first!r}"
        named[first[2:]] = block
    return named


BLOCKS = _readme_blocks()
# what each block prints (its comments say so too)
PRINTS = {"agent.py": "completed 2 + 3 = 5.\n", "workflow.py": "{'total': 165}\n", "mytools.py": "", "server.py": None}


def test_readme_first_example_is_a_short_tool_served_from_openfunctions_alone():
    name, block = next(iter(BLOCKS.items()))
    code = [line for line in block.splitlines()[1:] if line.strip()]
    assert name == "server.py" and code[0] == "from openfunctions import serve, tool"
    # five lines of tool and serving, plus a docstring and the `if __name__` guard that lets a test import it
    assert len([line for line in code if not line.startswith("if __name__") and '"""' not in line]) <= 5, code
    assert set(PRINTS) == set(BLOCKS), "a new README block: say here what it prints"


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_readme_python_blocks_import_only_from_openfunctions_and_run(name, tmp_path):
    block = BLOCKS[name]
    for line in block.splitlines():
        if re.match(r"\s*(from|import) openfunctions\.", line):
            pytest.fail(f"{name}: README examples import from `openfunctions` alone: {line.strip()}")
    if name == "server.py":
        return  # a stdio server: the next test runs it with a session on its stdin
    (tmp_path / name).write_text(block)
    env = {**os.environ, "OPENFUNCTIONS_MCP_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.run([sys.executable, name], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == PRINTS[name]


def test_readme_server_answers_a_stdio_session_and_its_tool_runs_through_a_registry(tmp_path):
    (tmp_path / "server.py").write_text(BLOCKS["server.py"])
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 3}}},
    ]
    env = {**os.environ, "OPENFUNCTIONS_MCP_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.run([sys.executable, "server.py"], cwd=tmp_path, capture_output=True, timeout=120, env=env,
                          input=b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    call = next(m for m in map(json.loads, proc.stdout.splitlines()) if m.get("id") == 2)
    assert call["result"]["structuredContent"] == {"result": 5}
    receipt = call["result"]["_meta"]["dev.openfunctions/receipt"]
    assert receipt["outcome"] == "succeeded"
    assert receipt["receipt_id"].encode() in (tmp_path / "data" / "journal" / "tools.journal").read_bytes()
    # imported (not run), the module serves nothing: its tool runs through a registry
    _fresh(
        f"import sys, anyio; sys.path.insert(0, {str(tmp_path)!r}); import server\n"
        "from openfunctions import ToolRegistry\n"
        "out = anyio.run(ToolRegistry([server.add]).execute, 'add', {'a': 4, 'b': 5})\n"
        "assert out == {'result': 9}, out"
    )


@pytest.mark.slow
def test_serve_over_http_answers_a_call_on_loopback_and_stops_on_ctrl_c(tmp_path):
    import signal

    from tests._net import free_port, wait_for_port
    from tests.servers.test_http import parse_body, post, rpc

    port = free_port()
    (tmp_path / "web.py").write_text(
        "from openfunctions import serve, tool\n\n@tool\ndef add(a: int, b: int) -> int:\n"
        f"    return a + b\n\nserve(add, transport='http', port={port})\n")
    env = {**os.environ, "OPENFUNCTIONS_MCP_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.Popen([sys.executable, "web.py"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, proc)
        reply = parse_body(post(f"http://127.0.0.1:{port}/mcp",
                                rpc("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}), name="add"))
        assert reply["result"]["structuredContent"] == {"result": 5}
        assert reply["result"]["_meta"]["dev.openfunctions/receipt"]["outcome"] == "succeeded"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert f"streamable HTTP at http://127.0.0.1:{port}/mcp" in err.decode()


def test_readme_agent_module_serves_with_the_agents_profile_as_it_says(tmp_path):
    (tmp_path / "agent.py").write_text(BLOCKS["agent.py"])
    out = _fresh(
        f"import json, sys, anyio; sys.path.insert(0, {str(tmp_path)!r})\n"
        "from openfunctions.servers._profiles import build_profile\n"
        "async def main():\n"
        f"    profile = build_profile('agents', data_dir={str(tmp_path / 'data')!r}, modules=['agent:agents'])\n"
        "    print(json.dumps(sorted(t.name for t in profile.registry.list())))\n"
        "    await profile.aclose()\n"
        "anyio.run(main)\n"
    )
    assert {"add", "agent_calc"} <= set(json.loads(out))
