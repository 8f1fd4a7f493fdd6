"""The agents profile, alone and inside 'all', served in-process to the SDK client."""

from __future__ import annotations

from pathlib import Path

import pytest

from openfunctions.agents import AgentDefinitionError
from openfunctions.servers import create_mcp_server
from openfunctions.servers._profiles import build_profile

from .test_mcp_sampling import HostModel, client

pytestmark = pytest.mark.anyio
HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


async def _serve(profile, data: Path):
    await profile.start()
    server = create_mcp_server(profile.registry, name="t", version="1", instructions=profile.instructions,
                               journal_dir=data, profile=profile.name)
    profile.install(server)
    return server


async def test_agents_profile_without_agents_names_the_problem(tmp_path: Path) -> None:
    bare = build_profile("agents", data_dir=tmp_path)  # no --module: only the run-record tools
    assert sorted(t.name for t in bare.registry.list()) == ["of_run_artifact_read", "of_run_read"]
    await bare.aclose()
    with pytest.raises(AgentDefinitionError, match="found no agents"):
        build_profile("agents", data_dir=tmp_path, modules=["json:loads"])
    with pytest.raises(AgentDefinitionError, match="cannot import"):
        build_profile("agents", data_dir=tmp_path, modules=["no_such_module_here:agents"])


async def test_all_profile_serves_tools_and_agents_from_one_module(tmp_path: Path) -> None:
    profile = build_profile("all", data_dir=tmp_path, modules=["fixture_agents:agents"], examples=False)
    names = {t.name for t in profile.registry.list()}
    assert {"agent_researcher", "crew_team", "of_run_read", "lookup", "of_artifact_read", "workflow_shout"} <= names
    server = await _serve(profile, tmp_path)
    model = HostModel([("lookup", {"key": "rome"}), "Rome."])
    try:
        async with client(server.lowlevel, model) as c:
            res = await c.call_tool("agent_researcher", {"task": "capital of Italy?"})
            assert res.structured_content["text"] == "Rome."
            shout = await c.call_tool("workflow_shout", {"text": "hi"})
            assert shout.structured_content == {"text": "HI"}
            bad = await c.call_tool("of_run_read", {"run_id": "run_" + "f" * 32})
            assert bad.is_error and "no run" in bad.content[0].text
    finally:
        await server.close()
        await profile.aclose()


async def test_of_run_read_projects_a_large_record_to_an_artifact(tmp_path: Path) -> None:
    profile = build_profile("agents", data_dir=tmp_path, modules=["fixture_agents:agents"])
    server = await _serve(profile, tmp_path)
    big = "\"\\" * 10000  # quotes and backslashes: twice their size as JSON text
    model = HostModel([("lookup", {"key": "paris"}), ("lookup", {"key": "rome"}), big])
    try:
        async with client(server.lowlevel, model) as c:
            res = await c.call_tool("agent_researcher", {"task": "t" * 3000})
            run_id = res.structured_content["run_id"]
            read = await c.call_tool("of_run_read", {"run_id": run_id})
            s = read.structured_content
            assert s["run_id"] == run_id and s["status"] == "completed"
            art = s["artifactProjection"]
            assert art["available"] is True and art["read_with"] == "of_run_artifact_read"
            chunk = await c.call_tool("of_run_artifact_read", {"artifact_id": art["artifact_id"]})
            assert not chunk.is_error
    finally:
        await server.close()
        await profile.aclose()
