"""How a run served as a tool waits: holding no place in the registry's scheduler.

An agent, a crew or a workflow served as a tool is an *orchestrator*: its own
handler only waits (for a model, a sampling host, its steps) and appends to
its own run journal; every effect happens inside a tool call it makes. So:

- the executor admits the orchestrator's call like any call (FIFO; an
  unclassified one takes the write barrier for that instant), and
  :func:`begin_run`, called first thing in its handler, gives that
  reservation back;
- each tool call the run then makes is admitted on its own by the same
  scheduler (a write still runs alone, reads still share the pool), its
  receipt linked to the run's through ``parent_receipt_id``, its authority
  narrowed to the run's scopes: :func:`child_context` builds its context.

Nothing is held while the run waits, so a model (or a client that never
answers a sampling request) cannot stall anyone else's write, and a child
never queues behind a reservation its own run holds (there is none).

Ownership. A child execution (``with_child_execution``) runs inside its
parent's reservation; that reservation is the parent's to release, never the
child's. :func:`begin_run` therefore releases only a reservation the call was
granted for itself: a top-level call (no parent), or a call made through
:func:`child_context` of a run that gave its own back (marked in the trusted
context's ``admitted_for`` slot with the parent's receipt id). Any other
call (a step of a workflow that holds its barrier) keeps running inside its
parent's reservation, as before.

Reads stay reads. A run admitted as a read (a read-only agent, a workflow tool
declared a parallel-safe read) can still run only reads: an inner call of a
tool that is not a reviewed parallel-safe read is refused by the executor with
a receipt (``admission_refused``), exactly as a read reservation refuses a
write child.

``hold=True`` keeps the older behaviour: the run keeps its reservation for
its whole length and its calls inherit it (``with_child_execution``), e.g. a
workflow whose read-then-write steps must run as one unit.
"""

from __future__ import annotations

from openfunctions.core import Reservation, Scheduler, ToolDefinition, ToolExecutionContext, with_child_execution

#: Deprecated (no longer written or read): a call admitted on its own as a run's inner call is marked
#: in ``ctx.admitted_for`` (the run's receipt id); a run that gave back a read reservation in ``ctx.run_reads_only``.
OWN_ADMISSION_KEY = "openfunctions.admitted_for"
# A read reservation granted by no scheduler: handed only to a read-only run's call of a tool that is
# not a read, so that the executor refuses it (AdmissionRefused, with a receipt) before anything runs.
_REFUSE_WRITES = Reservation(Scheduler(1), "shared")


def begin_run(ctx: ToolExecutionContext, *, hold: bool = False) -> ToolExecutionContext:
    """Give back the running call's own scheduler reservation; return the context its inner calls derive from.

    Idempotent (a context without a reservation comes back unchanged); ``hold=True``: nothing is released.
    """
    r = ctx.reservation
    if hold or r is None or ctx.receipt_id is None:
        return ctx
    owned = ctx.parent_receipt_id is None or ctx.admitted_for == ctx.parent_receipt_id
    if not owned:  # inherited from a parent that holds it: the parent's to release
        return ctx
    reads_only = r.mode == "shared"
    r.release()  # idempotent: the executor's own release after the receipt is then a no-op
    return ctx.replace(reservation=None, admitted_for=None, run_reads_only=reads_only or ctx.run_reads_only)


def child_context(ctx: ToolExecutionContext, tool: ToolDefinition, *,
                  scopes: frozenset[str] | set[str] | None = None) -> ToolExecutionContext:
    """The context for one call of ``tool`` made by the run whose context is ``ctx`` (see the module doc).

    Authority is narrowed to ``scopes`` (the intersection with the run's; never wider).
    """
    narrowed = ctx.scopes if scopes is None else ctx.scopes & frozenset(scopes)
    if ctx.receipt_id is None:  # not inside a running call: nothing to link to or inherit
        return ctx.replace(scopes=narrowed)
    if ctx.reservation is not None:  # the run holds (or inherited) a reservation: its calls run inside it
        return with_child_execution(ctx, scopes=scopes)
    reads_only = ctx.run_reads_only
    child = ctx.replace(scopes=narrowed, parent_receipt_id=ctx.receipt_id, receipt_id=None,
                        admitted_for=ctx.receipt_id, run_reads_only=False)
    if reads_only and tool.schedule_class != "shared":
        child = child.replace(reservation=_REFUSE_WRITES)
    return child


__all__ = ["OWN_ADMISSION_KEY", "begin_run", "child_context"]
