"""The openfunctions-mcp command: parser, profiles, tool loading, the example config, the demo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from openfunctions.servers import cli
from openfunctions.servers._profiles import PROFILES, build_profile, load_module_tools
from openfunctions.servers.errors import ToolLoadError

from .conftest import REPO, serve_argv, server_env

CONFIG = REPO / "claude_desktop_config.example.json"
UVX_OPTIONS_WITH_VALUE = {"--from", "--with", "--with-editable", "--python", "-p"}


def openfunctions_args(entry: dict) -> list[str]:
    """The arguments after ``openfunctions-mcp`` in a config entry (uvx's own options skipped)."""
    assert entry["command"] == "uvx", entry
    args = list(entry["args"])
    i = 0
    while args[i].startswith("-"):
        i += 2 if args[i] in UVX_OPTIONS_WITH_VALUE else 1
    assert args[i] == "openfunctions-mcp", entry
    return args[i + 1:]


def test_example_config_entries_parse_with_the_cli_parser():
    config = json.loads(CONFIG.read_text())
    entries = config["mcpServers"]
    profiles_seen = set()
    for name, entry in entries.items():
        args = openfunctions_args(entry)
        parsed = cli.build_parser().parse_args(args or ["serve"])
        assert parsed.command == "serve", name
        assert parsed.transport == "stdio", name
        profiles_seen.add(parsed.profile)
    # one entry per profile a host would run (conformance is the MCP test suite's fixture server, not for hosts)
    assert profiles_seen == set(PROFILES) - {"conformance"}
    # Until the package is on the index, every entry names where it comes from: a checkout or a wheel of this version.
    from openfunctions.servers import __version__

    for name, entry in entries.items():
        source = entry["args"][entry["args"].index("--from") + 1]
        assert source == "/path/to/openfunctions-mcp" or source.endswith(f"openfunctions_mcp-{__version__}-py3-none-any.whl"), name


def test_no_arguments_means_serve_tools_over_stdio(monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "_cmd_serve", lambda args: seen.setdefault("args", args) and 0)
    assert cli.main([]) == 0
    args = seen["args"]
    assert (args.command, args.profile, args.transport, args.data_dir, args.no_journal) == ("serve", "tools", "stdio", None, False)


def test_default_data_dir_is_per_user(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENFUNCTIONS_MCP_DATA_DIR", raising=False)
    import platformdirs

    assert cli.default_data_dir() == __import__("pathlib").Path(platformdirs.user_data_dir("openfunctions-mcp", appauthor=False))
    monkeypatch.setenv("OPENFUNCTIONS_MCP_DATA_DIR", str(tmp_path))
    assert cli.default_data_dir() == tmp_path


def test_help_and_version_explain_the_command(capsys):
    with pytest.raises(SystemExit) as ex:
        cli.main(["--version"])
    assert ex.value.code == 0
    assert capsys.readouterr().out.startswith("openfunctions-mcp ")
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    text = capsys.readouterr().out
    for option in ("--profile", "--transport", "--host", "--port", "--path", "--data-dir", "--module", "--log-level",
                   "--no-journal", "--stateless", "--auth-token-env", "--auth-token-file"):
        assert option in text, option


def test_bad_profile_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as ex:
        cli.main(["serve", "--profile", "nonsense"])
    assert ex.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("spec, count", [("tests.servers.fixture_tools:registry", 7),
                                         ("tests.servers.fixture_tools:factory", 7),
                                         ("tests.servers.fixture_tools:tools", 7)])
def test_module_forms(spec, count):
    loaded = load_module_tools(spec)
    assert len(loaded) == count


@pytest.mark.parametrize("spec, needle", [
    ("tests.servers.fixture_tools:not_tools", "expected a ToolRegistry"),
    ("tests.servers.fixture_tools:missing", "no attribute 'missing'"),
    ("no_such_module_xyz:registry", "cannot import"),
    (":registry", "pkg.module:attribute"),
])
def test_module_errors_name_the_problem(spec, needle):
    with pytest.raises(ToolLoadError) as info:
        load_module_tools(spec)
    assert needle in info.value.message


def test_tools_profile_serves_examples_and_module_tools(tmp_path):
    prof = build_profile("tools", data_dir=tmp_path, modules=["tests.servers.fixture_tools:factory"], files_root=tmp_path)
    names = {t.name for t in prof.registry.list()}
    assert {"of_hash_text", "of_json_query", "of_now", "of_list_dir", "add", "slow"} <= names
    only = build_profile("tools", data_dir=tmp_path, modules=["tests.servers.fixture_tools:registry"], examples=False)
    from tests.servers import fixture_tools

    assert only.registry is fixture_tools.registry  # a single registry is served as is (policy kept)


def _catalog(tmp_path):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    catalog = project / "catalog.toml"
    catalog.write_text((REPO / "work" / "example_catalog.toml").read_text())
    return catalog


@pytest.mark.anyio
async def test_artifacts_work_and_all_profiles(tmp_path):
    from openfunctions.work import WORK_TOOL_NAMES

    arts = build_profile("artifacts", data_dir=tmp_path)
    assert [t.name for t in arts.registry.list()] == ["of_artifact_read"]
    await arts.aclose()

    catalog = _catalog(tmp_path)
    work = build_profile("work", data_dir=tmp_path / "d1", catalog=catalog, principal="agent")
    assert [t.name for t in work.registry.list()] == list(WORK_TOOL_NAMES)
    assert "of_work_preview" in (work.instructions or "")
    await work.aclose()

    everything = build_profile("all", data_dir=tmp_path / "d2", catalog=catalog)
    names = [t.name for t in everything.registry.list()]
    assert {"of_hash_text", "of_artifact_read", *WORK_TOOL_NAMES} <= set(names)
    assert not any(n.startswith("of_step.") for n in names), "steps are reachable only through the controller"
    readers = {t.name: t for t in everything.registry.list() if t.name in ("of_artifact_read", "of_work_artifact_read")}
    assert len(readers) == 2 and len({t.title for t in readers.values()}) == 2
    assert len({t.description for t in readers.values()}) == 2, "two stores, two descriptions"
    await everything.aclose()

    without_catalog = build_profile("all", data_dir=tmp_path / "d3")
    assert not any(t.name.startswith("of_work_") for t in without_catalog.registry.list())
    await without_catalog.aclose()


def test_every_profile_name_is_known():
    assert PROFILES == ("tools", "work", "artifacts", "agents", "memory", "rag", "gateway", "all", "conformance")


def test_work_profile_without_a_catalog_serves_tools_that_name_the_fix(tmp_path):
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "of_work_catalog", "arguments": {}}},
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "openfunctions.servers", "serve", "--profile", "work", "--data-dir", str(tmp_path)],
        input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True, text=True, timeout=60,
        env=server_env(OPENFUNCTIONS_WORK_CATALOG=""),
    )
    assert proc.returncode == 0, proc.stderr
    reply = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines())}[2]["result"]
    assert reply["isError"] is True
    assert "no work catalog" in reply["content"][0]["text"] and str(tmp_path) in reply["content"][0]["text"]


