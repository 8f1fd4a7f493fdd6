"""The execution journal's schema in PostgreSQL (component ``"journal"``) and its one append statement.

The tables and their meaning are described at the top of ``store/_pg_journal.py``
(the module that writes them). :data:`MIGRATIONS` ``[i]`` brings the component
from version ``i`` to ``i + 1``; **append, never edit** an entry; applied only by
``openfunctions-mcp db migrate`` (registered in ``core/postgres.py``'s ``COMPONENTS``), refused at serve time
when the database's version differs from ``len(MIGRATIONS)``.

- **1** — the tables, the indexes and a PL/pgSQL ``of_journal_append`` function
  (the journal's head row locked ``FOR UPDATE``, then records inserted one by one,
  then the head updated).
- **2** — ``of_journals.prev_link`` (the ``prev`` of the newest record, so that
  one ``UPDATE ... RETURNING`` of the head yields both the old and the new link),
  filled in for existing journals; ``of_journal_append`` dropped: an append is
  now the one SQL statement :data:`APPEND` (one round trip, no function call,
  no separate lock statement). A server of the previous release still running
  on the database fails its appends (certainty ``unknown``) instead of writing
  a head without ``prev_link``: every replica must run one release.
- **3** — per-instance streams: ``of_journal_streams`` holds one head per
  (journal, stream), and a record's key is (journal, stream, seq), so each
  server process appends to its own stream and replicas never wait for one
  row lock. Every existing journal's records become its stream ``''`` (the
  *legacy stream*: its head is the old ``of_journals`` head, its header the
  journal's header, so its chain verifies unchanged); the head columns leave
  ``of_journals``. A record's foreign key now names its stream's row (an
  append's key-share lock falls on its own stream, not on a row every replica
  shares). A server of release 2 still running fails its appends (the head
  columns are gone) rather than writing into the legacy stream.
"""

from __future__ import annotations

from collections.abc import Sequence

_APPEND_FN_V1 = r"""
CREATE OR REPLACE FUNCTION of_journal_append(p_journal text, p_instance text, p_types text[], p_times text[],
                                             p_datas text[], p_rids text[])
RETURNS TABLE(o_idx int, o_seq bigint) LANGUAGE plpgsql AS $fn$
DECLARE
    v_seq bigint;
    v_link text;
    v_prev text;
    i int;
BEGIN
    IF p_instance IS NOT NULL AND NOT EXISTS (SELECT 1 FROM of_journal_instances WHERE instance = p_instance) THEN
        RAISE EXCEPTION 'instance % is no longer registered (another server recovered its calls)', p_instance;
    END IF;
    SELECT last_seq, last_link INTO v_seq, v_link FROM of_journals WHERE name = p_journal FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no journal named %', p_journal;
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_types, 1), 0) LOOP
        IF p_types[i] = 'receipt' AND EXISTS (SELECT 1 FROM of_journal_records r WHERE r.journal = p_journal
                AND r.receipt_id = p_rids[i] AND r.type = 'receipt') THEN
            o_idx := i; o_seq := NULL; RETURN NEXT;
            CONTINUE;
        END IF;
        v_seq := v_seq + 1;
        v_prev := v_link;
        v_link := left(encode(sha256(convert_to('{"data":' || p_datas[i] || ',"prev":"' || v_prev || '","seq":'
                  || v_seq::text || ',"time":' || to_json(p_times[i])::text || ',"type":' || to_json(p_types[i])::text
                  || '}', 'UTF8')), 'hex'), 32);
        INSERT INTO of_journal_records (journal, seq, type, time, data, prev, chk, receipt_id, instance)
            VALUES (p_journal, v_seq, p_types[i], p_times[i], p_datas[i], v_prev, v_link, p_rids[i], p_instance);
        o_idx := i; o_seq := v_seq; RETURN NEXT;
    END LOOP;
    UPDATE of_journals SET last_seq = v_seq, last_link = v_link WHERE name = p_journal;
END
$fn$
"""

COMPONENT = "journal"

MIGRATIONS: list[Sequence[str]] = [
    (  # 1: the execution journal
        """CREATE TABLE of_journals (
            name text COLLATE "C" PRIMARY KEY,
            header text NOT NULL,
            last_seq bigint NOT NULL,
            last_link text NOT NULL)""",
        """CREATE TABLE of_journal_records (
            journal text COLLATE "C" NOT NULL REFERENCES of_journals (name),
            seq bigint NOT NULL,
            type text NOT NULL,
            time text NOT NULL,
            data text NOT NULL,
            prev text NOT NULL,
            chk text NOT NULL,
            receipt_id text,
            instance text,
            PRIMARY KEY (journal, seq))""",
        "CREATE UNIQUE INDEX of_journal_receipts ON of_journal_records (journal, receipt_id) WHERE type = 'receipt'",
        "CREATE INDEX of_journal_starts ON of_journal_records (journal, instance, receipt_id) WHERE type = 'start'",
        """CREATE TABLE of_journal_instances (
            instance text PRIMARY KEY,
            journal text COLLATE "C" NOT NULL,
            lock_key bigint NOT NULL,
            host text,
            pid integer,
            started_at timestamptz NOT NULL DEFAULT now())""",
        _APPEND_FN_V1,
    ),
    (  # 2: one statement per append (the head carries the newest record's prev)
        "ALTER TABLE of_journals ADD COLUMN prev_link text",
        "UPDATE of_journals j SET prev_link = r.prev FROM of_journal_records r "
        "WHERE r.journal = j.name AND r.seq = j.last_seq",
        "DROP FUNCTION of_journal_append(text, text, text[], text[], text[], text[])",
    ),
    (  # 3: one stream (head, seq, chain) per server instance; existing records form the legacy stream ''
        """CREATE TABLE of_journal_streams (
            journal text COLLATE "C" NOT NULL REFERENCES of_journals (name),
            stream text COLLATE "C" NOT NULL,
            header text NOT NULL,
            last_seq bigint NOT NULL,
            last_link text NOT NULL,
            prev_link text,
            PRIMARY KEY (journal, stream))""",
        "INSERT INTO of_journal_streams (journal, stream, header, last_seq, last_link, prev_link) "
        "SELECT name, '', header, last_seq, last_link, prev_link FROM of_journals",
        "ALTER TABLE of_journal_records ADD COLUMN stream text COLLATE \"C\" NOT NULL DEFAULT ''",
        "ALTER TABLE of_journal_records ALTER COLUMN stream DROP DEFAULT",
        "ALTER TABLE of_journal_records DROP CONSTRAINT of_journal_records_journal_fkey",
        "ALTER TABLE of_journal_records DROP CONSTRAINT of_journal_records_pkey",
        "ALTER TABLE of_journal_records ADD CONSTRAINT of_journal_records_pkey PRIMARY KEY (journal, stream, seq)",
        "ALTER TABLE of_journal_records ADD CONSTRAINT of_journal_records_stream_fkey FOREIGN KEY (journal, stream) "
        "REFERENCES of_journal_streams (journal, stream)",
        "ALTER TABLE of_journals DROP COLUMN last_seq, DROP COLUMN last_link, DROP COLUMN prev_link",
    ),
]

