import pytest

from openfunctions.core import (
    AllowAllPolicy,
    ConfigurationError,
    PolicyDecision,
    ScopePolicy,
    ToolExecutionContext,
    ToolRegistry,
    define_tool,
)

ran = []


async def _handler(params, ctx):
    ran.append(params)
    return {}


def needs_admin(**kw):
    return define_tool(
        name="admin_op", description="", handler=_handler,
        capability={"effect": "write", "required_scopes": ["admin"]},
        # Discovery hints that claim harmlessness confer no authority.
        annotations={"read_only_hint": True, "destructive_hint": False}, **kw,
    )


@pytest.fixture(autouse=True)
def _clear():
    ran.clear()


@pytest.mark.anyio
async def test_local_mode_refuses_authority_without_a_policy():
    d = await ToolRegistry([needs_admin()]).execute_detailed("admin_op", {}, ToolExecutionContext(scopes=frozenset({"admin"})))
    assert (d.receipt.outcome, d.receipt.certainty, d.error.code) == ("rejected", "known", "policy_denied")
    assert "requires authority" in d.error.message
    assert ran == []


@pytest.mark.anyio
async def test_tools_without_required_authority_run_in_local_mode():
    t = define_tool(name="plain", description="", handler=_handler)
    d = await ToolRegistry([t]).execute_detailed("plain", {})
    assert d.receipt.outcome == "succeeded" and d.receipt.policy is None


def test_governed_mode_requires_a_policy():
    with pytest.raises(ConfigurationError, match="governed mode"):
        ToolRegistry(mode="governed")
    assert ToolRegistry(mode="governed", policy=ScopePolicy()).executor.mode == "governed"


@pytest.mark.anyio
async def test_scope_policy_uses_the_trusted_context_not_arguments():
    reg = ToolRegistry([needs_admin()], mode="governed", policy=ScopePolicy())
    # The arguments claim admin; the context does not.
    d = await reg.execute_detailed("admin_op", {"scopes": ["admin"], "principal": "root"}, ToolExecutionContext(principal="eve"))
    assert d.error.code == "policy_denied"
    assert "eve lacks scope(s) admin" in d.error.message
    assert d.receipt.policy.model_dump() == {"policy": "scopes", "allowed": False, "reason": d.error.message}
    assert ran == []
    d = await reg.execute_detailed("admin_op", {}, ToolExecutionContext(principal="ann", scopes=frozenset({"admin"})))
    assert d.receipt.outcome == "succeeded"
    assert d.receipt.policy.allowed is True and d.receipt.principal == "ann"


@pytest.mark.anyio
async def test_a_policy_that_does_not_validate_the_binding_cannot_authorize():
    d = await ToolRegistry([needs_admin()], policy=AllowAllPolicy()).execute_detailed("admin_op", {})
    assert d.error.code == "policy_denied" and "did not validate the binding" in d.error.message


@pytest.mark.anyio
async def test_custom_policy_sees_params_and_context():
    class OnlyGet:
        name = "only-get"

        async def decide(self, tool, params, ctx):
            if params.get("method") != "GET":
                return PolicyDecision(False, self.name, f"{ctx.principal} may only GET")
            return PolicyDecision(True, self.name)

    t = define_tool(name="http", description="", handler=_handler)
    reg = ToolRegistry([t], mode="governed", policy=OnlyGet())
    assert (await reg.execute_detailed("http", {"method": "GET"})).receipt.outcome == "succeeded"
    d = await reg.execute_detailed("http", {"method": "POST"}, ToolExecutionContext(principal="bot"))
    assert d.error.message == "bot may only GET"