def test_auth_token_problems_exit_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "openfunctions.servers", "serve", "--transport", "http", "--auth-token-env",
         "OF_SURELY_UNSET_VAR", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=server_env(),
    )
    assert proc.returncode == 2 and "OF_SURELY_UNSET_VAR" in proc.stderr


@pytest.mark.slow
def test_demo_runs_a_real_session(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "openfunctions.servers", "demo", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=server_env(),
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "tools/list ->" in out and "of_hash_text" in out
    assert "structuredContent:" in out and "receipt_id" in out and "rcpt_" in out
    assert "outcome        succeeded" in out
    assert "isError: True" in out
    # the work walkthrough, through the of_work_* tools of the default 'all' profile
    for tool in ("of_work_preview", "of_work_start", "of_work_run_step", "of_work_verify", "of_work_complete"):
        assert tool in out
    assert '"state": "completed"' in out and "walkthrough stopped" not in out
    # no JSON log line in the middle of the walkthrough: the gateway part being off is said in words
    assert "profile_part_unavailable" not in proc.stderr and '"level"' not in proc.stderr, proc.stderr
    assert "the 'all' profile's gateway part is off here" in out


@pytest.mark.slow
def test_bare_command_serves_tools_over_stdio_in_the_per_user_data_dir(tmp_path):
    """What an MCP host runs: no arguments at all. HOME points at a scratch dir to see where data lands."""
    home = tmp_path / "home"
    home.mkdir()
    env = server_env(HOME=str(home))
    for var in ("XDG_DATA_HOME", "OPENFUNCTIONS_MCP_DATA_DIR"):
        env.pop(var, None)
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "of_now", "arguments": {}}},
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "openfunctions.servers"],
        input="".join(json.dumps(m) + "\n" for m in lines), capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 0, proc.stderr
    replies = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines())}
    assert replies[1]["result"]["serverInfo"]["name"] == "openfunctions-mcp-tools"
    receipt = replies[2]["result"]["_meta"]["dev.openfunctions/receipt"]
    data_dir = home / ".local" / "share" / "openfunctions-mcp"
    assert (data_dir / "journal" / "tools.journal").exists()
    assert (data_dir.stat().st_mode & 0o777) == 0o700
    from .conftest import journaled_receipts

    assert receipt["receipt_id"] in journaled_receipts(data_dir)


