""".ci/run runs exactly README's test command (the line after its ``README test command`` marker), and both
README commands run the suite on pytest-xdist's workers with the options tests/_harness is built for."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    """The fenced blocks of README.md that run pytest."""
    blocks: list[list[str]] = []
    inside = False
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith("```"):
            inside = not inside
            if inside:
                blocks.append([])
        elif inside:
            blocks[-1].append(line)
    return [text for text in ("\n".join(b).strip() for b in blocks) if "-m pytest" in text]


def test_ci_runs_exactly_readme_s_test_command() -> None:
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    marker = next(i for i, line in enumerate(lines) if "README test command" in line)
    ci_command = lines[marker + 1].strip()
    full = [c for c in _readme_commands() if "pip install" in c]
    assert full == [ci_command], (full, ci_command)


def test_readme_s_test_commands_run_on_two_workers_with_groups_kept_together() -> None:
    commands = _readme_commands()
    assert len(commands) == 2, commands  # the full suite and the fast loop
    for command in commands:
        assert " -n 2 --dist loadgroup" in command, command
