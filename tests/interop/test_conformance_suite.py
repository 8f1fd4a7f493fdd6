"""The MCP conformance suite against ``openfunctions-mcp serve --profile conformance --transport http``.

Every scenario of ``--suite all`` (both protocol eras, drafts and extensions)
runs against the real command on a real 127.0.0.1 port; the fixtures it calls
are our registry's tools, executed (and journaled) by our executor. The suite
itself compares the outcome with ``conformance-expected-failures.yml`` and
fails on an unexpected failure or a stale entry; this test checks the same
from the per-check results and records the counts in
``.interop/conformance-summary.<mode>.json``. It runs twice: with sessions
(the default) and ``--stateless`` (replicas behind a load balancer).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from openfunctions.core.journal import read_records

from ._serve import http_server

pytestmark = [pytest.mark.interop, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
CACHE = HERE.parents[1] / ".interop"

# Per HTTP mode: extra serve flags, its expected-failures file, and the floor of
# passed checks (raise it when support lands; docs/INTEROP.md has the figures).
MODES = {
    "sessions": ((), HERE / "conformance-expected-failures.yml", 234),
    "stateless": (("--stateless",), HERE / "conformance-expected-failures.stateless.yml", 213),
}


def _expected_failures(path: Path) -> set[str]:
    """The scenario names listed under ``server:`` (the file is a flat YAML list; no YAML library needed).

    ``server: []`` (nothing expected to fail) gives an empty set; a file with no ``server:`` key raises.
    """
    names: set[str] = set()
    section = None
    text = path.read_text()
    if not re.search(r"^server:", text, re.M):
        raise AssertionError(f"{path} has no 'server:' section")
    for line in text.splitlines():
        if re.match(r"^[a-z]+:", line):
            section = line.split(":", 1)[0]
        elif section == "server" and (m := re.match(r"^\s+-\s+([A-Za-z0-9_./-]+)\s*(#.*)?$", line)):
            names.add(m.group(1))
    return names


def _results(out_dir: Path) -> dict[str, Counter[str]]:
    """Per scenario, how many checks ended in each status (SUCCESS, FAILURE, WARNING, ...)."""
    per: dict[str, Counter[str]] = {}
    for checks in sorted(out_dir.glob("server-*/checks.json")):
        scenario = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", checks.parent.name.removeprefix("server-"))
        per.setdefault(scenario, Counter()).update(c["status"] for c in json.loads(checks.read_text()))
    return per


@pytest.mark.parametrize("mode", list(MODES))
def test_conformance_suite_all_scenarios(node_peers: Any, tmp_path: Path, mode: str) -> None:
    flags, expected_file, min_passed = MODES[mode]
    expected = _expected_failures(expected_file)
    out_dir, data_dir = tmp_path / "results", tmp_path / "data"
    with http_server("conformance", data_dir, *flags) as url:
        proc = subprocess.run(
            [*node_peers.conformance, "server", "--url", url, "--suite", "all",
             "--expected-failures", str(expected_file), "-o", str(out_dir)],
            env=node_peers.env, cwd=node_peers.home, capture_output=True, text=True, timeout=900,
        )
    per = _results(out_dir)
    assert per, f"the suite produced no results: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    total: Counter[str] = sum(per.values(), Counter())
    # The suite's own evaluator counts a WARNING as a failure; so do we.
    failing = {s for s, c in per.items() if c["FAILURE"] or c["WARNING"]}
    unexpected, stale = sorted(failing - expected), sorted(expected - failing)

    summary = CACHE / f"conformance-summary.{mode}.json"
    summary.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text(json.dumps({
        "passed": total["SUCCESS"], "failed": total["FAILURE"], "warnings": total["WARNING"],
        "skipped": total["SKIPPED"], "scenarios": len(per), "failing_scenarios": sorted(failing),
        "per_scenario": {s: dict(c) for s, c in sorted(per.items())},
    }, indent=2))
    print(f"\nconformance ({mode}): {total['SUCCESS']} checks passed, {total['FAILURE']} failed, "
          f"{total['WARNING']} warnings over {len(per)} scenarios")

    # The suite's tool calls ran through our executor: each one left a durable receipt.
    receipts = [r.data for r in read_records(data_dir / "journal" / "conformance.journal") if r.type == "receipt"]
    journaled = {r["tool"] for r in receipts}
    assert {"test_simple_text", "test_error_handling", "test_tool_with_progress", "test_sampling",
            "test_input_required_result_multi_round", "slow_compute", "confirm_delete"} <= journaled, sorted(journaled)
    # The tasks scenarios' tasks are durable: created and settled in the task journal.
    task_records = [r for r in read_records(data_dir / "journal" / "conformance.tasks.journal")]
    settled = {r.data["status"] for r in task_records if r.type == "task.settled"}
    assert {"completed", "failed", "cancelled"} <= settled, settled
    print(f"conformance: {len(receipts)} tool-call receipts journaled")

    assert not unexpected, f"unexpected conformance failures: {unexpected}\n{proc.stdout[-4000:]}"
    assert not stale, f"expected failures that now pass (remove them from {expected_file.name}): {stale}"
    assert proc.returncode == 0, f"the suite's baseline check failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    assert total["SUCCESS"] >= min_passed, f"only {total['SUCCESS']} checks passed (floor {min_passed})"
