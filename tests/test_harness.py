"""tests/_harness: the waits fail with what they waited for, the process helpers tell a zombie from a live
child and a kill -9 from an earlier exit, and a wedged LineChild is killed by its watchdog."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from tests._harness import LineChild, alive, sigkill, wait_for, writer_threads

PY = sys.executable


def test_wait_for_returns_the_first_truthy_value_and_names_what_it_gave_up_on() -> None:
    calls = iter([0, None, "", "ready"])
    assert wait_for(lambda: next(calls), timeout=5) == "ready"
    with pytest.raises(AssertionError, match="waiting for the moon"):
        wait_for(lambda: False, timeout=0.05, what="the moon")


def test_alive_is_false_for_a_zombie_and_for_a_reaped_child() -> None:
    proc = subprocess.Popen([PY, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert alive(proc.pid)
        proc.kill()  # not reaped yet: a zombie until wait()
        wait_for(lambda: not alive(proc.pid), timeout=10, what="the killed child to be a zombie")
        assert proc.poll() is not None  # it was a zombie, not gone: reaping still finds its status
        assert not alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()


def test_sigkill_returns_the_unread_output_and_refuses_a_child_that_had_exited() -> None:
    proc = subprocess.Popen([PY, "-c", "print('acked 1', flush=True); import time; time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "acked 1\n"
    assert sigkill(proc) == ""
    done = subprocess.Popen([PY, "-c", "print('bye')"], stdout=subprocess.PIPE, text=True)
    done.wait(timeout=30)
    with pytest.raises(AssertionError, match="had exited with 0"):
        sigkill(done)


def test_a_wedged_line_child_is_killed_by_its_watchdog_and_readline_says_so() -> None:
    child = LineChild([PY, "-c", "import time; time.sleep(60)"], timeout=0.2)
    with pytest.raises(AssertionError, match="without replying"):
        child.readline()  # returns only because the watchdog killed the child
    child.close()
    assert child.proc.returncode is not None


def test_writer_threads_finds_threads_by_the_journal_file_name(tmp_path) -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="journal-writer:j.jsonl", daemon=True)
    t.start()
    try:
        assert writer_threads(tmp_path / "j.jsonl") == [t]
        assert writer_threads(tmp_path / "other.jsonl") == []
    finally:
        stop.set()
        t.join()
