"""tests/_harness/logs.py: logging configured in a test onto a stream that is closed afterwards (a CLI run in
process under capfd) is put back, so later log lines in the same worker still write."""

from __future__ import annotations

import logging
import sys

import pytest
import structlog

from openfunctions.core import configure_logging
from tests._harness.logs import logging_put_back


def test_logging_configured_onto_a_stream_closed_later_is_put_back(tmp_path, monkeypatch) -> None:
    stream = (tmp_path / "captured.txt").open("w")
    with logging_put_back():
        with monkeypatch.context() as m:
            m.setattr(sys, "stderr", stream)  # what capfd does for the length of one test
            configure_logging("error")
        stream.close()
        with pytest.raises(ValueError, match="closed file"):  # the leak this guards against
            structlog.get_logger("probe").error("after the test")
        assert any(getattr(h, "stream", None) is stream for h in logging.getLogger().handlers)
    structlog.get_logger("probe").error("after the test")  # writes: the configuration is the one before
    assert not any(getattr(h, "stream", None) is stream for h in logging.getLogger().handlers)
