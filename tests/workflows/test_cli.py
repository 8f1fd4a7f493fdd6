"""``openfunctions-mcp workflows ...`` through the server CLI's own entry point (in process)."""

from __future__ import annotations

import json

import anyio
import pytest

from openfunctions.servers import cli
from openfunctions.workflows import WorkflowRuns, pipe, transform


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(["workflows", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_help_and_the_server_cli_listing_agree(capsys):
    with pytest.raises(SystemExit):
        cli.main(["workflows", "--help"])
    text = capsys.readouterr().out
    for word in ("list", "show", "resume", "resolve", "--data-dir"):
        assert word in text
    lazy = cli.build_parser().format_help()
    eager = cli.build_parser(load=("workflows",)).format_help()
    assert lazy == eager


def test_list_show_and_errors(tmp_path, capsys):
    rc, out, _ = run_cli(capsys, "list", "--data-dir", str(tmp_path))
    assert rc == 0 and "no workflow runs" in out
    wf = pipe(transform(lambda x: x * 2, name="double"), name="dbl")
    outcome = anyio.run(lambda: WorkflowRuns(tmp_path, workflows=[wf]).run(wf, 21, run_id="run-1"))
    assert outcome.result == 42

    rc, out, _ = run_cli(capsys, "list", "--data-dir", str(tmp_path))
    assert rc == 0 and "run-1  succeeded  workflow=dbl  settled=1" in out
    rc, out, _ = run_cli(capsys, "show", "run-1", "--data-dir", str(tmp_path))
    assert rc == 0 and "step 0" in out and "double" in out and "result    42" in out
    rc, out, _ = run_cli(capsys, "show", "run-1", "--json", "--data-dir", str(tmp_path))
    assert json.loads(out)["result"] == 42

    rc, _, err = run_cli(capsys, "show", "missing", "--data-dir", str(tmp_path))
    assert rc == 2 and "no workflow run 'missing'" in err
    rc, _, err = run_cli(capsys, "show", "../../x", "--data-dir", str(tmp_path))
    assert rc == 2 and "is invalid" in err
    rc, _, err = run_cli(capsys, "list", "--space", "shop", "--data-dir", str(tmp_path))  # was silently ignored
    assert rc == 2 and "--space needs --database" in err
    rc, _, err = run_cli(capsys, "resolve", "run-1", "0", "--applied", "--result", "{nope", "--data-dir", str(tmp_path))
    assert rc == 2 and "--result is not JSON" in err
    rc, _, err = run_cli(capsys, "resolve", "run-1", "0", "--applied", "--result", "1", "--data-dir", str(tmp_path))
    assert rc == 2 and "is not uncertain" in err
    rc, _, err = run_cli(capsys, "resume", "run-1", "--module", "no.such.module:wf", "--data-dir", str(tmp_path))
    assert rc == 2 and "cannot import 'no.such.module'" in err
    rc, _, err = run_cli(capsys, "resume", "--module", "tests.workflows._app:workflows", "--data-dir", str(tmp_path))
    assert rc == 2 and "give a RUN_ID or --all" in err
    # a finished run resumes to its recorded outcome
    rc, out, _ = run_cli(capsys, "resume", "run-1", "--module", "tests.workflows._app:workflows", "--data-dir", str(tmp_path))
    assert rc == 0 and "run-1 succeeded: 42" in out


def test_a_corrupt_run_journal_makes_list_and_show_exit_1_naming_it(tmp_path, capsys):
    wf = pipe(transform(lambda x: x, name="same"), name="same")
    anyio.run(lambda: WorkflowRuns(tmp_path, workflows=[wf]).run(wf, {"a": 1}, run_id="c1"))
    path = tmp_path / "workflows" / "runs.journal"
    raw = path.read_bytes().replace(b'"same"', b'"sam3"', 1)
    path.write_bytes(raw)
    rc, _, err = run_cli(capsys, "list", "--data-dir", str(tmp_path))
    assert rc == 1 and "corrupt" in err and str(path) in err
    rc, _, err = run_cli(capsys, "show", "c1", "--data-dir", str(tmp_path))
    assert rc == 1 and str(path) in err


def test_prune_drops_finished_runs_past_the_given_retention(tmp_path, capsys):
    wf = pipe(transform(lambda x: x, name="same"), name="same")

    async def three() -> None:
        async with WorkflowRuns(tmp_path, workflows=[wf], keep_runs=None) as runs:
            for i in range(3):
                await runs.run(wf, i, run_id=f"p{i}")

    anyio.run(three)
    rc, out, _ = run_cli(capsys, "prune", "--keep-runs", "1", "--data-dir", str(tmp_path))
    assert rc == 0 and "kept 1 run(s), dropped 2" in out
    rc, out, _ = run_cli(capsys, "list", "--json", "--data-dir", str(tmp_path))
    assert [r["run_id"] for r in json.loads(out)] == ["p2"]
    rc, _, err = run_cli(capsys, "prune", "--keep-runs", "-1", "--data-dir", str(tmp_path))
    assert rc == 2 and "keep_runs" in err
