"""``workflows resume`` and ``workflows resolve`` as an operator runs them: the console script, from a project folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openfunctions.servers import cli

FLOWS = '''
from openfunctions.workflows import pipe, transform

workflows = [pipe(transform(lambda x: x * 2, name="double"), name="dbl")]
'''


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # nothing but the current directory may explain the import
    env.pop("OPENFUNCTIONS_DATABASE_URL", None)
    return env


@pytest.mark.slow
def test_resume_imports_the_workflows_module_from_the_current_directory(tmp_path: Path) -> None:
    """`workflows resume RUN --module flows:workflows` from the folder holding flows.py, as `serve --module` does."""
    script = Path(sys.executable).parent / "openfunctions-mcp"
    assert script.exists(), f"the console script is installed next to {sys.executable}"
    (tmp_path / "flows.py").write_text(FLOWS)
    data = tmp_path / "data"
    seed = ("import anyio, flows; from openfunctions.workflows import WorkflowRuns; "
            f"anyio.run(lambda: WorkflowRuns({str(data)!r}, workflows=flows.workflows).run(flows.workflows[0], 21, "
            "run_id='run-1'))")
    subprocess.run([sys.executable, "-c", seed], cwd=tmp_path, env=_env(), check=True, timeout=60)
    proc = subprocess.run([str(script), "workflows", "resume", "run-1", "--module", "flows:workflows", "--data-dir",
                           str(data)], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "run-1 succeeded: 42" in proc.stdout


def test_resolve_applied_needs_a_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --result, --applied used to record null, which the steps after it then failed on for good."""
    rc = cli.main(["workflows", "resolve", "run-1", "1", "--applied", "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "--applied needs --result JSON" in err and "workflows show run-1" in err
    assert not (tmp_path / "workflows").exists()  # nothing recorded
    rc = cli.main(["workflows", "resolve", "run-1", "1", "--not-applied", "--result", "null", "--data-dir", str(tmp_path)])
    assert rc == 2 and "--result goes with --applied only" in capsys.readouterr().err


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = cli.main(["workflows", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err
