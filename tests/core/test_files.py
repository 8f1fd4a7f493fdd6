"""core/files.py: the one durable-files module (atomic replace, private directories and files,
kernel locks, directory fsync), shared by the journal, artifacts, leases and work steps."""

from __future__ import annotations

import errno
import os
import signal
import stat
import time

import pytest

from openfunctions.core import files
from openfunctions.core.errors import JournalUnsafe, UnsafePath
from openfunctions.core.files import (
    TEMP_PREFIX,
    ensure_private_dir,
    flock,
    fsync_dir,
    open_private,
    try_flock,
    write_all,
    write_atomic,
)


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


def test_write_atomic_at_a_directory_descriptor(tmp_path):
    # O_PATH (Linux) is what work steps walk a directory chain with; fsync_dir must accept it too.
    dfd = os.open(tmp_path, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY)
    try:
        write_atomic("f", b"one", dir_fd=dfd)
        write_atomic("f", b"two", dir_fd=dfd, mode=0o640)
        fsync_dir(dfd)
        with pytest.raises(ValueError, match="bare file name"):
            write_atomic("sub/f", b"x", dir_fd=dfd)
    finally:
        os.close(dfd)
    assert (tmp_path / "f").read_bytes() == b"two"
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o640
    assert os.listdir(tmp_path) == ["f"]


def test_mode_none_keeps_an_existing_mode_and_a_new_file_follows_the_umask(tmp_path):
    p = tmp_path / "user.txt"
    old = os.umask(0o022)
    try:
        write_atomic(p, b"new", mode=None)
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o644
        os.chmod(p, 0o751)
        write_atomic(p, b"again", mode=None)
    finally:
        os.umask(old)
    assert p.read_bytes() == b"again" and stat.S_IMODE(os.stat(p).st_mode) == 0o751


def test_write_all_survives_short_writes(tmp_path, monkeypatch):
    real = os.write
    monkeypatch.setattr(files.os, "write", lambda fd, data: real(fd, bytes(data[:3])))
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        write_all(fd, b"0123456789")
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"0123456789"


def test_an_atomic_write_killed_by_sigkill_leaves_old_or_new_never_partial(tmp_path):
    # A forked child (no interpreter start-up: cheap enough to kill many times) replaces one file
    # with 256 KiB of "a", then of "b", ... until SIGKILL lands, mid-write, mid-fsync or mid-rename.
    p = tmp_path / "f"
    for round_ in range(12):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: only os calls from here on, and never return into pytest
            try:
                os.close(r)
                n = 0
                while True:
                    write_atomic(p, bytes([97 + n % 26]) * (256 << 10))
                    n += 1
                    if n == 2:
                        os.write(w, b"!")
            finally:
                os._exit(1)
        os.close(w)
        try:
            assert os.read(r, 1) == b"!"
            time.sleep(round_ * 0.002)  # a different point of the loop each round, not an ordering proof
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
        data = p.read_bytes()
        assert len(data) == 256 << 10 and data == data[:1] * len(data), "a torn mix of two contents"
        # The only possible leftover is the interrupted temp file, never under the real name.
        assert all(n == "f" or n.startswith(TEMP_PREFIX + "f-") for n in os.listdir(tmp_path))


def test_ensure_private_dir_creates_0700_whatever_the_umask_and_checks_the_final_one(tmp_path):
    old = os.umask(0)
    try:
        ensure_private_dir(tmp_path / "a" / "b")
    finally:
        os.umask(old)
    for d in (tmp_path / "a", tmp_path / "a" / "b"):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    ensure_private_dir(tmp_path / "a" / "b")  # idempotent


def test_one_policy_refuses_a_loose_symlinked_or_wrong_kind_directory(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o755)
    with pytest.raises(UnsafePath, match="0755.*chmod 700") as err:
        ensure_private_dir(loose)
    assert err.value.code == "path_unsafe" and err.value.details["path"] == str(loose)
    assert stat.S_IMODE(os.stat(loose).st_mode) == 0o755  # refused, never silently tightened
    (tmp_path / "link").symlink_to(loose)
    with pytest.raises(UnsafePath, match="symlink"):
        ensure_private_dir(tmp_path / "link")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(UnsafePath, match="not a directory"):
        ensure_private_dir(tmp_path / "file")
    with pytest.raises(UnsafePath, match="a parent is not a directory"):
        ensure_private_dir(tmp_path / "file" / "sub")


def test_the_callers_error_factory_names_the_refusal(tmp_path):
    def journal_unsafe(path, why):
        return JournalUnsafe(f"refusing journal path {path!r}: {why}")

    (tmp_path / "d").mkdir(mode=0o700)
    os.chmod(tmp_path / "d", 0o770)
    with pytest.raises(JournalUnsafe, match="refusing journal path"):
        ensure_private_dir(tmp_path / "d", unsafe=journal_unsafe)


def test_open_private_creates_0600_and_refuses_symlinks_and_shared_files(tmp_path):
    p = tmp_path / "f"
    fd = open_private(p, os.O_RDWR, create=True)
    os.close(fd)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    os.close(open_private(p, os.O_RDONLY))
    with pytest.raises(FileExistsError):
        open_private(p, os.O_RDWR | os.O_EXCL, create=True)
    (tmp_path / "link").symlink_to(p)
    for create in (False, True):
        with pytest.raises(UnsafePath, match="symlink"):
            open_private(tmp_path / "link", os.O_RDONLY, create=create)
    os.chmod(p, 0o644)
    with pytest.raises(UnsafePath, match="0644"):
        open_private(p, os.O_RDONLY)
    with pytest.raises(FileNotFoundError):
        open_private(tmp_path / "missing", os.O_RDONLY)


def test_flock_excludes_another_open_and_is_released_on_exit(tmp_path):
    p = tmp_path / "lock"
    with flock(p) as fd:
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
        with pytest.raises(BlockingIOError):
            with flock(p, blocking=False):
                pass
        other = os.open(p, os.O_RDONLY)
        try:
            assert not try_flock(other, shared=True)
        finally:
            os.close(other)
    with flock(p, blocking=False, create=False):  # released: free again
        pass


def test_shared_flocks_coexist_and_an_fd_lock_is_unlocked_but_left_open(tmp_path):
    p = tmp_path / "lock"
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with flock(fd, shared=True), flock(p, shared=True, blocking=False):
            pass
        os.fstat(fd)  # still open
        other = os.open(p, os.O_RDONLY)
        try:
            assert try_flock(other)  # the shared lock on fd was dropped on exit
        finally:
            os.close(other)
    finally:
        os.close(fd)


def test_a_lock_dies_with_its_process_even_by_sigkill(tmp_path):
    p = tmp_path / "lock"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child holds the lock until it is killed
        try:
            with flock(p):
                os.write(w, b"!")
                while True:
                    time.sleep(1)
        finally:
            os._exit(1)
    os.close(w)
    try:
        assert os.read(r, 1) == b"!"
        fd = os.open(p, os.O_RDONLY)
        try:
            assert not try_flock(fd)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pid = 0
            assert try_flock(fd)
        finally:
            os.close(fd)
    finally:
        os.close(r)
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def test_errors_other_than_a_held_lock_propagate(tmp_path):
    with pytest.raises(OSError) as err:
        try_flock(1 << 20)  # no such descriptor
    assert err.value.errno == errno.EBADF
