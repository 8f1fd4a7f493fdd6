"""docs/WORK.md's examples run: section 7's tool, its readback binding and its catalog step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from openfunctions.core import ToolRegistry
from openfunctions.work import create_step_tools

from .conftest import run_step_dying_before_its_outcome

DOC = Path(__file__).resolve().parents[2] / "docs" / "WORK.md"


def _section_blocks(title: str) -> dict[str, str]:
    text = DOC.read_text()
    start = text.index(title)
    end = text.index("\n## ", start + 1)
    return {lang: body for lang, body in re.findall(r"```(\w+)\n(.*?)```", text[start:end], re.S)}


class DictLedger:
    def __init__(self) -> None:
        self.data: dict[str, int] = {}

    def get(self, key: str) -> int | None:
        return self.data.get(key)

    def set(self, key: str, value: int) -> None:
        self.data[key] = value


@pytest.mark.anyio
async def test_section_7_tool_step_runs_and_reconciles_by_its_own_readback(env):
    blocks = _section_blocks("## 7. Your own tool as a step")
    ledger = DictLedger()
    ns: dict = {"ledger": ledger}
    exec(compile(blocks["python"], f"{DOC}#section-7", "exec"), ns)  # the doc's own code
    catalog = env.write_catalog(blocks["toml"])
    await env.grant(["set_rate"])

    def registry() -> ToolRegistry:
        reg = ToolRegistry([ns["tool"]])
        for t in create_step_tools(catalog, store=None, tools=reg):
            reg.register(t)
        return reg

    ctl = await env.open([], registry=registry(), catalog=catalog, execution_journals=None)
    prv = await ctl.preview([{"step": "set_rate", "params": {"key": "eur", "value": 7}}], principal="agent")
    assert prv["steps"][0]["tool"] == "ledger_set"
    await ctl.start(prv["previewId"], principal="agent")
    await run_step_dying_before_its_outcome(ctl)
    assert ledger.data == {"eur": 7}
    again = await env.open([], registry=registry(), catalog=catalog, execution_journals=None)
    rec = await again.reconcile(principal="agent")
    assert rec["reconciled"][0]["verdict"] == "applied" and rec["state"] == "running"