def test_help_lists_the_contributed_commands_as_their_own_modules_word_them():
    """--help stands in for the journal and grant sub-CLIs without importing them; the listing must not change."""
    lazy = cli.build_parser().format_help()
    eager = cli.build_parser(load=("journal", "grant")).format_help()
    assert lazy == eager
    for command in ("serve", "demo", "journal", "grant"):
        assert f"\n    {command} " in lazy, command


HELP_IMPORTS = """
import json
import sys
from openfunctions.servers import cli
after_import = sorted(m for m in sys.modules if m.startswith(("openfunctions.work", "openfunctions.core")))
try:
    cli.main(["--help"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
after_help = sorted(m for m in sys.modules if m.startswith(("openfunctions.work", "openfunctions.core")))
print(json.dumps([after_import, after_help]), file=sys.stderr)
"""


def test_importing_the_cli_and_its_help_import_neither_work_nor_the_journal_cli():
    proc = subprocess.run([sys.executable, "-c", HELP_IMPORTS], capture_output=True, text=True, timeout=60, env=server_env())
    assert proc.returncode == 0, proc.stderr
    after_import, after_help = json.loads(proc.stderr.strip().splitlines()[-1])
    assert after_import == [] and after_help == [], proc.stderr
    assert "journal" in proc.stdout and "grant" in proc.stdout


def test_contributed_commands_still_run_with_their_own_options(tmp_path):
    journal = subprocess.run([sys.executable, "-m", "openfunctions.servers", "journal", "--help"],
                             capture_output=True, text=True, timeout=60, env=server_env())
    assert journal.returncode == 0 and "{inspect,verify,tail,show,reopen}" in journal.stdout, journal.stderr
    grants = subprocess.run(
        [sys.executable, "-m", "openfunctions.servers", "grant", "list", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=server_env(),
    )
    assert grants.returncode == 0 and "no grants" in grants.stdout, grants.stderr


def test_the_same_tools_from_two_sources_name_both(tmp_path):
    spec = "tests.servers.fixture_tools:registry"
    with pytest.raises(Exception) as info:
        build_profile("tools", data_dir=tmp_path, modules=[spec, "tests.servers.fixture_tools:tools"], examples=False)
    message = info.value.message
    assert f"--module {spec}" in message and "--module tests.servers.fixture_tools:tools" in message


# -- a newcomer's first hour --------------------------------------------------

MYTOOLS = '''
from openfunctions.core import ToolRegistry, tool


@tool
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


registry = ToolRegistry([word_count])
'''

INIT_AND_LIST = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "word_count", "arguments": {"text": "a b c"}}},
]


