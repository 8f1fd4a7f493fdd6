"""Attempt states and transitions: the diagram is the law; terminal states never change."""

from __future__ import annotations

import pytest

from openfunctions.work._errors import InvalidTransition
from openfunctions.work._state import STATES, TERMINAL, TRANSITIONS, Attempt, check_transition


def _attempt(state: str = "started") -> Attempt:
    return Attempt(
        attempt_id="att_x", number=1, principal="p", preview_id="prv_x", plan=[], plan_digest="d", catalog_digest="c", state=state
    )


def test_every_state_has_a_transition_row_and_terminals_have_none():
    assert set(TRANSITIONS) == set(STATES)
    for t in TERMINAL:
        assert TRANSITIONS[t] == frozenset()
    for src, targets in TRANSITIONS.items():
        assert targets <= set(STATES), src


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
@pytest.mark.parametrize("target", STATES)
def test_terminal_states_never_change(terminal, target):
    with pytest.raises(InvalidTransition, match="terminal states never change"):
        check_transition("att_x", terminal, target)


def test_happy_path_and_recorded_history():
    a = _attempt()
    for s in ("running", "verifying", "verified", "completed"):
        a.transition(s, at="t")
    assert a.state == "completed" and a.terminal
    assert [h["to"] for h in a.history] == ["running", "verifying", "verified", "completed"]


def test_blocked_carries_its_reason_and_leaves_only_by_reconcile_or_cancel():
    a = _attempt("running")
    a.transition("blocked", at="t", reason={"code": "effect_uncertain"})
    assert a.blocked_reason == {"code": "effect_uncertain"}
    for bad in ("verifying", "verified", "completed"):
        with pytest.raises(InvalidTransition):
            check_transition(a.attempt_id, "blocked", bad)
    a.transition("running", at="t2")
    assert a.blocked_reason is None


def test_completion_needs_verified():
    for src in ("started", "running", "verifying", "blocked", "previewed"):
        with pytest.raises(InvalidTransition, match="cannot move"):
            check_transition("att_x", src, "completed")
    check_transition("att_x", "verified", "completed")


def test_started_builds_the_attempt_from_its_record_data():
    data = {"attempt_id": "att_x", "number": 3, "principal": "p", "preview_id": "prv_x", "plan": [{"step": "s", "params": {}}],
            "plan_digest": "d", "catalog_digest": "c", "lease_generation": 7}
    a = Attempt.started(data, at="t0")
    assert (a.attempt_id, a.number, a.principal, a.preview_id, a.plan_digest, a.catalog_digest) == ("att_x", 3, "p", "prv_x", "d", "c")
    assert a.state == "started" and a.created_at == a.updated_at == "t0"
    assert a.history == [{"from": "previewed", "to": "started", "at": "t0"}]
