"""Kept for the modules that import it by this name: the code lives in tests/_harness/pg.py."""

from tests._harness.pg import ENV_URL, _required, pg_dsn, unique_name

__all__ = ["ENV_URL", "_required", "pg_dsn", "unique_name"]
