"""core.redact_dsn: the one password redaction every database message goes through."""

from __future__ import annotations

import pytest

from openfunctions.core import redact_dsn
from openfunctions.work.cli import redacted


@pytest.mark.parametrize("dsn", [
    "postgresql://u:s3cret@h/db",
    "postgresql://u@h/db?password=s3cret",
    "host=/tmp user=u password=s3cret dbname=d",
])
def test_every_form_of_a_password_is_hidden_and_the_address_kept(dsn):
    for shown in (redact_dsn(dsn), redacted(dsn)):  # work's CLI prints through the same redaction
        assert "s3cret" not in shown and "password=***" in shown and "user=u" in shown


def test_what_cannot_be_parsed_is_not_echoed():
    assert redact_dsn("password=s3cret not a dsn ===") == "<dsn>"


@pytest.mark.parametrize("value, expected", [
    (None, None), ("", None), ("   ", None),
    ("postgresql://u@h/db", "postgresql://u@h/db"), (" postgresql://u@h/db\n", "postgresql://u@h/db"),
])
def test_a_blank_database_variable_means_no_database(monkeypatch, value, expected):
    from openfunctions.core import DATABASE_URL_ENV, database_url_from_env

    if value is None:
        monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    else:
        monkeypatch.setenv(DATABASE_URL_ENV, value)
    assert database_url_from_env() == expected


def test_every_command_that_takes_a_database_reads_the_variable_the_same_way(monkeypatch):
    # `OPENFUNCTIONS_DATABASE_URL= cmd` is how a shell clears the variable for one command: every
    # --database/--store default must then be "no database" (files), not a DSN of ''.
    import argparse

    from openfunctions.servers.cli import build_parser

    def actions(parser):
        for action in parser._actions:
            yield parser.prog, action
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from actions(sub)

    def database_defaults():
        parser = build_parser(load=("grant", "work", "rag", "db"))
        return [(prog, a.dest, a.default) for prog, a in actions(parser)
                if a.dest in ("database", "store", "grant_database", "work_database")]

    monkeypatch.setenv("OPENFUNCTIONS_DATABASE_URL", "postgresql://u@h/db")
    found = database_defaults()
    assert len(found) >= 6 and all(d == "postgresql://u@h/db" for _, _, d in found), found  # the variable is read
    monkeypatch.setenv("OPENFUNCTIONS_DATABASE_URL", "")
    assert all(d is None for _, _, d in database_defaults()), database_defaults()
