"""The Node peers provision and run: the conformance suite lists its server scenarios."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = [pytest.mark.interop]


def test_conformance_suite_lists_server_scenarios(node_peers) -> None:
    proc = subprocess.run(
        [*node_peers.conformance, "list", "--server"],
        env=node_peers.env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    listed = {line.strip()[2:].split(" ")[0] for line in proc.stdout.splitlines() if line.strip().startswith("- ")}
    # Scenarios our fixture registry is built for; the suite must still know them by these names.
    for name in ("server-initialize", "tools-list", "tools-call-simple-text", "tools-call-with-progress",
                 "resources-read-text", "prompts-get-with-args", "dns-rebinding-protection"):
        assert name in listed, f"{name} missing from `conformance list --server`: {sorted(listed)}"


def test_node_is_22_or_newer(node_peers) -> None:
    out = subprocess.run([str(node_peers.node), "--version"], capture_output=True, text=True, timeout=30).stdout
    assert int(out.strip().lstrip("v").split(".")[0]) >= 22, out
