"""Every python block of docs/AGENTS.md runs, in order, in one directory (a newcomer's paste)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "AGENTS.md"


def blocks() -> list[tuple[str, str]]:
    out = []
    for code in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S):
        first = code.splitlines()[0]
        assert first.startswith("# ") and first.endswith(".py"), f"each block starts with '# name.py': {first!r}"
        out.append((first[2:].strip(), code))
    return out


@pytest.mark.slow
def test_agents_doc_examples_run(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "XAI_API_KEY", "OPENROUTER_API_KEY"):
        env.pop(k, None)
    outputs = {}
    for name, code in blocks():
        (tmp_path / name).write_text(code)
        if name == "myagents.py":
            continue  # a module: host.py serves it
        proc = subprocess.run([sys.executable, name], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
        outputs[name] = proc.stdout
    assert outputs["first.py"].startswith("completed 2 + 3 = 5. run_")
    moving = outputs["moving.py"].splitlines()
    assert moving[2:4] == ["tool toolu_01 False", f"tool call_{hashlib.sha256(b'functions.weather:1').hexdigest()[:24]} True"]
    assert moving[-1] == "['system', 'user', 'assistant', 'tool', 'assistant']"
    assert outputs["claims.py"].split() == ["awaiting", "True", "claim_unverified", "fulfilled", "True", "True"]
    assert outputs["waiting.py"].strip() == "['from the agent', 'from someone else']"
    assert outputs["host_2026.py"].split("\n") == ["2026-07-28", "asked: ['sampling-0']", "asked: ['sampling-1']",
                                                    "completed", ""]
    assert "'run_id': 'run_" in outputs["host.py"] and "Paris" in outputs["host.py"] and outputs["host.py"].rstrip().endswith("completed")
    assert "OPENAI_API_KEY" in outputs["provider.py"] and "openai gpt-4o-mini https://api.openai.com/v1" in outputs["provider.py"]
    assert "rejected admission_refused" in outputs["crews.py"] and """'text': '{"sources": 3}'""" in outputs["crews.py"]
