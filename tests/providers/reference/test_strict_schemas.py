"""The reference providers' and the skill tools' schemas pass the providers' strict-mode rules
(the same two checks tests/servers/test_strict_schemas.py runs over every profile's tools)."""

from __future__ import annotations

import pytest

from openfunctions.core import accepts_null, strict_violations
from openfunctions.providers.reference import CalendarProvider, GitProvider, TasksProvider, VaultProvider
from openfunctions.skills import SkillSet, skill_tools

from ...servers.test_strict_schemas import _made_required, _openai_strict, _without_required
from .conftest import connected

pytestmark = pytest.mark.anyio


async def test_every_reference_tool_is_strict(vault_dir, repo_dir, calendar_dir, tasks_dir):
    pytest.importorskip("openai", reason="the openai package (test extra) runs OpenAI's strict converter")
    tools = list(skill_tools(SkillSet()))
    for provider in (VaultProvider(vault_dir), GitProvider(repo_dir), CalendarProvider(calendar_dir),
                     TasksProvider(tasks_dir)):
        registry, _ = await connected(provider)
        tools += registry.list()
    assert len(tools) == 20
    problems = []
    for t in tools:
        problems += [f"{t.name}: {v}" for v in strict_violations(t.input_schema)]
        strict = _openai_strict(t.input_schema)
        if _without_required(strict) != _without_required(t.input_schema):
            problems.append(f"{t.name}: OpenAI's strict converter changed more than 'required'")
        for prop, pname in _made_required(t.input_schema, strict):
            if not accepts_null(prop):
                problems.append(f"{t.name}: optional {pname!r} refuses null (strict clients send it)")
    assert problems == []
