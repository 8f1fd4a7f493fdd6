"""Shared pytest configuration: anyio's built-in plugin on asyncio."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
