"""structlog configuration: stderr only, JSON when stderr is not a TTY.

In stdio mode stdout carries JSON-RPC and nothing else, so no log line may
ever reach stdout.
"""

from __future__ import annotations

import logging
import sys

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(level: str = "warning") -> None:
    lvl = _LEVELS.get(level.lower())
    if lvl is None:
        raise ValueError(f"unknown log level {level!r}: use one of {', '.join(_LEVELS)}")
    renderer = (
        structlog.dev.ConsoleRenderer(colors=False) if sys.stderr.isatty() else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Libraries that use stdlib logging (the mcp SDK, uvicorn) go to stderr too.
    logging.basicConfig(stream=sys.stderr, level=lvl, force=True)


# Safe default at import: nothing on stdout, warnings and up on stderr.
configure_logging("warning")

__all__ = ["configure_logging"]
