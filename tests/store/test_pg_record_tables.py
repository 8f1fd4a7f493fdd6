"""The one PostgreSQL record table (core/_pg_records.py) under runs, tasks and the resolution inbox, on a real PostgreSQL.

- a database at the schema versions before the layout (tasks 1, runs 2, work 3), its rows written by the
  statements that code wrote with (quoted below), reads back the same after ``db migrate``;
- a key's live fold (``TableRecordLog`` over the key's ``PgKeyTable``) equals the fold of its rows read back;
- the PostgreSQL inbox refuses what the resolution stream refuses, as the file inbox does.
"""

from __future__ import annotations

import asyncio

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core.postgres import apply_migrations, migrate_components, migrations_of
from openfunctions.core.records import RecordMalformed, RecordStreamError, TableRecordLog, UnknownRecordType
from openfunctions.store import StoreFailed

from ._journal_backends import migrated

pytestmark = pytest.mark.anyio

#: The versions before the one layout, and the statements that code wrote its rows with (verbatim).
BEFORE = {"tasks": 1, "runs": 2, "work": 3}
V1_TASK = ("WITH t AS (INSERT INTO of_tasks (task_id, journal, principal, instance, expires_at_ms) "
           "VALUES (%s, %s, %s, %s, %s) RETURNING task_id) "
           "INSERT INTO of_task_records (task_id, type, data) SELECT task_id, %s, %s FROM t")
V1_TASK_APPEND = ("INSERT INTO of_task_records (task_id, type, data) SELECT task_id, %s, %s FROM of_tasks "
                  "WHERE task_id = %s AND journal = %s AND NOT settled")
V1_RUN = ("WITH r AS (INSERT INTO of_runs (run_id, space, agent, instance) VALUES (%s, %s, %s, %s) "
          "ON CONFLICT (run_id) DO NOTHING RETURNING run_id) "
          "INSERT INTO of_run_records (run_id, type, data) SELECT run_id, %s, %s FROM r")
V1_RUN_APPEND = "INSERT INTO of_run_records (run_id, type, data) VALUES (%s, %s, %s)"
V1_RESOLVE = "INSERT INTO of_work_resolutions (space, type, data) VALUES (%s, %s, %s) RETURNING seq"
V1_TAIL = ("SELECT r.type, to_char(r.at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') "
           "FROM of_run_records r JOIN of_runs s USING (run_id) WHERE s.space = %s ORDER BY r.seq")


def _j(data: dict) -> str:
    from openfunctions.core import canonical_json

    return canonical_json(data)


def _task_records(task_id: str) -> list[tuple[str, dict]]:
    from openfunctions.servers import _task_records as T

    return [T.created(task_id, principal="alice", tool="t", receipt_id="rcpt_1", ttl_ms=60_000, poll_interval_ms=500,
                      expires_at_ms=10**15),
            T.status(task_id, T.INPUT_REQUIRED, input_requests={"q": {"method": "elicitation/create"}}),
            ("task.future", {"task_id": task_id, "note": "a newer writer's record"}),
            T.settled(task_id, T.COMPLETED, result={"content": [], "isError": False})]


def _run_records(run_id: str) -> list[tuple[str, dict]]:
    from openfunctions.agents import _records as R

    return [(R.STARTED, R.started(run_id=run_id, agent="a", provider="p", model="m", instructions="i", tools=[],
                                  limits={}, task="hello", principal=None, parent_run_id=None,
                                  parent_receipt_id=None)),
            (R.ROUND, R.round_(run_id=run_id, n=1, model="m", stop_reason="end", usage={"input_tokens": 3},
                               tool_calls=[], text="t")),
            ("run.future", {"run_id": run_id}),
            (R.FINISHED, R.finished(run_id=run_id, status="completed", rounds=1, usage={"input_tokens": 3},
                                    receipts=[], text="done"))]


def _resolve(n: int, as_: str = "applied") -> dict:
    from openfunctions.work._resolutions import resolve_record

    return resolve_record("op_" + str(n) * 32, as_=as_, reason=f"checked {n}", by="carol")


