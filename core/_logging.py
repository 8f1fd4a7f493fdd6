"""Logging: stderr only; human-readable lines on a terminal, one JSON object per line otherwise.

In stdio mode stdout carries JSON-RPC and nothing else, so no log line may
ever reach stdout. structlog events and the stdlib loggers of the libraries
we run (the mcp SDK, uvicorn, httpx) go through the same renderer, so a log
collector reading stderr sees one format.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(level: str = "warning") -> None:
    """Send structlog and stdlib logging to stderr at ``level`` (any case: ``INFO`` is ``info``)."""
    lvl = _LEVELS.get(level.strip().lower()) if isinstance(level, str) else None
    if lvl is None:
        raise ValueError(f"unknown log level {level!r}: use one of {', '.join(_LEVELS)}")
    stream = sys.stderr
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=False) if stream.isatty() else structlog.processors.JSONRenderer()
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    # Libraries that use stdlib logging (the mcp SDK, uvicorn) render the same way, to stderr too.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name, structlog.stdlib.ExtraAdder()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.format_exc_info,
                    renderer],
    ))
    logging.basicConfig(handlers=[handler], level=lvl, force=True)
    # uvicorn configures its loggers itself unless given log_config=None; either way its lines must reach ours.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)  # uvicorn.Config(log_level=...) sets one; ours decides


# Safe default at import: nothing on stdout, warnings and up on stderr.
configure_logging("warning")

__all__ = ["configure_logging"]
