"""An agent sees the skills listed in its prompt and loads one on demand through skill_load (only the model is scripted)."""

from __future__ import annotations

import pytest

from openfunctions.adapters import ScriptedAdapter
from openfunctions.agents import MemoryRunLog, define_agent, run_agent
from openfunctions.core import MemoryJournalSink, ToolRegistry
from openfunctions.skills import load_skills, skill_tools, skills_prompt

pytestmark = pytest.mark.anyio


async def test_agent_loads_a_skill_it_was_told_about(tmp_path):
    (tmp_path / "release.md").write_text("---\nname: release-notes\ndescription: Write release notes\n---\n"
                                         "Lead with what users notice.\n")
    skills = load_skills([tmp_path], entry_points=False)
    sink = MemoryJournalSink()
    registry = ToolRegistry(skill_tools(skills), sink=sink)

    def choose(messages, tools):
        system = messages[0].content
        assert "- release-notes: Write release notes" in system and {"skill_list", "skill_load"} <= {t.name for t in tools}
        return {"tool": "skill_load", "arguments": {"name": "release-notes"}}

    def answer(messages, tools):
        loaded = messages[-1]
        assert loaded.role == "tool" and "Lead with what users notice." in loaded.content
        return "Following the skill: users first."

    agent = define_agent("writer", "You write.\n\n" + skills_prompt(skills), tools=["skill_list", "skill_load"],
                         adapter=ScriptedAdapter([choose, answer]))
    result = await run_agent(agent, "Write the notes for 1.2", registry=registry, runs=MemoryRunLog())
    assert (result.status, result.text) == ("completed", "Following the skill: users first.")
    loaded = next(r for r in sink.receipts if r.tool == "skill_load")
    assert loaded.outcome == "succeeded" and loaded.parent_receipt_id == result.receipt.receipt_id
