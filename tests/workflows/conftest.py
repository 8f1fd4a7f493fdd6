"""Fixtures of the workflows tests: a real PostgreSQL for the database examples (tests/_pg.py)."""

from tests._pg import pg_dsn  # noqa: F401  (a fixture)
