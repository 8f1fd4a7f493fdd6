"""Workflows for the crash tests, loaded by a child process and by ``workflows resume --module``.

The tools leave evidence in ``$WF_TEST_DIR``: ``charges.txt`` gets a line per
``charge`` call (a write), ``reads.txt`` a line per ``slow_read`` call, ``prices.txt`` a line per
``set_price`` call (an idempotent write). With
``$WF_TEST_SLEEP`` set, each sleeps that long after writing its line, so a
test can SIGKILL the process inside the step.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio

from openfunctions.core import ToolRegistry, define_tool
from openfunctions.workflows import pipe, tool_step, transform


def _evidence(name: str, text: str) -> None:
    with open(Path(os.environ["WF_TEST_DIR"]) / name, "a") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())


async def _pause(tool: str) -> None:
    if os.environ.get("WF_TEST_SLEEP_IN") == tool:
        await anyio.sleep(float(os.environ.get("WF_TEST_SLEEP", "0")))


async def charge(params, ctx):
    _evidence("charges.txt", f"charge {params['amount']} pid {os.getpid()}")
    await _pause("charge")
    return {"charged": params["amount"]}


async def slow_read(params, ctx):
    _evidence("reads.txt", f"read pid {os.getpid()}")
    await _pause("slow_read")
    return {"balance": 100 - params["charged"]}


async def set_price(params, ctx):
    _evidence("prices.txt", f"price {params['price']} pid {os.getpid()}")
    await _pause("set_price")
    return {"price": params["price"]}


registry = ToolRegistry([
    define_tool(name="charge", description="charge an amount (a write)", handler=charge, capability={"effect": "external"},
                input_schema={"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}),
    define_tool(name="slow_read", description="read the balance", handler=slow_read, capability={"effect": "read"}),
    # setting a price to a value twice leaves the same price: declared idempotent, so an uncertain call is re-run
    define_tool(name="set_price", description="set the price (idempotent)", handler=set_price,
                capability={"effect": "write", "idempotent": True},
                input_schema={"type": "object", "properties": {"price": {"type": "integer"}}, "required": ["price"]}),
])

checkout = pipe(
    transform(lambda order: {"amount": order["amount"]}, name="amount"),
    tool_step("charge"),
    tool_step("slow_read"),
    transform(lambda r: {"ok": True, **r}, name="receipt"),
    name="checkout",
    registry=registry,
)

reprice = pipe(tool_step("set_price"), name="reprice", registry=registry)

workflows = [checkout, reprice]

# What `openfunctions-mcp serve --module tests.workflows._app:served --no-example-tools` serves: the step
# tools and the workflow as a tool, in one registry, so the server's journal records the workflow's call
# and its steps' calls alike (the steps are child executions of the workflow's call).
served = ToolRegistry([registry.get("charge"), registry.get("slow_read")])
served.register(checkout.bind(registry=served).as_tool(
    "checkout", {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]},
    description="charge an order and report the balance", registry=served,
    output_schema={"type": "object", "properties": {"ok": {"type": "boolean"}, "balance": {"type": "integer"}},
                   "required": ["ok", "balance"]},
))


def durable() -> ToolRegistry:
    """What `openfunctions-mcp serve --module tests.workflows._app:durable` serves (example tools on): the
    step tools and the checkout workflow as a *durable* tool whose runs live in ``$WF_TEST_DATA`` (the
    server's data dir); the server starts the runs, so interrupted ones resume when it starts."""
    from openfunctions.workflows import WorkflowRuns

    url = os.environ.get("WF_TEST_DATABASE")  # the runs in PostgreSQL instead (tests/store/test_pg_workflows.py)
    runs = (WorkflowRuns(database=url, space=os.environ["WF_TEST_SPACE"]) if url
            else WorkflowRuns(os.environ["WF_TEST_DATA"]))
    reg = ToolRegistry([registry.get("charge"), registry.get("slow_read")])
    reg.register(checkout.bind(registry=reg).as_tool(
        "checkout", {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]},
        description="charge an order and report the balance (a durable run)", registry=reg, runs=runs,
    ))
    return reg


def hosted() -> ToolRegistry:
    """What `openfunctions-mcp serve --module tests.workflows._app:hosted [--database URL]` serves: the checkout
    workflow as a durable tool whose runs (``WorkflowRuns(space=...)``, no location) the server places itself:
    ``serve --database``'s PostgreSQL (space ``$WF_TEST_SPACE``), else its ``--data-dir``."""
    from openfunctions.workflows import WorkflowRuns

    runs = WorkflowRuns(space=os.environ.get("WF_TEST_SPACE", "default"))
    reg = ToolRegistry([registry.get("charge"), registry.get("slow_read")])
    reg.register(checkout.bind(registry=reg).as_tool(
        "checkout", {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]},
        description="charge an order and report the balance (a durable run, placed by the server)", registry=reg,
        runs=runs,
    ))
    return reg
