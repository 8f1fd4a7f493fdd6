"""Fixture data for the reference providers: a small vault, a git repository, calendars, task files."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from openfunctions.core import ToolRegistry
from openfunctions.providers import connect_provider


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), "utf-8")
    return path


@pytest.fixture
def vault_dir(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    write(root, "People/Ada Lovelace.md", """
        ---
        type: person
        aliases: [Ada]
        role: analyst
        ---
        Works on [[Apollo]]. #team/core
        """)
    write(root, "Projects/Apollo.md", """
        ---
        type: project
        status: active
        tags: [project, space]
        people:
          - "[[Ada Lovelace]]"
          - Grace Hopper
        ---
        # Apollo
        The engine notes live in [[Engine#Thrust|the engine page]].
        """)
    write(root, "Engine.md", """
        ---
        title: Engine design
        tags: space
        project: "[[Apollo]]"
        ---
        Thrust figures. Ask [[Ada]] about the analytical part.
        ```
        #not-a-tag inside code
        ```
        """)
    write(root, "Daily/2025-03-01.md", """
        Met [[Ada Lovelace]] and [[Nobody Yet]] today. #meeting
        """)
    write(root, "Broken.md", """
        ---
        title: [unclosed
        ---
        body text mentioning apollo
        """)
    write(root, ".obsidian/workspace.md", "hidden [[Apollo]]\n")
    (tmp_path / "secret.md").write_text("top secret [[Apollo]]\n")
    os.symlink(tmp_path / "secret.md", root / "Leak.md")
    os.symlink(tmp_path, root / "Outside")
    return root


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.org",
           "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.org",
           "GIT_AUTHOR_DATE": "2025-03-01T10:00:00+00:00", "GIT_COMMITTER_DATE": "2025-03-01T10:00:00+00:00",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root, "src/engine.py", """
        def thrust(mass, accel):
            return mass * accel
        """)
    write(root, "README.md", "# Rocket\n\nComputes thrust.\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first: engine")
    write(root, "src/engine.py", """
        def thrust(mass, accel):
            # Newton's second law
            return mass * accel
        """)
    git(root, "commit", "-q", "-am", "explain thrust")
    write(root, ".gitignore", "build/\n")
    write(root, "build/out.txt", "ignored\n")
    (tmp_path / "outside.txt").write_text("outside the repository\n")
    os.symlink(tmp_path / "outside.txt", root / "escape.txt")
    return root


@pytest.fixture
def calendar_dir(tmp_path: Path) -> Path:
    root = tmp_path / "cal"
    write(root, "work.ics", """
        BEGIN:VCALENDAR
        VERSION:2.0
        BEGIN:VEVENT
        UID:standup@example
        SUMMARY:Standup
        DTSTART;TZID=Europe/Berlin:20250303T090000
        DTEND;TZID=Europe/Berlin:20250303T091500
        RRULE:FREQ=WEEKLY;BYDAY=MO,WE,FR;COUNT=6
        EXDATE;TZID=Europe/Berlin:20250305T090000
        ATTENDEE;CN=Ada Lovelace:mailto:ada@example.org
        END:VEVENT
        BEGIN:VEVENT
        UID:standup@example
        RECURRENCE-ID;TZID=Europe/Berlin:20250307T090000
        SUMMARY:Standup (moved)
        DTSTART;TZID=Europe/Berlin:20250307T110000
        DTEND;TZID=Europe/Berlin:20250307T111500
        END:VEVENT
        BEGIN:VEVENT
        UID:review@example
        SUMMARY:Design review\\, Apollo
        LOCATION:Room 1
        DESCRIPTION:Bring the engine\\nfigures
        DTSTART:20250304T140000Z
        DURATION:PT1H30M
        BEGIN:VALARM
        TRIGGER:-PT15M
        SUMMARY:not the event's summary
        END:VALARM
        END:VEVENT
        BEGIN:VEVENT
        UID:nth@example
        SUMMARY:First Monday
        DTSTART:20250303T080000Z
        RRULE:FREQ=MONTHLY;BYDAY=1MO
        END:VEVENT
        BEGIN:VEVENT
        UID:bad@example
        SUMMARY:No start
        END:VEVENT
        END:VCALENDAR
        """)
    write(root, "home.ics", """
        BEGIN:VCALENDAR
        BEGIN:VEVENT
        UID:holiday@example
        SUMMARY:Holiday
        DTSTART;VALUE=DATE:20250306
        DTEND;VALUE=DATE:20250308
        END:VEVENT
        BEGIN:VEVENT
        UID:gym@example
        SUMMARY:Gym
        DTSTART:20250302T180000
        DTEND:20250302T190000
        RRULE:FREQ=DAILY;INTERVAL=2;UNTIL=20250310
        END:VEVENT
        END:VCALENDAR
        """)
    return root


@pytest.fixture
def tasks_dir(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    write(root, "todo.txt", """
        (A) 2025-03-01 Call the engine supplier +apollo @phone due:2025-03-05
        x 2025-03-02 2025-03-01 Book the test stand +apollo
        Water the plants @home
        """)
    write(root, "notes/week.md", """
        # Apollo
        - [ ] Draft the thrust report +apollo due:2025-03-04
        - [x] Send the agenda
        # Home
          * [ ] Fix the bike
        Not a task: [ ] no bullet
        """)
    return root


async def connected(provider):
    registry = ToolRegistry()
    conn = await connect_provider(provider, registry)
    return registry, conn


async def call(registry: ToolRegistry, name: str, params: dict):
    """Run through the executor; the detailed result (receipt included)."""
    return await registry.execute_detailed(name, params)
