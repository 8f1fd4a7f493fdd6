"""The operator catalog: good and bad files, argv slots, close-match errors, digests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from openfunctions.work._catalog import Catalog
from openfunctions.work._errors import CatalogInvalid, PlanInvalid, UnknownStep

EXAMPLE = Path(__file__).resolve().parents[2] / "work" / "example_catalog.toml"

BASE = """
version = 1
workspace = "ws"

[steps.echo]
kind = "command"
description = "echo one word"
argv = ["echo", "--", "{word}"]
[steps.echo.params.word]
type = "string"
pattern = "[a-z;/ -]+"
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "ws").mkdir(exist_ok=True)
    p = tmp_path / "catalog.toml"
    p.write_text(text)
    return p


def test_example_catalog_loads(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "c.toml")
    cat = Catalog.load(tmp_path / "c.toml")
    assert cat.workspace == tmp_path.resolve()
    assert set(cat.steps) == {"test", "format", "write_src", "read_src", "snapshot"}
    test = cat.step("test")
    assert test.verifier and test.effect == "external" and test.tool_name == "of_step.test"
    assert test.expand_argv({}) == ["python", "-m", "pytest", "-q", "tests"]
    assert cat.step("write_src").reconcilable and cat.step("write_src").oracle_name == "of_oracle.write_src"
    assert cat.step("format").reconcilable and cat.step("format").readback is not None
    assert not cat.step("test").reconcilable and cat.step("test").oracle_name is None
    assert cat.step("snapshot").effect == "read"
    # the example's test-path pattern refuses traversal and options
    for bad in ("tests/../src", "--collect-only", "tests/-x", "/etc"):
        with pytest.raises(PlanInvalid):
            test.expand_argv({"target": bad})


def test_digest_is_stable_and_tracks_meaning(tmp_path: Path) -> None:
    p = write(tmp_path, BASE)
    d1 = Catalog.load(p).digest
    p.write_text("# a comment\n" + BASE)
    assert Catalog.load(p).digest == d1
    p.write_text(BASE.replace("echo one word", "echo a word"))
    assert Catalog.load(p).digest != d1
    assert d1.startswith("sha256:") and len(d1) == 71


def test_unknown_step_names_close_matches(tmp_path: Path) -> None:
    cat = Catalog.load(write(tmp_path, BASE))
    with pytest.raises(UnknownStep) as ei:
        cat.step("ecoh")
    assert "did you mean 'echo'" in str(ei.value)
    assert ei.value.details["candidates"] == ["echo"]
    assert ei.value.code == "unknown_step"


def test_slot_fills_one_whole_element_never_split(tmp_path: Path) -> None:
    step = Catalog.load(write(tmp_path, BASE)).step("echo")
    argv = step.expand_argv({"word": "x; rm -rf /"})
    assert argv == ["echo", "--", "x; rm -rf /"]  # one literal element: no shell, no split
    argv = step.expand_argv({"word": "--flag"})
    assert argv == ["echo", "--", "--flag"]


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({}, '"word" is a required property'),
        ({"word": 3}, 'is not of type "string"'),
        ({"word": "UPPER"}, "does not match"),
        ({"word": "ok", "extra": "x"}, "Additional properties"),
        ({"word": "a\nb"}, "does not match"),
    ],
)
def test_bad_params_are_refused_with_reason(tmp_path: Path, params: dict, fragment: str) -> None:
    step = Catalog.load(write(tmp_path, BASE)).step("echo")
    with pytest.raises(PlanInvalid) as ei:
        step.validate_params(params)
    assert fragment in str(ei.value)
    assert "'echo'" in str(ei.value)


def test_pattern_is_anchored(tmp_path: Path) -> None:
    text = BASE.replace('pattern = "[a-z;/ -]+"', 'pattern = "[a-z]+"')
    step = Catalog.load(write(tmp_path, text)).step("echo")
    assert step.expand_argv({"word": "abc"})[-1] == "abc"
    with pytest.raises(PlanInvalid):
        step.validate_params({"word": "abc; rm -rf /"})  # an unanchored search would accept this


def test_integer_slot_and_defaults(tmp_path: Path) -> None:
    text = BASE + """
[steps.sleep]
kind = "command"
description = "sleep"
argv = ["sleep", "{secs}"]
effect = "read"
[steps.sleep.params.secs]
type = "integer"
minimum = 0
maximum = 5
default = 1
"""
    step = Catalog.load(write(tmp_path, text)).step("sleep")
    assert step.expand_argv({}) == ["sleep", "1"]
    assert step.expand_argv({"secs": 3}) == ["sleep", "3"]
    with pytest.raises(PlanInvalid):
        step.validate_params({"secs": 9})
    with pytest.raises(PlanInvalid):
        step.validate_params({"secs": "3"})


