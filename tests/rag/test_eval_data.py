"""The labelled retrieval set (tests/rag/data/docs_qa.jsonl) and bench/bench_rag_eval.py's scoring."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_rag_eval", ROOT / "bench" / "bench_rag_eval.py")
ev = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ev)


def test_the_set_is_well_formed_and_its_answers_are_in_the_docs():
    questions = ev.load_questions()
    assert len(questions) >= 50
    assert len({q["id"] for q in questions}) == len(questions)
    docs = ev.corpus_docs()
    ok, gone = ev.answerable(questions, docs)
    # docs get edited: a few answers may drift (the bench leaves them out and says so), not many
    assert len(gone) <= 5, f"answer passages no longer in docs/: {gone}"
    for q in questions:
        assert q["question"].strip() and q["answers"]
        for a in q["answers"]:
            assert a["doc"].startswith("docs/") and a["doc"] != "docs/PERFORMANCE.md"
            # questions are written, not cut from the doc: no question is a sentence of its answer
            assert ev._norm(q["question"]).lower() not in ev._norm(a["text"]).lower()


def test_relevance_needs_the_doc_and_the_passage_even_when_a_chunk_boundary_cuts_it():
    passage = "one two three four five six seven eight nine ten"
    answers = [{"doc": "docs/A.md", "text": passage}]
    assert ev.relevant({"doc_id": "docs/A.md", "text": f"before {passage} after"}, answers)
    assert ev.relevant({"doc_id": "docs/A.md", "text": "one two three four five six end"}, answers)
    assert ev.relevant({"doc_id": "docs/A.md", "text": "start five six seven eight nine ten"}, answers)
    assert not ev.relevant({"doc_id": "docs/A.md", "text": "one two three four five"}, answers)
    assert not ev.relevant({"doc_id": "docs/B.md", "text": passage}, answers)


def test_data_lines_are_json_objects_with_the_documented_keys():
    for line in (ROOT / "tests" / "rag" / "data" / "docs_qa.jsonl").read_text().splitlines():
        entry = json.loads(line)
        assert set(entry) == {"id", "question", "answers"}
        assert all(set(a) == {"doc", "text"} for a in entry["answers"])
