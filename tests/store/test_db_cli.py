"""`openfunctions-mcp db migrate|status|verify` and `serve --database`'s refusal, as an operator runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ._journal_backends import private_database

pytestmark = pytest.mark.slow


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("OPENFUNCTIONS_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "openfunctions.servers", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_an_operator_migrates_checks_and_verifies(pg_dsn, tmp_path) -> None:
    from openfunctions.store._migrations import MIGRATIONS

    n = len(MIGRATIONS)  # the journal component's version this code needs
    with private_database(pg_dsn) as db:
        unmigrated = _run("db", "verify", "--database", db)  # nothing created yet: says so, names the command
        assert unmigrated.returncode == 0, unmigrated.stderr
        assert "no execution journals: its tables are not created yet: `openfunctions-mcp db migrate`" in unmigrated.stdout
        assert "does not exist" not in unmigrated.stdout + unmigrated.stderr
        one = _run("db", "verify", "--database", db, "--journal", "tools")
        assert one.returncode == 2 and "no execution journal 'tools'" in one.stderr and "db migrate" in one.stderr

        status = _run("db", "status", "--database", db)
        assert status.returncode == 1 and f"journal schema version 0, this code needs {n}" in status.stdout
        assert "store schema version 0, this code needs 1 (older: migrated when it is next opened" in status.stdout

        serve = _run("serve", "--transport", "http", "--stateless", "--data-dir", str(tmp_path / "d"),
                     "--database", db)
        assert serve.returncode == 2
        assert f"version 0; this code needs version {n}" in serve.stderr and "db migrate" in serve.stderr

        first = _run("db", "migrate", "--database", db)
        assert first.returncode == 0 and f"migrated from version 0 to {n}" in first.stdout, first.stderr
        again = _run("db", "migrate", "--database", db)
        assert again.returncode == 0 and f"already at version {n}" in again.stdout
        assert "store schema already at version 1" in again.stdout  # the key-value store's too, one registry
        assert _run("db", "status", "--database", db).returncode == 0
        verify = _run("db", "verify", "--database", db)
        assert verify.returncode == 0 and "no execution journals yet" in verify.stdout


def test_db_without_a_url_says_how_to_give_one() -> None:
    out = _run("db", "migrate")
    assert out.returncode == 2 and "--database postgresql://" in out.stderr


def test_journal_verify_of_a_database_url_is_db_verify(pg_dsn) -> None:
    """`journal verify postgresql://...` (the issue's spelling) runs `db verify` on that database."""
    from urllib.parse import quote, urlencode

    from psycopg.conninfo import conninfo_to_dict

    def url(conninfo: str, dbname: str | None = None) -> str:
        parts = conninfo_to_dict(conninfo)
        user, host, port = parts.get("user", ""), parts.get("host", ""), parts.get("port")
        query = {"host": host} if host.startswith("/") else {}
        netloc = f"{quote(user)}@" + ("" if query else host) + (f":{port}" if port and not query else "")
        return f"postgresql://{netloc}/{dbname or parts['dbname']}" + (f"?{urlencode(query)}" if query else "")

    with private_database(pg_dsn) as db:
        assert _run("db", "migrate", "--database", db).returncode == 0
        direct = _run("db", "verify", "--database", db)
        via_journal = _run("journal", "verify", url(db))
        assert via_journal.returncode == direct.returncode == 0, via_journal.stderr
        assert via_journal.stdout.split(": ", 1)[1] == direct.stdout.split(": ", 1)[1]
        assert "no execution journals yet" in via_journal.stdout
        missing = _run("journal", "verify", url(db, "of_no_such_db"))
        missing_direct = _run("db", "verify", "--database", url(db, "of_no_such_db"))
        assert missing.returncode == missing_direct.returncode != 0 and missing.stderr == missing_direct.stderr
        assert "cannot read" in missing.stderr and "of_no_such_db" in missing.stderr


def test_no_command_line_writes_another_modules_globals() -> None:
    """Each package's command line finds its own PostgreSQL parts (work opens work/_pg.py, `db verify` runs each
    component's audit from core.postgres.COMPONENTS): nothing assigns ``module.CONSTANT = ...`` from outside."""
    import ast

    root = Path(__file__).resolve().parents[2]
    found = []
    for rel in ("servers/cli.py", "ui/_database.py", "store/db_cli.py", "core/journal/cli.py"):
        for node in ast.walk(ast.parse((root / rel).read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            found += [f"{rel}:{node.lineno}" for t in targets if isinstance(t, ast.Attribute)
                      and isinstance(t.value, ast.Name) and t.value.id != "self" and t.attr.isupper()]
    assert found == []


def test_every_registered_component_resolves_and_db_verify_audits_are_callable() -> None:
    """The registry ``db migrate|status|verify`` iterate: each entry names a real migration list (and audit)."""
    from openfunctions.core.postgres import COMPONENTS, migrations_of, verifier_of

    names = [c.name for c in COMPONENTS]
    assert names[0] == "journal" and len(set(names)) == len(names)
    for c in COMPONENTS:
        steps = migrations_of(c.name)
        assert steps and all(isinstance(sql, str) for step in steps for sql in step), c.name
        assert c.verify is None or callable(verifier_of(c.name))
    assert {c.name for c in COMPONENTS if c.verify} == {"work", "workflows", "rag"}
    assert {c.name for c in COMPONENTS if c.at_open} == {"store", "rag"}  # the components that migrate when they open
