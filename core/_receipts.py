"""Execution receipts: the canonical record of what one call did.

Receipt format, version 1 (written once, here; docs/formats/receipt.md
explains outcome/certainty and what is durable when, and points here for
the fields). Canonical JSON (``canonical.py``: UTF-8, keys sorted, no
whitespace, finite numbers only). Written by ``core/executor.py``, carried
in every MCP tool result under ``_meta["dev.openfunctions/receipt"]`` and
persisted by the execution journal before the result is delivered. Fields:

- ``v``: format version, ``1``.
- ``receipt_id``: opaque random id, ``rcpt_`` + 32 lowercase hex characters
  (128 bits); never derived from input.
- ``tool``: the tool name. ``spec_sha256``: ``sha256:<hex>`` of the tool's
  canonical spec (everything but the handler) at call time.
- ``params_sha256``: digest of the canonical params as received (before
  validation, so a rejected call still binds its input); null only when
  they had no JSON form.
- ``result_sha256``: digest of the canonical normalized result
  (``{"content", "structuredContent", "isError"}``) on success, else null.
- ``outcome``: ``succeeded | failed | rejected | cancelled | unknown``.
- ``certainty``: ``known | unknown`` — whether we know the effect's fate.
  Rejections before the handler starts, and a handler's own refusal before it
  did anything (``ToolError(refused=True)``, outcome ``rejected``), are
  ``known`` (nothing ran). Once a
  handler has been entered, a raise, an invalid output or a failed receipt
  persistence leaves it ``unknown``.
- ``handler_started``: whether the handler was entered (``false`` = a bound
  not-started receipt).
- ``started_at``, ``finished_at``: RFC 3339 UTC with microseconds and a
  ``Z`` suffix; ``duration_ms``: float, wall time of the whole pipeline.
- ``error``: ``{code, message}`` (``code`` the stable error code) or null.
  ``policy``: the decision ``{policy, allowed, reason}`` or null (no policy
  consulted).
- ``principal``: who called (from the trusted context), or null.
- ``parent_receipt_id``: the delegating call for a child execution
  (``with_child_execution``), or null.
- ``recovered``: ``true`` only for a receipt written by journal recovery for
  a call that started and never settled.

Invariant: the same params give the same ``params_sha256`` in any process.
"""

from __future__ import annotations

import math
from json.encoder import encode_basestring as _encode_str  # the escaper canonical_json's C encoder uses
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ._canonical import canonical_json

Outcome = Literal["succeeded", "failed", "rejected", "cancelled", "unknown"]
Certainty = Literal["known", "unknown"]

RECEIPT_VERSION = 1


