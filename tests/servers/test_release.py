"""The release artifacts: an sdist and a wheel that build, pass ``twine check --strict``, and carry one version.

``python -m build --no-isolation`` builds the sdist and then the wheel *from the
sdist* (so a file missing from the sdist breaks the wheel), with the setuptools
the test extra installs (no download). The version lives in pyproject.toml only;
the code reads it back with ``importlib.metadata`` (``openfunctions.servers.__version__``).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = pytest.mark.slow
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


# ``dists`` (the sdist and the wheel built from it, once a session) comes from tests/servers/conftest.py:
# test_packaging.py runs the same wheel with uvx.


def test_sdist_and_wheel_pass_twine_check_strict(dists):
    proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dists)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def test_one_version_from_pyproject_to_the_command(dists):
    from importlib.metadata import version

    from openfunctions.servers import __version__

    want = PYPROJECT["project"]["version"]
    sdist, wheel = dists
    assert sdist.name == f"openfunctions_mcp-{want}.tar.gz" and wheel.name.startswith(f"openfunctions_mcp-{want}-")
    with zipfile.ZipFile(wheel) as zf:
        meta = Parser().parsestr(zf.read(f"openfunctions_mcp-{want}.dist-info/METADATA").decode())
    assert meta["Version"] == want == version("openfunctions-mcp") == __version__
    assert meta["Name"] == "openfunctions-mcp" and meta["License-Expression"] == "MIT"
    assert meta["Description-Content-Type"] == "text/markdown"
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[?{re.escape(want)}\]?", changelog, re.M), f"CHANGELOG.md has no section for {want}"


def test_the_wheel_holds_every_package_the_script_and_the_data(dists):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    for package in PYPROJECT["tool"]["setuptools"]["packages"]:
        assert package.replace(".", "/") + "/__init__.py" in names, package
    assert "openfunctions-mcp = openfunctions.servers.cli:main" in entry_points
    for package, patterns in PYPROJECT["tool"]["setuptools"].get("package-data", {}).items():
        source = REPO / PYPROJECT["tool"]["setuptools"]["package-dir"][package]
        for pattern in patterns:
            for f in source.glob(pattern):
                assert package.replace(".", "/") + "/" + f.relative_to(source).as_posix() in names, f
    assert not any(n.startswith(("tests/", "bench/")) for n in names)


def test_the_installed_wheel_gives_the_front_door_and_every_subpackage(dists, tmp_path):
    """The wheel installed into a fresh venv (its dependencies borrowed from this one, never from the checkout):
    ``openfunctions`` and its public names, and ``openfunctions.core`` and the rest, all from the install."""
    import sysconfig

    _, wheel = dists
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    # a path line in a .pth adds this venv's dependencies; .pth files found there are not run, so the
    # checkout's editable finder stays out
    (Path(site) / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    check = (
        "import importlib, openfunctions\n"
        "names = openfunctions.__all__\n"
        "assert all(getattr(openfunctions, n) is not None for n in names)\n"
        "subs = [importlib.import_module('openfunctions.' + p) for p in "
        f"{[p.split('.', 1)[1] for p in PYPROJECT['tool']['setuptools']['packages'] if '.' in p]!r}]\n"
        "print(openfunctions.__file__, *(m.__file__ for m in subs), sep='\\n')\n"
        "print(len(names), openfunctions.tool is openfunctions.core.tool)\n"
    )
    proc = subprocess.run([str(python), "-I", "-c", check], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *files, summary = proc.stdout.splitlines()
    assert files and all(f.startswith(site + "/openfunctions/") for f in files), files
    assert summary == f"{len(__import__('openfunctions').__all__)} True"


WORKFLOW = REPO / ".github" / "workflows" / "release.yml"


def test_the_release_workflow_publishes_tags_with_trusted_publishing():
    """On a version tag: build, check, and publish with PyPI trusted publishing (OIDC, no stored token)."""
    yaml = pytest.importorskip("yaml", reason="the test extra installs PyYAML")
    flow = yaml.safe_load(WORKFLOW.read_text())
    triggers = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on` key as the boolean true
    assert triggers["push"]["tags"] == ["v*"]
    build, publish = flow["jobs"]["build"], flow["jobs"]["publish"]
    build_text = " ".join(str(step.get("run", "")) for step in build["steps"])
    assert "python -m build" in build_text and "twine check --strict" in build_text
    assert 'test "${GITHUB_REF_NAME}" = "v${want}"' in build_text  # a tag that is not pyproject's version fails
    assert publish["needs"] == "build"
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["environment"]["name"] == "pypi"
    uses = [step.get("uses", "") for step in publish["steps"]]
    assert uses[-1] == "pypa/gh-action-pypi-publish@release/v1"
    assert not any("password" in (step.get("with") or {}) for step in publish["steps"])  # no token: OIDC only
    # the workflow's default token may only read; only the publish job gets an OIDC token
    assert flow["permissions"] == {"contents": "read"} and "permissions" not in build
