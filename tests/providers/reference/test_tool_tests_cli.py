"""``openfunctions-mcp test``: the example tools' and the reference providers' own tests pass; failures exit 1."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CMD = [sys.executable, "-m", "openfunctions.servers", "test"]


def run(*args, cwd=None):
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_example_tools_pass(tmp_path):
    out = run("--example-tools", "--files-root", str(tmp_path), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["failed"] == 0 and report["untested_tools"] == 0
    assert {r["tool"] for r in report["results"]} == {"of_hash_text", "of_json_query", "of_now", "of_list_dir"}


def test_every_reference_tool_carries_passing_tests(vault_dir, repo_dir, calendar_dir, tasks_dir):
    before = {p: p.read_bytes() for p in tasks_dir.rglob("*") if p.is_file()}
    out = run("--provider", f"vault:{vault_dir}", "--provider", f"git:{repo_dir}",
              "--provider", f"calendar:{calendar_dir}", "--provider", f"tasks:{tasks_dir}", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["untested_tools"] == 0 and len({r["tool"] for r in report["results"]}) == 18
    assert all(r["receipt_id"].startswith("rcpt_") for r in report["results"])
    assert {p: p.read_bytes() for p in tasks_dir.rglob("*") if p.is_file()} == before  # the write tools' cases refuse


def test_a_failing_case_exits_1_with_the_reason(tmp_path):
    (tmp_path / "mytools.py").write_text(textwrap.dedent('''
        from openfunctions.core import tool

        @tool(tests=[{"arguments": {"a": 2, "b": 2}, "expect": {"result": 5}, "name": "two and two"},
                     {"arguments": {"a": 1, "b": 1}, "expect": {"result": 2}}])
        def add(a: int, b: int) -> int:
            """Add."""
            return a + b

        @tool
        def untested() -> int:
            """No tests."""
            return 1
        '''))
    out = run("--module", "mytools", cwd=tmp_path)
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[0].startswith("FAIL  add two and two") and lines[0].endswith("expected {'result': 5}, got {'result': 4}")
    assert lines[1].startswith("PASS  add #2") and " succeeded  rcpt_" in lines[1]
    assert lines[-1] == "1 passed, 1 failed; 1 tool(s) without tests"
    only_untested = run("--module", "mytools", "--tool", "untested", cwd=tmp_path)
    assert only_untested.returncode == 1 and "no tool has tests" in only_untested.stderr
    missing = run("--module", "nosuchmodule_xyz", cwd=tmp_path)
    assert missing.returncode == 2 and "cannot import 'nosuchmodule_xyz'" in missing.stderr
