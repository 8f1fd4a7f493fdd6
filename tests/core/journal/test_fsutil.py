"""core/journal/_fsutil.py: the atomic create used for headers, leases and copies."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from openfunctions.core.journal import _fsutil
from openfunctions.core.journal._fsutil import create_file_atomically


def test_create_file_atomically_writes_private_bytes(tmp_path):
    p = tmp_path / "f"
    create_file_atomically(p, b"hello\n")
    assert p.read_bytes() == b"hello\n"
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    assert os.listdir(tmp_path) == ["f"]


def test_a_failed_write_leaves_neither_the_file_nor_its_temp(tmp_path, monkeypatch):
    def full_disk(self, fd, data):
        os.write(fd, data[:3])  # a short write happened before the failure
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_fsutil.FileOps, "write_all", full_disk)
    p = tmp_path / "f"
    with pytest.raises(OSError, match="No space left"):
        create_file_atomically(p, b"hello\n")
    assert os.listdir(tmp_path) == []
