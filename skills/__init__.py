"""openfunctions.skills: markdown instruction files an agent loads on demand.

- :func:`load_skills` — from directories and the ``openfunctions.skills``
  entry-point group; problems are collected, never fatal;
- :func:`skill_tools` (``skill_list``, ``skill_load``), :func:`install_skill_prompts`
  (each skill an MCP prompt), :func:`skills_prompt` (a system-prompt block);
- :func:`split_frontmatter` — the ``---`` block parser skills and vault notes share.

``openfunctions-mcp skills list|show`` (skills/cli.py). See docs/EXTENDING.md.
"""

from ._frontmatter import FrontmatterError, split_frontmatter
from ._skills import (
    MAX_SKILL_BYTES,
    SKILLS_GROUP,
    Skill,
    SkillError,
    SkillProblem,
    SkillSet,
    install_skill_prompts,
    load_skills,
    parse_skill,
    skill_tools,
    skills_prompt,
)

__all__ = [
    "MAX_SKILL_BYTES", "SKILLS_GROUP", "FrontmatterError", "Skill", "SkillError", "SkillProblem", "SkillSet",
    "install_skill_prompts", "load_skills", "parse_skill", "skill_tools", "skills_prompt", "split_frontmatter",
]
