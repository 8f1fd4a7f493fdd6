"""tests/_harness/pg.py: a session killed before its teardown (a pytest-xdist worker that crashed, a
``kill -9``) leaves its PostgreSQL running; the sweep before any later server start stops that server and deletes its
directory, and leaves alone a directory whose owner still runs or that names no owner."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests._harness import LineChild, alive, wait_for
from tests._harness.pg import ROOT_PREFIX, _postmaster_of, sweep_orphans

pytest.importorskip("pgserver", reason="the test extra installs pgserver")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]

# A session in a child: start the server under argv[1], say where its directory is, wait on stdin.
CHILD = """
import os, sys
from pathlib import Path
from tests._harness.pg import pg_server
session = pg_server(sys.argv[1])  # kept: a dropped generator runs its teardown
next(session)
(root,) = [r for r in Path(sys.argv[1]).glob("ofpg-*/owner") if r.read_text() == str(os.getpid())]
root = root.parent
print(root, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def short_tmp():
    # The server's Unix socket lives in its directory: a short path (tmp_path is too long for sun_path).
    tmp = tempfile.mkdtemp(prefix="ofpgt-", dir="/tmp")
    yield Path(tmp)
    shutil.rmtree(tmp, ignore_errors=True)


def test_a_killed_session_s_server_is_stopped_and_deleted_by_the_next_sweep(short_tmp) -> None:
    live = short_tmp / f"{ROOT_PREFIX}live"  # this process owns it, and this process runs
    live.mkdir()
    (live / "owner").write_text(str(os.getpid()))
    unowned = short_tmp / f"{ROOT_PREFIX}unowned"  # being made, or made by something else
    unowned.mkdir()
    child = LineChild([sys.executable, "-c", CHILD, str(short_tmp)], cwd=REPO, timeout=120)
    try:
        root = Path(child.readline())
        postmaster = _postmaster_of(root / "d")
        assert postmaster is not None and (root / "owner").read_text() == str(child.pid)
        assert sweep_orphans(str(short_tmp)) == []  # its owner runs: nothing to sweep yet
        child.kill9()
        assert alive(postmaster)  # the session died; its server did not
        assert sweep_orphans(str(short_tmp)) == [root]
        assert not alive(postmaster) and not root.exists()
        assert live.exists() and unowned.exists()
    finally:
        child.close()
        wait_for(lambda: not alive(child.pid), timeout=30, what="the child to exit")
        sweep_orphans(str(short_tmp))  # whatever a failed run left
