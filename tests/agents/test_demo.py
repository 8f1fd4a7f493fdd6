"""The demo's agents part: an agent served over MCP answers with the demo client's (host's) model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["agents", "all"])
def test_demo_shows_an_agent_answering_with_the_host_model(tmp_path: Path, profile: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "openfunctions.servers", "demo", "--profile", profile,
                           "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "sampling request 1: answered with tool call count_words" in out
    assert '"text": "The text has 9 words."' in out and '"status": "completed"' in out
    assert "receipt: tool=agent_counter outcome=succeeded" in out
    assert "of_run_read -> status=completed, model=demo-host-model, tool calls: count_words [rcpt_" in out
    assert (tmp_path / "journal" / "runs.journal").exists()