class ReceiptError(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    code: str
    message: str


class PolicyRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    policy: str
    allowed: bool
    reason: str | None = None


class Receipt(BaseModel):
    # ``_json``: the memo of :meth:`canonical_json` (a slot, not a field or a pydantic private
    # attribute: equality, dumps, pickling and ``model_copy`` all ignore it, so a copy with an
    # update never inherits a stale text).
    __slots__ = ("_json",)
    model_config = ConfigDict(frozen=True, extra="forbid")

    v: int = RECEIPT_VERSION
    receipt_id: str
    tool: str
    spec_sha256: str | None
    params_sha256: str | None
    result_sha256: str | None = None
    outcome: Outcome
    certainty: Certainty
    handler_started: bool
    started_at: str
    finished_at: str
    duration_ms: float
    error: ReceiptError | None = None
    policy: PolicyRecord | None = None
    principal: str | None = None
    parent_receipt_id: str | None = None
    recovered: bool = False

    def to_dict(self) -> dict[str, Any]:
        """``model_dump(mode="json")``, built by hand (it runs twice per call, for the
        journal and for the reply, and pydantic's dump is ~6x the cost); a test pins
        the two as equal, key order included, for every field and nested model."""
        d = self.__dict__
        if not math.isfinite(d["duration_ms"]):
            return self.model_dump(mode="json")  # pydantic's json mode has its own rule for inf/nan
        out = {k: d[k] for k in _RECEIPT_FIELDS}
        if (error := out["error"]) is not None:
            out["error"] = {k: getattr(error, k) for k in _ERROR_FIELDS}
        if (policy := out["policy"]) is not None:
            out["policy"] = {k: getattr(policy, k) for k in _POLICY_FIELDS}
        return out

    def canonical_json(self) -> str:
        """The receipt's canonical JSON text (``canonical.py``), computed once per instance.

        The same text is the ``data`` of the journal's ``receipt`` record (the
        execution journal appends it pre-encoded) and may be spliced as is into
        a reply's ``_meta`` (``json.loads`` of it equals :meth:`to_dict`), so a
        served call encodes its receipt once. The instance is frozen, so the
        memo cannot go stale; ``model_copy(update=...)`` makes a new instance
        without it. Raises ``NonJsonValue`` only for a receipt built around
        validation with a non-JSON value (not cached then).
        """
        try:
            text: str | None = self._json  # type: ignore[attr-defined]  # the slot (not annotated: pydantic would own it)
        except AttributeError:  # a validated instance (fast_construct sets the slot: no exception on the hot path)
            text = None
        if text is None:
            text = _hand_canonical(self.__dict__)
            if text is None:  # a value of an unexpected type (a receipt built around validation)
                text = canonical_json(self.to_dict())
            object.__setattr__(self, "_json", text)
        return text


def _str_or_null(value: Any) -> str:
    return "null" if value is None else _encode_str(value)


def _bool(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    raise TypeError("not a bool")


def _hand_canonical(d: dict[str, Any]) -> str | None:
    """``canonical_json(receipt.to_dict())`` assembled by hand in sorted key order
    (~3x cheaper than the generic encoder; runs once per journaled call); a test pins
    the two as equal for every field shape. ``None`` if a value is not of its field's
    plain type (``str``, ``bool``, ``int`` ``v``, finite ``float`` duration): then the
    caller uses the generic encoder, which also names what has no JSON form."""
    v, ms = d["v"], d["duration_ms"]
    if type(v) is not int or type(ms) is not float or not math.isfinite(ms):
        return None
    try:
        error, policy = d["error"], d["policy"]
        if error is None:
            err = "null"
        else:
            e = error.__dict__
            err = f'{{"code":{_encode_str(e["code"])},"message":{_encode_str(e["message"])}}}'
        if policy is None:
            pol = "null"
        else:
            q = policy.__dict__
            pol = f'{{"allowed":{_bool(q["allowed"])},"policy":{_encode_str(q["policy"])},"reason":{_str_or_null(q["reason"])}}}'
        return (
            f'{{"certainty":{_encode_str(d["certainty"])},"duration_ms":{float.__repr__(ms)},"error":{err},'
            f'"finished_at":{_encode_str(d["finished_at"])},"handler_started":{_bool(d["handler_started"])},'
            f'"outcome":{_encode_str(d["outcome"])},"params_sha256":{_str_or_null(d["params_sha256"])},'
            f'"parent_receipt_id":{_str_or_null(d["parent_receipt_id"])},"policy":{pol},'
            f'"principal":{_str_or_null(d["principal"])},"receipt_id":{_encode_str(d["receipt_id"])},'
            f'"recovered":{_bool(d["recovered"])},"result_sha256":{_str_or_null(d["result_sha256"])},'
            f'"spec_sha256":{_str_or_null(d["spec_sha256"])},"started_at":{_encode_str(d["started_at"])},'
            f'"tool":{_encode_str(d["tool"])},"v":{int.__repr__(v)}}}'
        )
    except (TypeError, AttributeError, KeyError):
        return None


_RECEIPT_FIELDS = tuple(Receipt.model_fields)
_ERROR_FIELDS = tuple(ReceiptError.model_fields)
_POLICY_FIELDS = tuple(PolicyRecord.model_fields)

# _hand_canonical spells every field out; a field added to a model must be added there too, so a
# mismatch stops the import here rather than in a hypothesis test (or, worse, in a journal line).
_HAND_FIELDS = (
    ("certainty", "duration_ms", "error", "finished_at", "handler_started", "outcome", "params_sha256",
     "parent_receipt_id", "policy", "principal", "receipt_id", "recovered", "result_sha256", "spec_sha256",
     "started_at", "tool", "v"),
    ("code", "message"),
    ("allowed", "policy", "reason"),
)
if tuple(tuple(sorted(f)) for f in (_RECEIPT_FIELDS, _ERROR_FIELDS, _POLICY_FIELDS)) != _HAND_FIELDS:  # pragma: no cover
    raise ImportError("core/_receipts.py: a receipt model's fields changed; update _hand_canonical and _HAND_FIELDS")

_M = TypeVar("_M", bound=BaseModel)


def fast_construct(cls: type[_M], data: dict[str, Any]) -> _M:
    """Build a trusted model instance without validation, cheaper than ``model_construct``.

    Only for data the executor itself assembled with every field present;
    this is the executor's hot path (a receipt per call).
    """
    obj = cls.__new__(cls)
    object.__setattr__(obj, "__dict__", data)
    object.__setattr__(obj, "__pydantic_fields_set__", set(data))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    if cls is Receipt:
        object.__setattr__(obj, "_json", None)  # Receipt.canonical_json's memo, not computed yet
    return obj


class StartRecord(BaseModel):
    """What the executor persists before it enters a handler.

    ``read_only`` (not persisted: it is not part of the record's format) tells
    a durable sink that the tool's capability declares no effect
    (``effect: "read"``), so no start needs to be durable before its handler:
    there is no effect to have intended. Observers still see every start.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: int = RECEIPT_VERSION
    receipt_id: str
    tool: str
    spec_sha256: str
    params_sha256: str
    started_at: str
    principal: str | None = None
    parent_receipt_id: str | None = None
    read_only: bool = Field(default=False, exclude=True)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


__all__ = ["fast_construct", "Receipt", "ReceiptError", "PolicyRecord", "StartRecord", "Outcome", "Certainty", "RECEIPT_VERSION"]
