"""``openfunctions-mcp catalog check FILE``, through the real console entry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "work" / "example_catalog.toml"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openfunctions.servers", "catalog", "check", *args],
                          capture_output=True, text=True, timeout=60)


def test_a_valid_catalog_prints_its_steps_and_digest():
    r = _run(str(EXAMPLE))
    assert r.returncode == 0, r.stderr
    assert "valid; digest sha256:" in r.stdout and "write_src" in r.stdout and "verifier" in r.stdout
    j = _run(str(EXAMPLE), "--json")
    assert j.returncode == 0 and {s["name"] for s in json.loads(j.stdout)["steps"]} >= {"write_src", "test"}


def test_an_invalid_catalog_names_file_step_and_field_and_exits_2(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text('version = 1\nworkspace = "."\n[steps.x]\nkind = "command"\ndescription = "d"\nargv = ["echo", "{w}"]\n')
    r = _run(str(bad))
    assert r.returncode == 2 and "step 'x', field 'argv'" in r.stderr and str(bad) in r.stderr
    r = _run(str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "missing.toml" in r.stderr
