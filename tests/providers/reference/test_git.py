"""The git provider over a real repository: files, read, grep, log, blame, and what it refuses."""

from __future__ import annotations

import pytest

from openfunctions.core import ToolError
from openfunctions.providers import ProviderUnavailable, check_provider_health, context_prompt
from openfunctions.providers.reference import GitProvider
from openfunctions.providers.reference._git import run_git
from tests._harness import alive, kill_pid, wait_for

from .conftest import call, connected, git

pytestmark = pytest.mark.anyio


@pytest.fixture
async def repo(repo_dir):
    return await connected(GitProvider(repo_dir))


async def test_files_respect_gitignore(repo):
    registry, _ = repo
    out = await registry.execute("git_files", {})
    assert sorted(out["files"]) == [".gitignore", "README.md", "escape.txt", "src/engine.py"]
    sub = await registry.execute("git_files", {"path": "src"})
    assert sub["files"] == ["src/engine.py"]


async def test_read_worktree_and_revision(repo):
    registry, _ = repo
    now = await registry.execute("git_read", {"path": "src/engine.py", "start_line": 2, "end_line": 2})
    assert now["content"] == "    # Newton's second law"
    old = await registry.execute("git_read", {"path": "src/engine.py", "rev": "HEAD~1"})
    assert "Newton" not in old["content"] and old["lines"] == 2


async def test_grep_log_blame(repo):
    registry, _ = repo
    hits = await registry.execute("git_grep", {"pattern": "thrust", "ignore_case": True})
    assert {(m["path"], m["line"]) for m in hits["matches"]} == {("README.md", 3), ("src/engine.py", 1)}
    none = await registry.execute("git_grep", {"pattern": "no such text anywhere"})
    assert none["count"] == 0
    log = await registry.execute("git_log", {})
    assert [c["subject"] for c in log["commits"]] == ["explain thrust", "first: engine"]
    only_readme = await registry.execute("git_log", {"path": "README.md"})
    assert [c["subject"] for c in only_readme["commits"]] == ["first: engine"]
    blame = await registry.execute("git_blame", {"path": "src/engine.py"})
    assert [(b["line"], b["summary"]) for b in blame["lines"]] == [
        (1, "first: engine"), (2, "explain thrust"), (3, "first: engine")]
    assert blame["lines"][1]["author"] == "Ada"


@pytest.mark.parametrize("tool, params, code", [
    ("git_read", {"path": "../outside.txt"}, "reference_path_outside_root"),
    ("git_read", {"path": "escape.txt"}, "reference_path_outside_root"),  # symlink out of the repo
    ("git_read", {"path": "src/engine.py", "rev": "--output=/tmp/x"}, "git_revision_invalid"),
    ("git_log", {"rev": "HEAD..main"}, "git_revision_invalid"),
    ("git_blame", {"path": "/etc/passwd"}, "reference_path_outside_root"),
    ("git_grep", {"pattern": "x", "path": "../"}, "reference_path_outside_root"),
    ("git_read", {"path": ".git/config"}, "reference_path_invalid"),  # may hold credentials
    ("git_read", {"path": "gitconfig"}, "reference_path_invalid"),  # a symlink to it
    ("git_files", {"path": ".git"}, "reference_path_invalid"),
])
async def test_refusals(repo, repo_dir, tool, params, code):
    (repo_dir / "gitconfig").symlink_to(repo_dir / ".git" / "config")
    registry, _ = repo
    result = await call(registry, tool, params)
    assert isinstance(result.error, ToolError) and result.error.code == code
    assert result.receipt.outcome == "rejected"


async def test_pattern_cannot_become_an_option(repo):
    registry, _ = repo
    out = await registry.execute("git_grep", {"pattern": "--open-files-in-pager=touch /tmp/pwned"})
    assert out["count"] == 0


async def test_repository_config_cannot_run_programs(repo_dir, tmp_path):
    marker = tmp_path / "ran"
    git(repo_dir, "config", "core.fsmonitor", f"touch {marker}; false")
    git(repo_dir, "config", "core.pager", f"touch {marker}; cat")
    registry, _ = await connected(GitProvider(repo_dir))
    await registry.execute("git_files", {})
    await registry.execute("git_log", {})
    assert not marker.exists()


def test_output_bound_and_timeout(repo_dir, tmp_path):
    out, cut = run_git(str(repo_dir), ["log", "--format=%H"], max_bytes=10)
    assert cut and len(out) == 10
    # What git starts is stopped with it: here the alias's shell, turned into a sleep (on /dev/null, so a
    # git killed alone ends the call at once and would leave the sleep running). A sleep that held git's
    # stdout would also keep a git-only kill's call waiting until it ended.
    pid_file = tmp_path / "sleep.pid"
    with pytest.raises(ToolError) as info:
        run_git(str(repo_dir), ["-c", f"alias.slow=!echo $$ > {pid_file}; exec sleep 300 > /dev/null", "slow"],
                timeout=0.5)
    assert info.value.code == "git_timeout"
    sleeper = int(wait_for(pid_file.read_text, what="the alias's sleep pid"))
    try:
        wait_for(lambda: not alive(sleeper), what="the alias's sleep to be killed with git")
    finally:
        kill_pid(sleeper)


async def test_context_health_and_not_a_repo(repo, tmp_path):
    _, conn = repo
    block = await context_prompt([conn])
    assert "on branch main" in block and "explain thrust" in block
    [health] = await check_provider_health([conn])
    assert health.ok and len(health.details["head"]) == 40
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ProviderUnavailable, match="not a git repository"):
        await connected(GitProvider(plain))