def test_literal_braces_are_doubled(tmp_path: Path) -> None:
    text = BASE.replace('argv = ["echo", "--", "{word}"]', 'argv = ["echo", "{{}}", "{word}"]')
    step = Catalog.load(write(tmp_path, text)).step("echo")
    assert step.expand_argv({"word": "a"}) == ["echo", "{}", "a"]


BAD = [
    ("version = 2\nworkspace='ws'\n[steps.a]\nkind='read_file'\ndescription='d'\npaths=['a']", "version", None),
    ("version = 1\nworkspace='nope'\n[steps.a]\nkind='read_file'\ndescription='d'\npaths=['a']", "workspace", None),
    ("version = 1\nworkspace='ws'\n", "steps", None),
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='shell'\ndescription='d'", "kind", "a"),
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='read_file'\npaths=['a']", "description", "a"),
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='read_file'\ndescription='d'\npaths=['../x']", "paths", "a"),
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='read_file'\ndescription='d'\npaths=['/etc/**']", "paths", "a"),
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='read_file'\ndescription='d'\npaths=['a']\nargv=['x']", None, "a"),
    ("version = 1\nworkspace='ws'\n[steps.A]\nkind='read_file'\ndescription='d'\npaths=['a']", None, "A"),
    # slot used but not declared
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='command'\ndescription='d'\nargv=['echo','{x}']", "argv", "a"),
    # slot spliced into part of an element
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='command'\ndescription='d'\nargv=['echo','--x={x}']\n"
     "[steps.a.params.x]\ntype='string'\npattern='a'", "argv", "a"),
    # string slot without pattern or enum
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='command'\ndescription='d'\nargv=['echo','{x}']\n"
     "[steps.a.params.x]\ntype='string'", "params.x", "a"),
    # program as a slot
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='command'\ndescription='d'\nargv=['{x}']\n"
     "[steps.a.params.x]\ntype='string'\nenum=['ls']", "argv", "a"),
    # bad regex
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='command'\ndescription='d'\nargv=['echo','{x}']\n"
     "[steps.a.params.x]\ntype='string'\npattern='('", "params.x", "a"),
    # default violating its own declaration
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='command'\ndescription='d'\nargv=['echo','{x}']\n"
     "[steps.a.params.x]\ntype='string'\npattern='[a-z]+'\ndefault='A'", "params.x.default", "a"),
    # cwd escaping the workspace
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='command'\ndescription='d'\nargv=['ls']\ncwd='../'", "cwd", "a"),
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='command'\ndescription='d'\nargv=['ls']\ntimeout_s=0", "timeout_s", "a"),
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='command'\ndescription='d'\nargv=['ls']\nenv=['A B']", "env", "a"),
    ("version = 1\nworkspace='ws'\n[steps.a]\nkind='command'\ndescription='d'\nargv=['ls']\nwhen=2024-01-01", None, "a"),
]


@pytest.mark.parametrize("text, field, step", BAD)
def test_bad_catalogs_name_file_step_and_field(tmp_path: Path, text: str, field: str | None, step: str | None) -> None:
    p = write(tmp_path, text)
    with pytest.raises(CatalogInvalid) as ei:
        Catalog.load(p)
    msg = str(ei.value)
    assert str(p) in msg
    if field is not None:
        assert ei.value.details.get("field") == field, msg
    if step is not None:
        assert ei.value.details.get("step") == step, msg


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("version = = 1")
    with pytest.raises(CatalogInvalid, match="not valid TOML"):
        Catalog.load(p)
    with pytest.raises(CatalogInvalid, match="cannot be read"):
        Catalog.load(tmp_path / "missing.toml")


def test_cwd_symlink_out_of_workspace_refused(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "ws" / "link").symlink_to(tmp_path / "outside")
    p = tmp_path / "c.toml"
    p.write_text("version = 1\nworkspace='ws'\n[steps.a]\nkind='command'\ndescription='d'\nargv=['ls']\ncwd='link'")
    with pytest.raises(CatalogInvalid) as ei:
        Catalog.load(p)
    assert ei.value.details["field"] == "cwd"


def test_world_writable_catalog_refused(tmp_path: Path) -> None:
    p = write(tmp_path, BASE)
    p.chmod(0o666)
    with pytest.raises(CatalogInvalid, match="world-writable"):
        Catalog.load(p)
    p.chmod(0o644)
    Catalog.load(p)


