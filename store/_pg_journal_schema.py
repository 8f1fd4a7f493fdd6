"""The execution journal's schema in PostgreSQL (component ``"journal"``) and its one append statement.

The tables and their meaning are described at the top of ``store/_pg_journal.py``
(the module that writes them). :data:`MIGRATIONS` ``[i]`` brings the component
from version ``i`` to ``i + 1``; **append, never edit** an entry; applied only by
``openfunctions-mcp db migrate`` (``store/_migrations.py``), refused at serve time
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
]

#: One record appended: the head row's UPDATE takes the journal's row lock (appends of every replica take
#: turns on it; a waiter re-evaluates the SET on the committed head, READ COMMITTED's rule for UPDATE), assigns
#: seq = last_seq + 1 and computes chk from the old last_link (which becomes prev_link); the INSERT writes the
#: record with them; one statement, so one commit in autocommit. No row comes back when the journal does not
#: exist, the instance is no longer registered, or the call already has a receipt ("receipt" rows only): the
#: caller tells those apart (:func:`refusal`). A receipt committed by a transaction this one waited for is not
#: in the statement's snapshot: its INSERT then fails on the unique index ``of_journal_receipts`` and the
#: whole statement rolls back (nothing written, no seq used). chk is the v2 line checksum of
#: core/journal/_encoder.py (``record_chk`` in ``store/_pg_journal.py`` is its Python twin, used by verify).
APPEND = """WITH head AS (
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

#: Why :data:`APPEND` returned no row: (journal exists, instance registered); both true -> a duplicate receipt.
REFUSAL = ("SELECT EXISTS (SELECT 1 FROM of_journals WHERE name = %(journal)s), "
           "%(instance)s::text IS NULL OR EXISTS (SELECT 1 FROM of_journal_instances WHERE instance = %(instance)s)")

#: The unique index a concurrent duplicate receipt trips (the statement then rolled back as a whole).
RECEIPTS_INDEX = "of_journal_receipts"

__all__ = ["APPEND", "MIGRATIONS", "RECEIPTS_INDEX", "REFUSAL"]
