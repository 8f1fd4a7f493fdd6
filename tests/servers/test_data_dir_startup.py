"""Starting on a data dir that cannot hold a journal: one line on stderr and exit 2."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest

from .conftest import serve_argv, server_env

pytestmark = pytest.mark.slow


def _serve(data_dir: Path, *, preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        serve_argv("--data-dir", str(data_dir)),
        env=server_env(PYTHONDONTWRITEBYTECODE="1"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=preexec,
    )


def _assert_one_line_exit_2(out: subprocess.CompletedProcess, *needles: str) -> None:
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert len(lines) == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert lines[0].startswith("openfunctions-mcp: ")
    for n in needles:
        assert n in lines[0], lines[0]
    assert out.stdout == ""


def test_a_data_dir_that_is_a_file(tmp_path):
    f = tmp_path / "data"
    f.write_text("not a dir")
    _assert_one_line_exit_2(_serve(f), str(f), "not a directory")


def test_a_data_dir_under_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    _assert_one_line_exit_2(_serve(f / "data"), str(f / "data"))


def _full_disk_simulated() -> None:
    # A file-size limit of 0 makes every write fail (EFBIG), as a full disk does (ENOSPC).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))


def test_a_data_dir_where_nothing_can_be_written(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    _assert_one_line_exit_2(_serve(data, preexec=_full_disk_simulated), str(data), "cannot write")


@contextlib.contextmanager
def _tmpfs(where: Path, *options: str):
    where.mkdir()
    opts = ",".join(("size=256k", *options))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_data_dir_on_a_full_filesystem(tmp_path):
    with _tmpfs(tmp_path / "mnt") as mnt:
        with open(mnt / "filler", "wb") as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
        _assert_one_line_exit_2(_serve(mnt / "data"), str(mnt / "data"), "No space left")


def test_a_data_dir_on_a_read_only_filesystem(tmp_path):
    if os.geteuid() != 0:
        data = tmp_path / "data"
        data.mkdir(mode=0o500)
        _assert_one_line_exit_2(_serve(data), str(data))
        return
    with _tmpfs(tmp_path / "mnt", "ro") as mnt:
        _assert_one_line_exit_2(_serve(mnt / "data"), str(mnt / "data"), "Read-only")


def test_a_world_writable_data_dir_is_served_with_a_warning(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o777)
    out = _serve(data)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "data_dir_permissions" in out.stderr and "chmod 700" in out.stderr
    fresh = _serve(tmp_path / "fresh")
    assert fresh.returncode == 0 and "data_dir_permissions" not in fresh.stderr
    assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o700