@pytest.mark.parametrize(
    "pattern, yes, no",
    [
        ("src/**", ["src/a", "src/a/b/c.py"], ["src", "srcx/a", "a/src/b"]),
        ("**/*.py", ["a.py", "x/y/a.py"], ["a.pyc", "x/a.py/b"]),
        ("src/*.py", ["src/a.py"], ["src/x/a.py", "src/.py/x"]),
        ("a?c", ["abc"], ["ac", "a/c", "abbc"]),
        ("a+b.(x)", ["a+b.(x)"], ["aab.(x)", "a+bx(x)"]),
        ("docs/**/index.md", ["docs/index.md", "docs/a/b/index.md"], ["docs/a/index.mdx"]),
    ],
)
def test_glob_semantics(pattern: str, yes: list[str], no: list[str]) -> None:
    from openfunctions.work._paths import check_pattern, matches

    assert check_pattern(pattern) is None
    for p in yes:
        assert matches(p, pattern), (p, pattern)
    for p in no:
        assert not matches(p, pattern), (p, pattern)


@pytest.mark.parametrize("bad", ["", "/abs/**", "a/../b", "a//b", "a/", "./a", "a/**b", "C:/x"])
def test_bad_patterns(bad: str) -> None:
    from openfunctions.work._paths import check_pattern

    assert check_pattern(bad) is not None


H = "version = 1\nworkspace='ws'\n"
SLOT = "[steps.a]\nkind='command'\ndescription='d'\nargv=['echo','{x}']\n[steps.a.params.x]\ntype='string'\npattern='a'\n"
# Errors the pydantic models add or word the same way: each names file, step, field and the value.
MORE_BAD = [
    (H + "[steps.a]\nkind='command'\ndescription='d'\nargv=['ls']\nidempotent='yes'", "a", "idempotent", "got 'yes'"),
    (H + "[steps.a]\nkind='command'\ndescription='d'\nargv=['ls']\ntimeout_s=true", "a", "timeout_s", "got True"),
    (H + "[steps.a]\nkind='command'\ndescription='d'\nargv=[]", "a", "argv", "at least 1"),
    (H + "[steps.a]\nkind='command'\ndescription='d'\nargv=['ls']\nreadback={paths=['out/**'], extra=1}", "a", "readback", "unknown key 'extra'"),
    (H + "[steps.a]\nkind='command'\ndescription='d'\nargv=['ls']\nreadback={paths=['out/**'], changes_on_apply=1}",
     "a", "readback.changes_on_apply", "got 1"),
    (H + "[steps.a]\nkind='command'\ndescription='d'\nargv=['ls']\neffect='read'\nreadback={paths=['out/**']}", "a", "readback", "no effect"),
    (H + SLOT.replace("pattern='a'", "enum=[1,'a']"), "a", "params.x", "list of strings"),
    (H + SLOT.replace("pattern='a'", "pattern='a'\nmax_length=true"), "a", "params.x.max_length", "got True"),
    (H + SLOT.replace("pattern='a'", "pattern='a'\nbogus=1"), "a", "params.x", "unknown key 'bogus'"),
    (H + SLOT.replace("[steps.a.params.x]", "[steps.a.params.X]"), "a", "params", "parameter name 'X'"),
    (H + "[steps.a]\nkind='command'\ndescription='d'\nargv=['ls']\nenv_set={A=1}", "a", "env_set.A", "got 1"),
    (H + "[steps.a]\nkind='write_file'\ndescription='  '\npaths=['a']", "a", "description", "non-empty"),
    (H + "[steps.a]\nkind='write_file'\ndescription='d'\npaths=['a']\nmax_bytes=0", "a", "max_bytes", "got 0"),
    (H + "[steps.a]\nkind='tool'\ndescription='d'", "a", "tool", "is required"),
    (H + "steps = {a = 3}", "a", None, "must be a table"),
    ("version = 1\nworkspace='ws'\nextra=1\n[steps.a]\nkind='fingerprint'\ndescription='d'\npaths=['a']", None, None, "unknown top-level key 'extra'"),
    ("version = '1'\nworkspace='ws'\n[steps.a]\nkind='fingerprint'\ndescription='d'\npaths=['a']", None, "version", "got '1'"),
]


@pytest.mark.parametrize("text, step, field, words", MORE_BAD)
def test_more_bad_catalogs_name_file_step_field_and_value(tmp_path: Path, text: str, step: str | None, field: str | None, words: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(CatalogInvalid) as ei:
        Catalog.load(p)
    assert ei.value.details.get("file") == str(p) and ei.value.details.get("step") == step
    assert ei.value.details.get("field") == field and words in ei.value.message, ei.value.message