def test_the_console_script_finds_a_module_in_the_current_directory(tmp_path):
    """`openfunctions-mcp serve --module mytools:registry` from the folder holding mytools.py (not only `python -m`)."""
    import os
    from pathlib import Path

    script = Path(sys.executable).parent / "openfunctions-mcp"
    assert script.exists(), f"the console script is installed next to {sys.executable}"
    (tmp_path / "mytools.py").write_text(MYTOOLS)
    env = server_env()
    env.pop("PYTHONPATH", None)  # nothing but the current directory may explain the import
    proc = subprocess.run(
        [str(script), "serve", "--module", "mytools:registry", "--no-example-tools", "--data-dir", str(tmp_path / "d")],
        input="".join(json.dumps(m) + "\n" for m in INIT_AND_LIST), capture_output=True, text=True, timeout=60,
        env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    reply = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines())}[2]["result"]
    assert reply["structuredContent"] == {"result": 3}
    assert os.getcwd() != str(tmp_path)


@pytest.mark.slow
def test_module_serves_only_its_tools_unless_example_tools(tmp_path):
    """`serve --module X` lists X's tools only; `--example-tools` adds the example tools beside them."""
    (tmp_path / "mytools.py").write_text(MYTOOLS)
    listing = [*INIT_AND_LIST[:2], {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}]

    def names(*extra: str) -> set[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "openfunctions.servers", "serve", "--module", "mytools:registry", *extra,
             "--data-dir", str(tmp_path / "d")],
            input="".join(json.dumps(m) + "\n" for m in listing), capture_output=True, text=True, timeout=60,
            env=server_env(), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        reply = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines())}[2]["result"]
        return {t["name"] for t in reply["tools"]}

    assert names() == {"word_count"}
    assert names("--example-tools") == {"word_count", "of_hash_text", "of_json_query", "of_now"}


def test_example_tools_flags(tmp_path, capsys):
    parse = cli.build_parser().parse_args
    assert cli._serve_examples(parse(["serve"])) is True
    assert cli._serve_examples(parse(["serve", "--module", "m"])) is False
    assert cli._serve_examples(parse(["serve", "--module", "m", "--example-tools"])) is True
    assert cli._serve_examples(parse(["serve", "--no-example-tools"])) is False
    with pytest.raises(SystemExit):
        parse(["serve", "--example-tools", "--no-example-tools"])
    capsys.readouterr()
    # --files-root asks for of_list_dir, an example tool: with --module alone that would be dropped silently
    rc = cli.main(["serve", "--module", "m", "--files-root", str(tmp_path), "--data-dir", str(tmp_path / "d")])
    assert rc == 2 and "add --example-tools" in capsys.readouterr().err