#: One record appended to one stream: the stream head's UPDATE takes that stream's row lock (only its own
#: instance appends there, and a recovering replica settling a dead instance's starts: nobody else waits on
#: it), assigns seq = last_seq + 1 and computes chk from the old last_link (which becomes prev_link); the
#: INSERT writes the record with them; one statement, so one commit in autocommit. No row comes back when the
#: stream does not exist, the instance is no longer registered, or the call already has a receipt in any
#: stream of the journal ("receipt" rows only): the caller tells those apart (:data:`REFUSAL`). A receipt for
#: the same call committed meanwhile by another transaction is not in the statement's snapshot: its INSERT
#: then fails on the unique index ``of_journal_receipts`` (journal, receipt_id), which spans every stream, and
#: the whole statement rolls back (nothing written, no seq used). chk is the v2 line checksum of
#: core/journal/_encoder.py (``record_chk`` in ``store/_pg_journal.py`` is its Python twin, used by verify).
APPEND = """WITH head AS (
    UPDATE of_journal_streams SET last_seq = last_seq + 1, prev_link = last_link,
        last_link = left(encode(sha256(convert_to('{"data":' || %(data)s::text || ',"prev":"' || last_link
            || '","seq":' || (last_seq + 1)::text || ',"time":' || to_json(%(time)s::text)::text
            || ',"type":' || to_json(%(type)s::text)::text || '}', 'UTF8')), 'hex'), 32)
    WHERE journal = %(journal)s AND stream = %(stream)s
      AND (%(instance)s::text IS NULL OR EXISTS (SELECT 1 FROM of_journal_instances WHERE instance = %(instance)s))
      AND NOT (%(type)s = 'receipt' AND EXISTS (SELECT 1 FROM of_journal_records r WHERE r.journal = %(journal)s
               AND r.type = 'receipt' AND r.receipt_id = %(receipt_id)s))
    RETURNING last_seq, prev_link, last_link)
INSERT INTO of_journal_records (journal, stream, seq, type, time, data, prev, chk, receipt_id, instance)
SELECT %(journal)s, %(stream)s, last_seq, %(type)s, %(time)s, %(data)s, prev_link, last_link, %(receipt_id)s,
       %(instance)s
FROM head RETURNING seq"""

#: Why :data:`APPEND` returned no row: (stream exists, instance registered); both true -> a duplicate receipt.
REFUSAL = ("SELECT EXISTS (SELECT 1 FROM of_journal_streams WHERE journal = %(journal)s AND stream = %(stream)s), "
           "%(instance)s::text IS NULL OR EXISTS (SELECT 1 FROM of_journal_instances WHERE instance = %(instance)s)")

#: Release 2's append (the journal's one head row), kept to write test fixtures of a release-2 journal and
#: to show what migration 3 changed; no server runs it.
APPEND_V2 = """WITH head AS (
    UPDATE of_journals SET last_seq = last_seq + 1, prev_link = last_link,
        last_link = left(encode(sha256(convert_to('{"data":' || %(data)s::text || ',"prev":"' || last_link
            || '","seq":' || (last_seq + 1)::text || ',"time":' || to_json(%(time)s::text)::text
            || ',"type":' || to_json(%(type)s::text)::text || '}', 'UTF8')), 'hex'), 32)
    WHERE name = %(journal)s
      AND (%(instance)s::text IS NULL OR EXISTS (SELECT 1 FROM of_journal_instances WHERE instance = %(instance)s))
      AND NOT (%(type)s = 'receipt' AND EXISTS (SELECT 1 FROM of_journal_records r WHERE r.journal = %(journal)s
               AND r.type = 'receipt' AND r.receipt_id = %(receipt_id)s))
    RETURNING last_seq, prev_link, last_link)
INSERT INTO of_journal_records (journal, seq, type, time, data, prev, chk, receipt_id, instance)
SELECT %(journal)s, last_seq, %(type)s, %(time)s, %(data)s, prev_link, last_link, %(receipt_id)s, %(instance)s
FROM head RETURNING seq"""

#: The unique index a concurrent duplicate receipt trips (the statement then rolled back as a whole).
RECEIPTS_INDEX = "of_journal_receipts"

__all__ = ["APPEND", "APPEND_V2", "MIGRATIONS", "RECEIPTS_INDEX", "REFUSAL"]
