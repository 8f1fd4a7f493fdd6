import pytest

from openfunctions.core import (
    DuplicateTool,
    MemoryJournalSink,
    ToolDefinitionError,
    ToolNotFound,
    ToolRegistry,
    define_tool,
)


async def _h(params, ctx):
    return {}


def t(name, tags=()):
    return define_tool(name=name, description=f"{name} tool", handler=_h, tags=tags)


def test_register_get_list_and_duplicates():
    reg = ToolRegistry([t("alpha"), t("beta")])
    assert [x.name for x in reg.list()] == ["alpha", "beta"]
    assert reg.get("alpha").name == "alpha" and "beta" in reg and len(reg) == 2
    with pytest.raises(DuplicateTool, match="'alpha' is already registered"):
        reg.register(t("alpha"))
    with pytest.raises(ToolDefinitionError):
        reg.register("not a tool")


@pytest.mark.parametrize("bad", ["alphx", "../../etc/passwd", "x" * 10_000, "\x00", 42, None])
def test_unknown_tool_names_it_and_suggests(bad):
    reg = ToolRegistry([t("alpha"), t("alphabet")])
    with pytest.raises(ToolNotFound) as ei:
        reg.get(bad)
    assert ei.value.code == "tool_not_found"
    assert len(ei.value.message) < 400
    if bad == "alphx":
        assert "did you mean 'alpha'" in ei.value.message
        assert ei.value.details["candidates"][0] == "alpha"


@pytest.mark.anyio
async def test_projection_filters_and_shares_services():
    sink = MemoryJournalSink()
    reg = ToolRegistry([t("a", ["x"]), t("b", ["y"]), t("c", ["x", "y"])], sink=sink)
    by_tag = reg.project(tags=["x"])
    assert [x.name for x in by_tag.list()] == ["a", "c"]
    by_name = reg.project(names=["b", "c"]).project(tags=["x"])
    assert [x.name for x in by_name.list()] == ["c"]
    assert by_name.executor is reg.executor
    with pytest.raises(ToolNotFound):
        by_tag.get("b")
    with pytest.raises(ToolDefinitionError, match="read-only view"):
        by_tag.register(t("d"))
    await by_tag.execute("a", {})
    assert [r.tool for r in sink.receipts] == ["a"]  # the projection journals through the same sink
    # tools registered later appear in existing views
    reg.register(t("e", ["x"]))
    assert "e" in by_tag