async def test_a_database_of_the_versions_before_reads_back_the_same_after_db_migrate(fresh_db) -> None:
    import psycopg

    from openfunctions.agents._records import AGENT_RUNS, in_summary
    from openfunctions.agents._runlog import read_runs_in_database, tail_runs_in_database
    from openfunctions.core.postgres import COMPONENTS
    from openfunctions.core.records import entries
    from openfunctions.servers._pg_tasks import open_pg_task_log
    from openfunctions.servers._task_records import TASKS
    from openfunctions.work._pg import open_pg_work

    async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as conn:
        for c in COMPONENTS:
            steps = migrations_of(c.name)
            await apply_migrations(conn, c.name, steps[:BEFORE.get(c.name, len(steps))])
        # tasks, as the code before wrote them (one task; the status and settle each guarded by "not settled")
        task = _task_records("task_" + "a" * 32)
        await conn.execute(V1_TASK, ("task_" + "a" * 32, "tools", "alice", None, 10**15, task[0][0], _j(task[0][1])))
        for t, d in task[1:]:
            await conn.execute(V1_TASK_APPEND, (t, _j(d), "task_" + "a" * 32, "tools"))
        # runs: one whose first record predates the `at` column (NULL, as migration 2 left such rows)
        run_id = "run_" + "b" * 32
        run = _run_records(run_id)
        await conn.execute(V1_RUN, (run_id, "default", "a", None, run[0][0], _j(run[0][1])))
        await conn.execute("UPDATE of_run_records SET at = NULL WHERE run_id = %s", (run_id,))
        for t, d in run[1:]:
            await conn.execute(V1_RUN_APPEND, (run_id, t, _j(d)))
        tail_before = await (await conn.execute(V1_TAIL, ("default",))).fetchall()
        # the resolution inbox: the identity seq is global over spaces (so a space's seqs have gaps)
        inbox_before = []
        for n, space in [(1, "work"), (2, "other"), (3, "work")]:
            data = _resolve(n)
            seq = (await (await conn.execute(V1_RESOLVE, (space, "resolve", _j(data)))).fetchone())[0]
            if space == "work":
                inbox_before.append((seq, data))

    versions = await migrate_components(fresh_db)
    assert {k: versions[k] for k in BEFORE} == {"tasks": (1, 2), "runs": (2, 3), "work": (3, 4)}

    log = await open_pg_task_log(fresh_db, "tools")
    try:
        rows = await log.rows("task_" + "a" * 32)
        assert [(r.type, r.data) for r in rows] == task and {r.time for r in rows} == {""}
        assert TASKS.fold(rows) == TASKS.fold(entries(task))  # the same task, settled, as before
    finally:
        await log.close()

    want = AGENT_RUNS.fold(entries((t, d) for t, d in run if in_summary(t)))
    assert await read_runs_in_database(fresh_db, run_id) == want
    tailed: list = []
    await tail_runs_in_database(fresh_db, tailed.append, last=10)
    assert [(r.type, r.time) for r in tailed] == [tuple(row) for row in tail_before]
    assert tailed[0].time is None and all(r.time for r in tailed[1:])  # `at` moved into `time`

    work = await open_pg_work(fresh_db, "work")
    try:
        got = await anyio.to_thread.run_sync(work.resolutions.read)
        assert got == inbox_before and [s for s, _ in got] == [1, 3]
        added = await work.resolutions.resolve("op_" + "4" * 32, as_="not_applied", reason="seen", by="carol")
        assert added["seq"] > inbox_before[-1][0]  # the identity continues: a copied seq is never reused
        assert len(await anyio.to_thread.run_sync(work.resolutions.read)) == 3
    finally:
        await work.aclose()


