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
