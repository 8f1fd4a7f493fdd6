"""The flat-object shortcut of a dict result's display text equals the encoder's indented JSON (core/_result.py)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from openfunctions.core._result import _pretty_flat, normalize, pretty_json

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text())
flat = st.dictionaries(st.text(), scalars, max_size=8)


@given(flat)
def test_the_shortcut_equals_the_encoder_or_steps_aside(value: dict[str, Any]) -> None:
    text = _pretty_flat(value)
    if any(isinstance(v, float) and not math.isfinite(v) for v in value.values()):
        assert text is None  # the encoder refuses these, as before
    else:
        assert text == pretty_json(value)


@given(st.dictionaries(st.text(), st.one_of(scalars, st.lists(st.integers()), st.dictionaries(st.text(), st.integers())),
                       max_size=5))
def test_nested_values_take_the_encoder(value: dict[str, Any]) -> None:
    text = _pretty_flat(value)
    if any(isinstance(v, (list, dict)) for v in value.values()):
        assert text is None
    elif text is not None:
        assert text == pretty_json(value)


def test_subclasses_take_the_encoder() -> None:
    import enum

    class Color(enum.IntEnum):
        RED = 1

    assert _pretty_flat({"c": Color.RED}) is None
    assert normalize({"c": Color.RED}).content[0]["text"] == pretty_json({"c": Color.RED})


def test_a_dict_result_uses_it() -> None:
    value = {"algorithm": "sha256", "hex": "ab" * 32, "bytes": 5}
    result = normalize(value)
    assert result.content == [{"type": "text", "text": pretty_json(value)}] and result.structured is value
