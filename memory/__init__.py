"""openfunctions.memory: conversation threads and saved facts, served as tools.

Usage::

    from openfunctions.store import open_local_store
    from openfunctions.memory import Memory, create_memory_tools

    memory = Memory(await open_local_store("memory"), embedder=None)   # or embedder=LexicalEmbedder()
    await memory.append_message("t1", "user", "hello")
    page = await memory.get_thread("t1", limit=20)                 # newest first; page.next_before
    fact = await memory.save_fact("The deploy key rotates monthly", source="ops wiki")
    mode, hits = await memory.search("deploy key")
    registry = ToolRegistry(create_memory_tools(memory))           # memory_save_fact, memory_search, ...

Works on either store (local or PostgreSQL). See docs/STATE.md.
"""

from ._errors import FactNotFound, InvalidMemoryInput, MemoryLayerError, MemoryNotOpen
from ._memory import Fact, FactHit, Memory, ThreadMessage, ThreadPage, create_memory
from ._profile import MemoryProfile, build_memory_profile
from ._tools import create_memory_tools

__all__ = [
    "Fact", "FactHit", "FactNotFound", "InvalidMemoryInput", "Memory", "MemoryLayerError", "MemoryNotOpen",
    "MemoryProfile", "ThreadMessage", "ThreadPage", "build_memory_profile", "create_memory", "create_memory_tools",
]
