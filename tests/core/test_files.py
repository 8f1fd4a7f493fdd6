"""core/files.py: atomic replace and directory fsync, shared by the journal, artifacts and leases."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from openfunctions.core import files
from openfunctions.core.files import write_atomic


def test_write_atomic_creates_and_replaces_with_the_given_mode(tmp_path):
    p = tmp_path / "f"
    write_atomic(p, b"one\n")
    assert p.read_bytes() == b"one\n" and stat.S_IMODE(os.stat(p).st_mode) == 0o600
    write_atomic(p, b"two\n", mode=0o400)
    assert p.read_bytes() == b"two\n" and stat.S_IMODE(os.stat(p).st_mode) == 0o400
    assert os.listdir(tmp_path) == ["f"]  # no temporary file left


def test_the_mode_is_exact_whatever_the_umask(tmp_path):
    old = os.umask(0o277)  # would turn a 0600 create into 0400
    try:
        write_atomic(tmp_path / "f", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o600


@pytest.mark.parametrize("fail_in", ["write", "fsync"])
def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch, fail_in):
    p = tmp_path / "f"
    write_atomic(p, b"old\n")
    if fail_in == "write":
        def broken(fd, data):
            os.write(fd, data[:2])  # a short write happened before the failure
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(files, "write_all", broken)
    else:
        def broken_fsync(fd):
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(files.os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        write_atomic(p, b"new\n")
    monkeypatch.undo()
    assert p.read_bytes() == b"old\n"
    assert os.listdir(tmp_path) == ["f"]


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = tmp_path / "f"
    link.symlink_to(victim)
    write_atomic(link, b"new")
    assert victim.read_bytes() == b"keep"  # rename replaces the link itself
    assert not link.is_symlink() and link.read_bytes() == b"new"