def test_a_bare_module_without_a_registry_serves_its_top_level_tools(tmp_path):
    """`--module mytools` (no `:attr`) on a file of @tool functions and no `registry` serves those tools."""
    (tmp_path / "bare_tools_mod.py").write_text(MYTOOLS.replace("registry = ToolRegistry([word_count])", "") +
                                                "\n\n@tool\ndef shout(text: str) -> str:\n    \"\"\"Upper-case.\"\"\"\n"
                                                "    return text.upper()\n")
    (tmp_path / "empty_mod.py").write_text("X = 1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert [t.name for t in load_module_tools("bare_tools_mod")] == ["word_count", "shout"]
        # an explicit attribute is still required to exist
        with pytest.raises(ToolLoadError, match="no attribute 'registry'"):
            load_module_tools("bare_tools_mod:registry")
        with pytest.raises(ToolLoadError, match="defines no tools at its top level: decorate functions with @tool"):
            load_module_tools("empty_mod")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("bare_tools_mod", None)
        sys.modules.pop("empty_mod", None)


def test_options_without_a_command_mean_serve(monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "_cmd_serve", lambda args: seen.setdefault("args", args) and 0)
    assert cli.main(["--profile", "work", "--log-level", "INFO"]) == 0
    assert (seen["args"].command, seen["args"].profile, seen["args"].log_level) == ("serve", "work", "info")


def test_log_level_comes_from_the_environment_and_a_bad_one_exits_2(monkeypatch, capsys):
    monkeypatch.setenv("OPENFUNCTIONS_LOG_LEVEL", "Debug")
    assert cli.build_parser().parse_args(["serve"]).log_level == "debug"
    assert cli.build_parser().parse_args(["serve", "--log-level", "ERROR"]).log_level == "error"
    monkeypatch.setenv("OPENFUNCTIONS_LOG_LEVEL", "loud")
    assert cli.main(["serve"]) == 2
    assert "OPENFUNCTIONS_LOG_LEVEL='loud' is not a log level" in capsys.readouterr().err


def test_stdlib_and_uvicorn_log_lines_are_json_off_a_terminal_and_readable_on_one(monkeypatch):
    import io
    import logging

    import structlog

    from openfunctions.core import configure_logging

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    try:
        for stream, is_tty in ((io.StringIO(), False), (Terminal(), True)):
            monkeypatch.setattr(sys, "stderr", stream)
            configure_logging("info")
            logging.getLogger("uvicorn.error").info("Started server process [%d]", 7)
            structlog.get_logger("t").info("listening", url="http://127.0.0.1:1/mcp")
            lines = stream.getvalue().splitlines()
            assert len(lines) == 2, lines
            if is_tty:
                assert "Started server process [7]" in lines[0] and "[uvicorn.error]" in lines[0]
                assert not lines[0].startswith("{") and "url=http://127.0.0.1:1/mcp" in lines[1]
            else:
                first, second = map(json.loads, lines)
                assert (first["event"], first["logger"], first["level"]) == ("Started server process [7]", "uvicorn.error", "info")
                assert second["url"] == "http://127.0.0.1:1/mcp"
    finally:
        monkeypatch.undo()
        configure_logging("warning")


def test_http_says_where_it_listens_and_a_taken_port_is_one_line_exit_2(http_server, tmp_path):
    url, proc = http_server()
    line = proc.stderr.readline()
    assert line.startswith("openfunctions-mcp: serving the 'tools' profile over streamable HTTP at ") and url in line
    assert "(auth off)" in line
    port = url.split(":")[2].split("/")[0]
    taken = subprocess.run(serve_argv("--transport", "http", "--port", port, "--data-dir", str(tmp_path / "d2")),
                           capture_output=True, text=True, timeout=60, env=server_env())
    assert taken.returncode == 2, taken.stderr
    assert taken.stderr.strip().splitlines() == [
        f"openfunctions-mcp: port {port} on 127.0.0.1 is already in use: stop what holds it or pass another --port"]


def test_stdio_in_a_terminal_says_it_waits_for_a_client_and_ends_when_the_terminal_goes(tmp_path):
    import os
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(serve_argv("--data-dir", str(tmp_path)), stdin=slave, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=server_env())
    os.close(slave)
    try:
        line = proc.stderr.readline()
        assert "waiting for an MCP client on stdin" in line and "openfunctions-mcp demo" in line
        # One answered request: the server's stdin reader is now back in a blocked read, where a
        # hang-up reads as EIO (not EOF); the server must end on it all the same.
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "t", "version": "0"}}}
        os.write(master, (json.dumps(initialize) + "\n").encode())
        assert json.loads(proc.stdout.readline())["id"] == 1
        os.close(master)  # the terminal goes away
        master = -1
        assert proc.wait(timeout=30) == 0
    finally:
        if master >= 0:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()


def test_demo_deletes_its_temporary_dir_and_says_so_unless_kept(monkeypatch, capsys, tmp_path):
    from openfunctions.servers import _demo as demo

    seen = []

    async def session(profile, data_dir, catalog=None):
        (data_dir / "journal").mkdir()
        (data_dir / "journal" / "all.journal").write_text("")
        seen.append(data_dir)
        return 0

    monkeypatch.setattr(demo, "_session", session)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(demo.tempfile, "tempdir", None)  # re-read TMPDIR
    assert demo.run_demo() == 0
    out = capsys.readouterr().out
    assert not seen[-1].exists() and f"deleted the demo's temporary data directory {seen[-1]}" in out and "--keep" in out
    assert demo.run_demo(keep=True) == 0
    out = capsys.readouterr().out
    assert seen[-1].is_dir() and f"data directory kept (--keep): {seen[-1]}" in out
    assert f"journal inspect {seen[-1] / 'journal' / 'all.journal'}" in out
