"""A database URL or conninfo string with its password hidden, for messages and logs.

In core so that every package that prints a database address (store, work's CLI,
servers) redacts it the same way; psycopg is imported lazily (an optional extra).
"""

from __future__ import annotations


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


__all__ = ["redact_dsn"]
