"""Database addresses: where a command finds one, and how it prints one.

In core so that every package that takes a database address (store, work's CLI,
servers, agents, rag, workflows) reads ``$OPENFUNCTIONS_DATABASE_URL`` and
redacts the address the same way; psycopg is imported lazily (an optional extra).
"""

from __future__ import annotations

import os

#: The environment variable every ``--database``/``--store`` option defaults to.
DATABASE_URL_ENV = "OPENFUNCTIONS_DATABASE_URL"


def database_url_from_env() -> str | None:
    """``$OPENFUNCTIONS_DATABASE_URL``, or ``None`` when it is unset, empty or blank.

    Why blank counts as unset: ``OPENFUNCTIONS_DATABASE_URL= cmd`` is how a shell
    clears it for one command, and it must mean "files", not "a database at ''".
    """
    value = os.environ.get(DATABASE_URL_ENV, "").strip()
    return value or None


def redact_dsn(dsn: str) -> str:
    """The DSN without its password (URL or ``key=value`` form); ``"<dsn>"`` if it cannot be parsed."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        parts = conninfo_to_dict(dsn)
        if "password" in parts:
            parts["password"] = "***"
        return make_conninfo("", **parts)
    except Exception:
        return "<dsn>"


def redact_dsn_in(text: str, dsn: str) -> str:
    """``text`` (a driver's error message, say) without ``dsn`` or its password, either of which it may quote."""
    text = text.replace(dsn, redact_dsn(dsn))
    try:
        from psycopg.conninfo import conninfo_to_dict

        password = conninfo_to_dict(dsn).get("password")
    except Exception:
        password = None
    return text.replace(str(password), "***") if password else text


__all__ = ["DATABASE_URL_ENV", "database_url_from_env", "redact_dsn", "redact_dsn_in"]
