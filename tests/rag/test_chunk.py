"""Chunking: whole sentences, a token budget, overlap."""

from __future__ import annotations

import pytest

from openfunctions.core import ConfigurationError
from openfunctions.rag import Chunker


def _sentences(n: int, words: int = 7) -> list[str]:
    return [" ".join(f"s{i}w{j}" for j in range(words - 1)) + f" end{i}." for i in range(n)]


def test_chunks_hold_whole_sentences_within_budget_with_overlap():
    sents = _sentences(40)
    chunks = Chunker(max_tokens=30, overlap=8).split(" ".join(sents))
    assert len(chunks) > 5
    for c in chunks:
        assert len(c.split()) <= 30
        assert c.endswith(".")  # never cut inside a sentence
        for s in sents:
            assert (s in c) or not any(w in c.split() for w in s.split()[-1:]), "a sentence was split"
    for a, b in zip(chunks, chunks[1:], strict=False):
        last = a.split(". ")[-1]
        assert b.startswith(last.rstrip(".")), "the next chunk starts with the previous chunk's last sentence"
    joined = " ".join(chunks)
    assert all(s in joined for s in sents)  # nothing lost


def test_no_overlap_means_disjoint_chunks():
    text = " ".join(_sentences(20))
    chunks = Chunker(max_tokens=21, overlap=0).split(text)
    assert " ".join(chunks) == text


def test_a_sentence_longer_than_the_budget_is_cut_into_runs():
    words = [f"w{i}" for i in range(100)]
    chunks = Chunker(max_tokens=30, overlap=5).split(" ".join(words))
    assert all(len(c.split()) <= 30 for c in chunks)
    seen = [w for c in chunks for w in c.split()]
    assert set(seen) == set(words)


def test_paragraph_breaks_end_sentences_and_blank_text_is_empty():
    chunks = Chunker(max_tokens=8, overlap=0).split("a heading\n\nfirst para has words here\n\nsecond")
    assert chunks[0].startswith("a heading")
    assert Chunker().split("   \n\n  ") == []


@pytest.mark.parametrize("kw", [{"max_tokens": 4}, {"max_tokens": 20, "overlap": 15}, {"overlap": -1}])
def test_bad_settings_refused(kw):
    with pytest.raises(ConfigurationError):
        Chunker(**kw)


def test_sentences_are_found_one_match_at_a_time_with_the_pieces_re_split_gives():
    """The chunker walks the sentence ends with ``finditer`` (a worker thread splitting a large document lets the
    event loop run between two matches; ``re.split`` held the GIL for the whole text): the same pieces, so the
    same chunks and the same ``spec``, on texts of every mix of ends, blank lines and spaces."""
    import random

    from openfunctions.rag._chunk import _SENTENCE_END, _parts

    rng = random.Random(7)
    pieces = ["a", "bb", " ", ".", "!", "?", "\n", "\n\n", "  ", "\t", "x. ", "\n \n", ". \n\n", "é"]
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        assert list(_parts(text)) == _SENTENCE_END.split(text), repr(text)
    assert Chunker().spec == "sentences-v1:180:30"  # unchanged: documents ingested before are not re-embedded
