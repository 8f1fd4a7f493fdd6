"""The MCP conformance suite's fixtures, served through our registry and executor.

The suite (npm ``@modelcontextprotocol/conformance``) calls tools, reads
resources and gets prompts by fixed names (``test_simple_text``,
``test://static-text``, ``test_simple_prompt``, ...) and checks what comes
back. Here those fixtures are ordinary :func:`define_tool` tools in a
:class:`ToolRegistry`, so a conformance run exercises the same path a real
host's call takes: validation, scheduling, receipts, the journal.

Two entry points, used by ``openfunctions-mcp serve --profile conformance``:

- :func:`create_conformance_registry` -- the fixture tools (``.registry``, a
  :class:`ToolRegistry`) and ``.install(server)``, which calls
- :func:`add_conformance_fixtures` -- registers the fixture resources,
  resource template and prompts on a server from
  :func:`openfunctions.servers.create_mcp_server`, plus the small protocol
  handlers the suite probes (``completion/complete``, ``resources/subscribe``
  and ``unsubscribe``, ``logging/setLevel``, ``subscriptions/listen``) and the
  2026-07-28 input-required envelope (:class:`_InputRequiredAdapter`).

Fixtures that talk back to the client (logging, sampling, elicitation,
closing the SSE stream) need the MCP request the call arrived on: the server
lends the SDK's ``ServerRequestContext`` in the execution context's
``ctx.request``. Called without one (directly through the
registry), they say so in their text result instead of failing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openfunctions.core.deprecation import old_names

from ._common import TEST_AUDIO_BASE64, TEST_IMAGE_BASE64
from ._protocol import add_conformance_fixtures
from ._registry import ConformanceFixtures, conformance_tools, create_conformance_registry
from ._tools import JSON_SCHEMA_2020_12_INPUT

__all__ = [
    "ConformanceFixtures",
    "create_conformance_registry",
    "add_conformance_fixtures",
    "conformance_tools",
    "JSON_SCHEMA_2020_12_INPUT",
    "TEST_IMAGE_BASE64",
    "TEST_AUDIO_BASE64",
]


# Old names of renamed functions, kept for one release outside __all__: each use warns (core/deprecation.py).
_RENAMED = {"build_conformance_registry": "create_conformance_registry"}

if not TYPE_CHECKING:  # hidden from mypy: a module __getattr__ would make every misspelt import from here read as Any
    __getattr__ = old_names(__name__, _RENAMED)
