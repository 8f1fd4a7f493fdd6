"""journal inspect / verify / tail, through add_commands on a throwaway parser and via python -m."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import anyio
import pytest

from openfunctions.core.journal import JournalLog
from openfunctions.core.journal.cli import add_commands

from ._proc import kill9, readline, spawn


def run(capsys, *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="openfunctions-mcp")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    rc = args.func(args)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def journal(tmp_path):
    p = tmp_path / "exec.jsonl"

    async def make():
        log = await JournalLog.open(p, kind="execution")
        for i in range(6):
            await log.append("start" if i % 2 == 0 else "receipt", {"i": i})
        await log.close()

    anyio.run(make)
    return p


def test_inspect_text_and_json(journal, capsys):
    rc, out, _ = run(capsys, "journal", "inspect", str(journal))
    assert rc == 0
    assert "records   6 (last seq 6)" in out and "kind execution" in out and "torn tail none" in out
    rc, out, _ = run(capsys, "journal", "inspect", "--json", str(journal))
    info = json.loads(out)
    assert rc == 0 and info["ok"] and info["last_seq"] == 6
    assert info["types"] == {"receipt": 3, "start": 3}
    assert info["torn_tail"] is None and info["owner"] == {"locked": False, "pid": None}


def test_inspect_reports_torn_tail_and_live_owner(journal, capsys):
    with open(journal, "ab") as f:
        f.write(b'{"chk":"1')
    holder = spawn("holder", journal)  # repairs the tail on open, then holds the lock
    try:
        assert readline(holder) == "locked"
        rc, out, _ = run(capsys, "journal", "inspect", "--json", str(journal))
        info = json.loads(out)
        assert info["owner"] == {"locked": True, "pid": holder.pid}
        assert info["torn_tail"] is None and info["broken_copies"] == ["exec.jsonl.broken"]
    finally:
        kill9(holder)
    with open(journal, "ab") as f:
        f.write(b'{"chk":"1')
    rc, out, _ = run(capsys, "journal", "verify", str(journal))
    assert rc == 0 and "torn tail of 9 bytes" in out


def test_verify_corrupt_exits_nonzero_with_reason(journal, capsys):
    data = journal.read_bytes().replace(b'"i":3', b'"i":4')
    journal.write_bytes(data)
    rc, out, err = run(capsys, "journal", "verify", str(journal))
    assert rc == 1 and "checksum mismatch" in err and "line 5" in err and "offset" in err
    rc, out, _ = run(capsys, "journal", "verify", "--json", str(journal))
    doc = json.loads(out)
    assert rc == 1 and doc["ok"] is False and doc["error"]["code"] == "journal_corrupt"
    assert doc["error"]["details"]["line"] == 5


def test_verify_unreadable_paths(tmp_path, journal, capsys):
    rc, _, err = run(capsys, "journal", "verify", str(tmp_path / "missing.jsonl"))
    assert rc == 2 and "No such file" in err
    link = tmp_path / "link.jsonl"
    link.symlink_to(journal)
    rc, _, err = run(capsys, "journal", "verify", str(link))
    assert rc == 2 and "symlink" in err


def test_tail(journal, capsys):
    rc, out, _ = run(capsys, "journal", "tail", "-n", "2", str(journal))
    assert rc == 0
    lines = out.strip().split("\n")
    assert [ln.split("\t")[0] for ln in lines] == ["5", "6"]
    assert lines[1].split("\t")[2:] == ["receipt", '{"i":5}']
    rc, out, _ = run(capsys, "journal", "tail", "--json", "-n", "3", str(journal))
    assert [r["seq"] for r in json.loads(out)["records"]] == [4, 5, 6]
    rc, out, _ = run(capsys, "journal", "tail", "-n", "0", str(journal))
    assert rc == 0 and out == ""


def test_python_dash_m(journal):
    cp = subprocess.run(
        [sys.executable, "-m", "openfunctions.core.journal.cli", "verify", "--json", str(journal)],
        capture_output=True, text=True, timeout=60,
    )
    assert cp.returncode == 0 and json.loads(cp.stdout)["last_seq"] == 6


# -- copies, follow, show -------------------------------------------------------


def test_a_copied_journal_with_mode_0644_is_read_with_a_warning(journal, tmp_path, capsys):
    import os
    import shutil

    copy = tmp_path / "copy.jsonl"
    shutil.copyfile(journal, copy)
    os.chmod(copy, 0o644)
    for i, command in enumerate(("inspect", "verify", "tail")):
        rc, out, err = run(capsys, "journal", command, str(copy))
        assert rc == 0, err
        if i == 0:  # a process warns once per path
            assert "mode 0644 (group or others can read it); reading it anyway" in err
    rc, out, _ = run(capsys, "journal", "verify", str(copy))
    assert rc == 0 and "ok: 6 records" in out
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    rc, _, err = run(capsys, "journal", "verify", str(fifo))
    assert rc == 2 and "not a regular file" in err


def test_show_finds_a_receipt_by_id_in_a_data_dir(tmp_path, capsys):
    from openfunctions.core import ToolRegistry, define_tool
    from openfunctions.core.journal import ExecutionJournal

    data = tmp_path / "data"

    async def call() -> str:
        journal = await ExecutionJournal.open(data / "journal" / "tools.journal")
        reg = ToolRegistry([define_tool(name="t", description="", handler=lambda p, c: {"ok": True})], sink=journal)
        detailed = await reg.execute_detailed("t", {})
        await journal.close()
        return detailed.receipt.receipt_id

    receipt_id = anyio.run(call)
    rc, out, err = run(capsys, "journal", "show", receipt_id, "--data-dir", str(data))
    assert rc == 0, err
    assert out.startswith("start (seq 1") and "\nreceipt (seq 2" in out and '"outcome": "succeeded"' in out
    rc, out, _ = run(capsys, "journal", "show", "--json", receipt_id, str(data / "journal" / "tools.journal"))
    assert [r["type"] for r in json.loads(out)["records"]] == ["start", "receipt"]
    rc, _, err = run(capsys, "journal", "show", "rcpt_nope", "--data-dir", str(data))
    assert rc == 2 and "no record of receipt 'rcpt_nope'" in err and "1 journal file(s)" in err


def test_tail_follow_prints_appended_records(journal):
    import signal
    import threading

    proc = subprocess.Popen(
        [sys.executable, "-m", "openfunctions.core.journal.cli", "tail", "-f", "-n", "1", "--interval", "0.05",
         str(journal)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # a runner started in the background (nohup, `cmd &`) passes SIGINT on ignored: let it stop the follower
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    got = [threading.Event() for _ in range(2)]

    def pump() -> None:
        for line in proc.stdout:
            lines.append(line)
            got[min(len(lines), 2) - 1].set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert got[0].wait(30), proc.stderr.read() if proc.poll() is not None else "no first line"
        assert lines[0].split("\t")[0] == "6"

        async def append() -> None:
            log = await JournalLog.open(journal, kind="execution")
            await log.append("start", {"i": 6})
            await log.close()

        anyio.run(append)
        assert got[1].wait(30), "the appended record was not printed"
        assert lines[1].split("\t")[0] == "7" and lines[1].rstrip("\n").endswith('{"i":6}')
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        proc.stdout.close()
        proc.stderr.close()


def test_the_file_only_group_names_where_database_journals_are_read(capsys):
    # The core reads journal files; database journals are the store package's rows and its reader's job.
    for argv in (("journal", "tail", "--database", "postgresql://127.0.0.1:1/x"),
                 ("journal", "show", "rcpt_x", "--database", "postgresql://127.0.0.1:1/x"),
                 ("journal", "verify", "postgresql://127.0.0.1:1/x")):
        rc, out, err = run(capsys, *argv)
        assert rc == 2 and out == "", argv
        assert "reads journal files only" in err and f"openfunctions-mcp journal {argv[1]}" in err, (argv, err)


def test_the_server_cli_adds_the_group_with_the_database_reader():
    from openfunctions.store.journal_cli import PgJournals
    from openfunctions.store.journal_cli import add_commands as add_with_database

    parser = argparse.ArgumentParser(prog="openfunctions-mcp")
    add_with_database(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["journal", "tail", "--database", "postgresql://127.0.0.1:1/x"])
    assert isinstance(args.journal_database, PgJournals)