async def test_the_database_inbox_refuses_what_the_resolution_stream_refuses_like_the_file_inbox(pg_dsn, tmp_path):
    import psycopg

    from openfunctions.work._pg import open_pg_work
    from openfunctions.work._resolutions import RESOLVE, ResolutionInbox
    from tests._pg import unique_name

    dsn = await migrated(pg_dsn)
    cases = [("withdraw", _j({"v": 1, "operation_id": "op_" + "1" * 32}), UnknownRecordType, "'withdraw'"),
             (RESOLVE, _j({**_resolve(2), "as": "maybe"}), RecordMalformed, "'resolve'"),
             (RESOLVE, "{not json", RecordMalformed, "not JSON")]
    for type_, text, error, named in cases:
        space = unique_name("inbox")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(V1_RESOLVE, (space, RESOLVE, _j(_resolve(1))))
            bad = conn.execute(V1_RESOLVE, (space, type_, text)).fetchone()[0]
        work = await open_pg_work(dsn, space)
        try:
            with pytest.raises(error, match=rf"seq {bad} \({named}|seq {bad} .*{named}"):
                await anyio.to_thread.run_sync(work.resolutions.read)
            with pytest.raises(RecordStreamError):  # nothing is appended to an inbox that cannot be read
                await work.resolutions.resolve("op_" + "3" * 32, as_="applied", reason="r", by="b")
        finally:
            await work.aclose()
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM of_work_resolutions WHERE space = %s", (space,)).fetchone()[0] == 2
    # the file inbox, given the same unknown record, refuses with the same code
    from openfunctions.core.journal import JournalLog
    from openfunctions.work._records import RESOLUTIONS_FILE, RESOLUTIONS_KIND

    log = await JournalLog.open(tmp_path / RESOLUTIONS_FILE, kind=RESOLUTIONS_KIND)
    await log.append_many([(RESOLVE, _resolve(1)), ("withdraw", {"v": 1, "operation_id": "op_" + "1" * 32})])
    await log.close()
    with pytest.raises(UnknownRecordType):
        ResolutionInbox(tmp_path).read()


# -- live fold == replay, per key --------------------------------------------------------------------------------------

def _run(coro) -> None:
    asyncio.run(coro)


