"""The tasks provider over real files: list, add, complete (atomic writes), stale ids, confinement."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from openfunctions.core import ToolError
from openfunctions.providers import check_provider_health, context_prompt
from openfunctions.providers.reference import TasksProvider

from .conftest import call, connected

pytestmark = pytest.mark.anyio


@pytest.fixture
async def tasks(tasks_dir):
    return await connected(TasksProvider(tasks_dir, now=lambda: dt.datetime(2025, 3, 9, 12, 0)))


async def test_list_reads_markdown_and_todo_txt(tasks):
    registry, _ = tasks
    out = await registry.execute("tasks_list", {})
    assert [(t["text"], t.get("due")) for t in out["tasks"]] == [
        ("Draft the thrust report +apollo due:2025-03-04", "2025-03-04"),
        ("Call the engine supplier +apollo @phone due:2025-03-05", "2025-03-05"),
        ("Fix the bike", None),
        ("Water the plants @home", None),
    ]
    call_ = out["tasks"][1]
    assert call_["priority"] == "A" and call_["projects"] == ["apollo"] and call_["contexts"] == ["phone"]
    assert out["tasks"][2]["section"] == "Home"
    done = await registry.execute("tasks_list", {"status": "done"})
    assert sorted(t["text"] for t in done["tasks"]) == ["Book the test stand +apollo", "Send the agenda"]
    apollo = await registry.execute("tasks_list", {"project": "+apollo", "status": "all"})
    assert apollo["count"] == 4  # three +apollo tasks and "Send the agenda" under the Apollo heading
    due = await registry.execute("tasks_list", {"due_before": "2025-03-05"})
    assert [t["file"] for t in due["tasks"]] == ["notes/week.md"]


async def test_complete_markdown_and_todo_txt(tasks, tasks_dir):
    registry, _ = tasks
    open_ = {t["text"].split(" +")[0]: t for t in (await registry.execute("tasks_list", {}))["tasks"]}
    os.chmod(tasks_dir / "notes/week.md", 0o640)
    done = await call(registry, "tasks_complete", {"id": open_["Draft the thrust report"]["id"]})
    assert done.error is None and done.receipt.outcome == "succeeded"
    week = (tasks_dir / "notes/week.md").read_text()
    assert "- [x] Draft the thrust report +apollo due:2025-03-04\n" in week
    assert os.stat(tasks_dir / "notes/week.md").st_mode & 0o777 == 0o640  # the atomic write kept the mode
    await registry.execute("tasks_complete", {"id": open_["Call the engine supplier"]["id"]})
    todo = (tasks_dir / "todo.txt").read_text().splitlines()
    assert todo[0] == "x 2025-03-09 2025-03-01 Call the engine supplier +apollo @phone due:2025-03-05"
    again = await call(registry, "tasks_complete", {"id": open_["Call the engine supplier"]["id"]})
    assert again.error.code == "task_changed"  # the line now says something else


async def test_complete_finds_a_moved_line_and_refuses_an_edited_one(tasks, tasks_dir):
    registry, _ = tasks
    bike = next(t for t in (await registry.execute("tasks_list", {}))["tasks"] if t["text"] == "Fix the bike")
    path = tasks_dir / "notes/week.md"
    path.write_text("Intro line\n" + path.read_text())  # the task moved down a line
    out = await registry.execute("tasks_complete", {"id": bike["id"]})
    assert out["completed"]["line"] == bike["line"] + 1 and "  * [x] Fix the bike" in path.read_text()
    plants = next(t for t in (await registry.execute("tasks_list", {}))["tasks"] if "plants" in t["text"])
    todo = tasks_dir / "todo.txt"
    todo.write_text(todo.read_text().replace("Water the plants", "Water the cactus"))
    result = await call(registry, "tasks_complete", {"id": plants["id"]})
    assert result.error.code == "task_changed" and result.receipt.outcome == "rejected"
    assert "Water the cactus @home" in todo.read_text()  # untouched


async def test_add(tasks, tasks_dir):
    registry, _ = tasks
    out = await registry.execute("tasks_add", {"text": "Order  fuel", "project": "apollo", "due": "2025-03-20",
                                               "priority": "B"})
    assert (tasks_dir / "todo.txt").read_text().endswith("(B) 2025-03-09 Order fuel +apollo due:2025-03-20\n")
    assert out["added"]["priority"] == "B" and out["added"]["line"] == 4
    md = await registry.execute("tasks_add", {"text": "Pack", "file": "notes/trip.md"})
    assert (tasks_dir / "notes/trip.md").read_text() == "- [ ] Pack\n" and md["added"]["line"] == 1
    listed = await registry.execute("tasks_list", {"file": "notes/trip.md"})
    assert [t["id"] for t in listed["tasks"]] == [md["added"]["id"]]


@pytest.mark.parametrize("tool, params, code", [
    ("tasks_complete", {"id": "nonsense"}, "task_id_invalid"),
    ("tasks_complete", {"id": "../x.md:1:0123abcd"}, "reference_path_outside_root"),
    ("tasks_add", {"text": "x", "file": "../escape.md"}, "reference_path_outside_root"),
    ("tasks_add", {"text": "x", "file": "script.sh"}, "reference_path_invalid"),
    ("tasks_add", {"text": "x", "file": "link.md"}, "reference_path_invalid"),
    ("tasks_add", {"text": "x", "due": "soon"}, "task_due_invalid"),
    ("tasks_add", {"text": "x", "file": ".git/x.md"}, "reference_path_invalid"),
    ("tasks_add", {"text": "x", "file": "nofolder/x.md"}, "reference_not_found"),
])
async def test_refusals(tasks, tasks_dir, tool, params, code):
    os.symlink(tasks_dir / "notes/week.md", tasks_dir / "link.md")
    registry, _ = tasks
    before = {p: p.read_text() for p in tasks_dir.rglob("*") if p.is_file()}
    result = await call(registry, tool, params)
    assert isinstance(result.error, ToolError) and result.error.code == code
    assert {p: p.read_text() for p in tasks_dir.rglob("*") if p.is_file()} == before


async def test_an_edit_saved_meanwhile_is_not_overwritten(tasks, tasks_dir, monkeypatch):
    from openfunctions.providers.reference._tasks import TaskFiles

    registry, _ = tasks
    bike = next(t for t in (await registry.execute("tasks_list", {}))["tasks"] if t["text"] == "Fix the bike")
    path = tasks_dir / "notes/week.md"
    read = TaskFiles.read_for_update

    def read_then_an_editor_saves(real, rel):
        out = read(real, rel)
        with open(real, "a") as f:  # another program's save, between our read and our write
            f.write("- [ ] Added in the editor\n")
        return out

    monkeypatch.setattr(TaskFiles, "read_for_update", staticmethod(read_then_an_editor_saves))
    result = await call(registry, "tasks_complete", {"id": bike["id"]})
    assert result.error.code == "task_changed" and result.receipt.outcome == "rejected"
    text = path.read_text()
    assert "Added in the editor" in text and "* [ ] Fix the bike" in text


async def test_capabilities_context_health(tasks):
    registry, conn = tasks
    assert registry.get("tasks_list").schedule_class == "shared"
    assert registry.get("tasks_add").capability.effect == "write"
    assert registry.get("tasks_complete").schedule_class == "exclusive"
    block = await context_prompt([conn])
    assert block.splitlines()[:2] == ["Tasks: 4 open (tools tasks_list, tasks_add, tasks_complete).",
                                      "- Draft the thrust report +apollo due:2025-03-04 (due 2025-03-04)"]
    [health] = await check_provider_health([conn])
    assert health.ok and health.details == {"tasks": 6, "open": 4}
