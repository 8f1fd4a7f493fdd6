"""`openfunctions-mcp db migrate|status|verify` and `serve --database`'s refusal, as an operator runs them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ._journal_backends import private_database

pytestmark = pytest.mark.slow


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("OPENFUNCTIONS_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "openfunctions.servers", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_an_operator_migrates_checks_and_verifies(pg_dsn, tmp_path) -> None:
    with private_database(pg_dsn) as db:
        status = _run("db", "status", "--database", db)
        assert status.returncode == 1 and "journal schema version 0, this code needs 1" in status.stdout

        serve = _run("serve", "--transport", "http", "--stateless", "--data-dir", str(tmp_path / "d"),
                     "--database", db)
        assert serve.returncode == 2
        assert "version 0; this code needs version 1" in serve.stderr and "db migrate" in serve.stderr

        first = _run("db", "migrate", "--database", db)
        assert first.returncode == 0 and "migrated from version 0 to 1" in first.stdout, first.stderr
        again = _run("db", "migrate", "--database", db)
        assert again.returncode == 0 and "already at version 1" in again.stdout
        assert _run("db", "status", "--database", db).returncode == 0
        verify = _run("db", "verify", "--database", db)
        assert verify.returncode == 0 and "no execution journals yet" in verify.stdout


def test_db_without_a_url_says_how_to_give_one() -> None:
    out = _run("db", "migrate")
    assert out.returncode == 2 and "--database postgresql://" in out.stderr