#: A few examples each: every one is a round of statements on a real PostgreSQL.
FEW = settings(max_examples=4, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
TASK_OPS = st.lists(st.sampled_from(["working", "input", "future"]), max_size=6)


@FEW
@given(ops=TASK_OPS, settle=st.booleans())
def test_a_task_s_live_fold_is_its_rows_replayed(pg_dsn, ops, settle) -> None:
    from openfunctions.servers import _task_records as T
    from openfunctions.servers._pg_tasks import open_pg_task_log
    from openfunctions.servers._tasks_store import fold
    from tests._pg import unique_name

    async def body() -> None:
        log = await open_pg_task_log(await migrated(pg_dsn), unique_name("tools"))
        task_id = T.new_task_id()
        try:
            created = _task_records(task_id)[0]
            await log.create(task_id, principal="alice", instance=None, expires_at_ms=10**15, record=created)
            table = await log.table(task_id)
            live = TableRecordLog(T.TASKS, table, table.records, where=task_id)
            for op in ops:
                if op == "future":
                    await live.append("task.future", {"task_id": task_id})
                else:
                    status = T.WORKING if op == "working" else T.INPUT_REQUIRED
                    await live.append(*T.status(task_id, status, input_requests={"q": {}}))
            if settle:
                assert await log.settle(task_id, T.settled(task_id, T.CANCELLED))  # another writer: the sweep
                with pytest.raises(StoreFailed, match="settled"):  # the guard refuses: nothing lands
                    await live.append(*T.status(task_id, T.WORKING))
            rows = await log.rows(task_id)
            assert [r.seq for r in rows] == sorted({r.seq for r in rows})
            replayed = T.TASKS.fold(rows)
            if settle:  # the live fold did not see the other writer's settle: its rows did
                assert replayed[task_id].status == T.CANCELLED
                assert T.TASKS.fold(rows[:-1]) == live.state
            else:
                assert live.state == replayed == fold(await log.records(task_id))
            assert [r.type for r in live.unknown] == ["task.future"] * ops.count("future")
            await live.close()
        finally:
            await log.close()

    _run(body())


@FEW
@given(ops=st.lists(st.sampled_from(["round", "future"]), max_size=6), batch=st.booleans())
def test_a_run_s_live_fold_is_its_rows_replayed(pg_dsn, ops, batch) -> None:
    from openfunctions.agents import _records as R
    from openfunctions.agents._pg_runs import open_pg_run_log
    from openfunctions.core import new_id
    from tests._pg import unique_name

    async def body() -> None:
        log = await open_pg_run_log(await migrated(pg_dsn), unique_name("runs"))
        run_id = new_id("run")
        try:
            first, _, _, last = _run_records(run_id)
            await log.start(run_id, "a", first)
            table = await log.table(run_id)
            live = TableRecordLog(R.AGENT_RUNS, table, table.records, where=run_id)
            records = [(R.ROUND, R.round_(run_id=run_id, n=i, model="m", stop_reason="tool", usage={}, tool_calls=[],
                                           text=None))
                       if op == "round" else ("run.future", {"run_id": run_id}) for i, op in enumerate(ops, 1)]
            if batch:
                await live.append_many(records)
            else:
                for r in records:
                    await live.append(*r)
            rows = await log.rows(run_id)
            assert live.state == R.AGENT_RUNS.fold(rows) and live.state[run_id].finished is None
            assert [(r.type, r.data) for r in rows] == [first, *records]
            assert [r.type for r in live.unknown] == ["run.future"] * ops.count("future")
            assert await log.finish(run_id, last)  # the run's one end (its row marked finished with it)
            with pytest.raises(StoreFailed, match="finished"):  # its guard: a finished run takes no more records
                await live.append(R.ROUND, records[0][1] if records else first[1])
            assert R.AGENT_RUNS.fold(await log.rows(run_id))[run_id].finished is not None
            await live.close()
        finally:
            await log.close()

    _run(body())


@FEW
@given(verdicts=st.lists(st.sampled_from(["applied", "not_applied"]), min_size=1, max_size=5))
def test_the_resolution_inbox_s_live_fold_is_its_rows_replayed(pg_dsn, verdicts) -> None:
    from openfunctions.work._pg import open_pg_work
    from openfunctions.work._resolutions import RESOLUTIONS, RESOLVE
    from tests._pg import unique_name

    async def body() -> None:
        dsn = await migrated(pg_dsn)
        work, other = await open_pg_work(dsn, unique_name("inbox")), None
        try:
            live = TableRecordLog(RESOLUTIONS, table := await work.resolutions.table(), table.records)
            for i, v in enumerate(verdicts):
                if i == 1:  # another operator's resolution between ours: the live fold does not see it, a reader does
                    other = await work.resolutions.resolve("op_" + "9" * 32, as_="applied", reason="r", by="c")
                await live.append(RESOLVE, _resolve(i, v))
            got = await anyio.to_thread.run_sync(work.resolutions.read)
            assert [s for s, _ in got] == sorted(s for s, _ in got)
            assert [p for p in got if other is None or p[0] != other["seq"]] == live.state
            await live.close()
        finally:
            await work.aclose()

    _run(body())


#: What the task store is handed, one step at a time: a status, a newer writer's record, the settle, or another
#: writer's settle (a survivor's sweep) that this replica's live fold does not see.
TASK_STEPS = st.lists(st.sampled_from(["working", "input", "future", "settle", "swept"]), max_size=6)


@FEW
@given(steps=TASK_STEPS)
def test_the_database_task_store_keeps_each_task_s_live_fold_equal_to_its_rows_replayed(pg_dsn, steps) -> None:
    """``DatabaseTaskStore``: a task this replica writes is a live ``TableRecordLog``; after every record its fold
    is what the rows replay to (``get``). A record after the task settled, here or by another writer, is
    ``False`` and lands nowhere; the live log is dropped with the settle."""
    from openfunctions.servers import _task_records as T
    from openfunctions.servers._pg_tasks import open_pg_task_log
    from openfunctions.servers._tasks_store import DatabaseTaskStore
    from openfunctions.store import open_pg_journal
    from tests._pg import unique_name

    async def body() -> None:
        dsn = await migrated(pg_dsn)
        profile = unique_name("tools")
        journal = await open_pg_journal(dsn, profile)
        store = DatabaseTaskStore(await open_pg_task_log(dsn, profile, pool=journal.pool), journal)
        task_id = T.new_task_id()
        try:
            assert await store.record(*_task_records(task_id)[0])
            live, ended = store.live[task_id], False
            for step in steps:
                before = await store.task_log.rows(task_id)
                if step == "swept":  # another writer settles it, through its own table
                    assert await store.task_log.settle(task_id, T.settled(task_id, T.FAILED, recovered=True)) != ended
                    ended = True
                    continue
                record = {"working": T.status(task_id, T.WORKING), "future": ("task.future", {"task_id": task_id}),
                          "input": T.status(task_id, T.INPUT_REQUIRED, input_requests={"q": {}}),
                          "settle": T.settled(task_id, T.COMPLETED, result={"content": [], "isError": False})}[step]
                assert await store.record(*record) == (not ended)
                after = await store.task_log.rows(task_id)
                if ended:
                    assert after == before and task_id not in store.live  # refused: nothing written, log dropped
                    continue
                assert live.state == T.TASKS.fold(after) and live.state[task_id] == await store.get(task_id)
                ended = step == "settle"
                assert (task_id in store.live) == (not ended)
            assert [r.type for r in live.unknown] == ["task.future"] * steps[:_end(steps)].count("future")
        finally:
            await store.close()
            await journal.close()

    _run(body())


def _end(steps: list[str]) -> int:
    """How many steps reached the live log: those before the first settle (it included) or sweep."""
    ends = [i + (s == "settle") for i, s in enumerate(steps) if s in ("settle", "swept")]
    return ends[0] if ends else len(steps)


#: What the run log is handed: a round, its conversation, a newer writer's record, a claim (taken after the end
#: too); then the run's own end, another writer's end (a survivor's sweep), or none.
RUN_STEPS = st.lists(st.sampled_from(["round", "messages", "future", "claim"]), max_size=5)


@FEW
@given(steps=RUN_STEPS, end=st.sampled_from(["none", "finish", "swept"]))
def test_the_database_run_log_keeps_each_run_s_live_fold_equal_to_its_rows_replayed(pg_dsn, steps, end) -> None:
    """``DatabaseRunLog``: every run it writes folds live (``get``) to what its rows replay to (``load``), after
    every record. After the run's end a claim is still written; a round is refused by name (``RunEnded``),
    nothing written, also when another writer ended it (the live fold then reads the rows again)."""
    from openfunctions.adapters import Message
    from openfunctions.agents import _records as R
    from openfunctions.agents._errors import RunEnded
    from openfunctions.agents._runlog import DatabaseRunLog, interrupted_record
    from openfunctions.core import new_id
    from tests._pg import unique_name

    async def body() -> None:
        log = await DatabaseRunLog.open(await migrated(pg_dsn), unique_name("space"), sweep_interval=None)
        run_id = new_id("run")
        first, round_, future, last = _run_records(run_id)

        async def same() -> None:
            assert log.get(run_id) is not None and log.get(run_id).to_dict() == (await log.load(run_id)).to_dict()

        try:
            await log.append(*first)
            for n, step in enumerate(steps, 1):
                record = {"round": (R.ROUND, {**round_[1], "round": n}), "future": future,
                          "messages": (R.MESSAGES, R.messages_(run_id=run_id, n=n, messages=[Message.user("hi")])),
                          "claim": (R.CLAIM, R.claim(run_id=run_id, agent="a", text="done"))}[step]
                await log.append(*record)
                await same()
            assert [t for t, _ in log.unknown] == ["run.future"] * steps.count("future")
            if end == "none":
                return
            if end == "finish":
                await log.append(*last)
            else:
                assert await log.log.finish(run_id, interrupted_record(log.get(run_id)))
            rows = await log.log.rows(run_id)
            with pytest.raises(RunEnded, match="already finished") as refused:
                await log.append(R.ROUND, {**round_[1], "round": 99})
            assert refused.value.code == "run_ended" and await log.log.rows(run_id) == rows
            await same()
            assert log.get(run_id).status == ("completed" if end == "finish" else "interrupted")
            await log.append(R.CLAIM, R.claim(run_id=run_id, agent="a", text="done"))  # a claim follows its end
            await same()
        finally:
            await log.close()

    _run(body())
