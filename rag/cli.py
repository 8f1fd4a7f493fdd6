"""``openfunctions-mcp rag ingest PATH... | search QUERY | stats``.

The server CLI calls :func:`add_commands` with its subparsers. The index is
the one ``serve --profile rag`` uses: ``--store URL`` (or
``$OPENFUNCTIONS_DATABASE_URL``) for pgvector, else the embedded index in
``<data-dir>/store/rag/`` (``--data-dir``, default as the server's). A local
index is owned by one process: stop a server using it first (or use
PostgreSQL, which any number of processes share).

Exit codes: 0 done; 1 some files could not be ingested (the others were);
2 bad usage or configuration (missing path, locked store, embedder mismatch).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openfunctions.core import database_url_from_env

if TYPE_CHECKING:  # the command imports the engine only when a subcommand runs
    from ._rag import Rag

EXIT_OK, EXIT_PARTIAL, EXIT_USAGE = 0, 1, 2
GROUP_FILES, GROUP_BYTES = 256, 8 * 1024 * 1024  # files read and ingested together (one Rag.ingest_many)


def _default_data_dir() -> Path:
    # The server's default (openfunctions.servers.cli.default_data_dir), repeated here because rag
    # sits below servers in the dependency order.
    from openfunctions.core.files import default_data_dir as _shared_default

    return Path(_shared_default())


def add_commands(subparsers: Any) -> None:
    """Add the ``rag`` command group to an argparse subparsers object."""
    r = subparsers.add_parser("rag", help="ingest documents and search them",
                              description="Ingest documents into the retrieval index and search it.")
    rsub = r.add_subparsers(dest="rag_command", metavar="{ingest,search,stats}")
    r.set_defaults(func=lambda args: (r.print_help(sys.stderr), EXIT_USAGE)[1])

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-dir", type=Path, metavar="DIR",
                       help="data dir of the embedded index (default: the server's, $OPENFUNCTIONS_MCP_DATA_DIR)")
        p.add_argument("--store", metavar="URL", default=database_url_from_env(),
                       help="a postgresql:// URL: use the pgvector index there (default: $OPENFUNCTIONS_DATABASE_URL)")
        p.add_argument("--embedder", default=os.environ.get("OPENFUNCTIONS_EMBEDDER"),
                       help="lexical (default, no dependencies: lexical-v2, 512 dimensions; lexical-v1 for the "
                            "old one), minilm (all-MiniLM-L6-v2; needs the 'embeddings' extra) or openai:<model>; "
                            "must match what built the index, and unset an existing index opens with the lexical "
                            "embedder that built it ($OPENFUNCTIONS_EMBEDDER)")
        p.add_argument("--index", default="rag", help="index name (default: %(default)s)")

    p = rsub.add_parser("ingest", help="ingest files, and text files under directories",
                        description="Ingest files (and .md/.txt/.rst/... files under directories). A file's "
                                    "document id is its path relative to the current directory. Unchanged "
                                    "files are skipped.")
    p.add_argument("paths", nargs="+", metavar="PATH")
    common(p)
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress bar on stderr: auto = when stderr is a terminal (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="one JSON result per file on stdout")
    p.add_argument("--bulk", action="store_true",
                   help="a large first load into pgvector: drop the search indexes, load, build them once at the "
                        "end (searches meanwhile are slow exact scans); no effect on the embedded index")
    p.add_argument("--follow-links", action="store_true",
                   help="follow symbolic links inside directories, also ones pointing out of them (default: a "
                        "link inside a directory is skipped and named on stderr; a PATH named here is always read)")
    p.set_defaults(func=cmd_ingest)

    p = rsub.add_parser("search", help="search the index", description="Print the chunks that best match QUERY.")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5, help="how many results (1-50, default %(default)s)")
    p.add_argument("--mode", choices=("hybrid", "vector", "text"), default="hybrid",
                   help="hybrid: embeddings fused with full-text ranking (default); vector; text")
    common(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_search)

    p = rsub.add_parser("stats", help="index kind, chunk count, embedder")
    common(p)
    p.set_defaults(func=cmd_stats)


class ProgressBar:
    """A one-line bar on stderr, redrawn at most 10 times a second."""

    def __init__(self, total: int, enabled: bool, width: int = 28) -> None:
        self.total, self.enabled, self.width = total, enabled, width
        self._last = 0.0
        self.done = 0
        self.chunks = 0

    def update(self, done: int, label: str, *, force: bool = False) -> None:
        self.done = done
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        filled = int(self.width * done / self.total) if self.total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        sys.stderr.write(f"\ringest [{bar}] {done}/{self.total} files, {self.chunks} chunks  {label[-40:]:<40}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


async def _open(args: argparse.Namespace) -> Rag:
    from ._rag import open_rag

    return await open_rag(url=args.store, data_dir=(args.data_dir or _default_data_dir()).expanduser(),
                          name=args.index, embedder=args.embedder)


def _fail(msg: str) -> int:
    print(f"openfunctions-mcp rag: {msg}", file=sys.stderr)
    return EXIT_USAGE


def cmd_ingest(args: argparse.Namespace) -> int:
    import anyio

    from openfunctions.core import OpenFunctionsError

    from ._rag import collect_files, doc_id_for

    try:
        collected = collect_files(args.paths, follow_links=args.follow_links)
    except OpenFunctionsError as exc:
        return _fail(exc.message)
    files = collected.files
    for link in collected.skipped_links:
        print(f"openfunctions-mcp rag: skipped symbolic link {str(link)!r} (not followed; --follow-links to "
              "follow links, also out of the directory)", file=sys.stderr)
    if not files:
        return _fail("no files to ingest (directories are searched for " "text files by suffix)")
    show = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())

    async def run() -> int:
        rag = await _open(args)
        bar = ProgressBar(len(files), show)
        counts = {"added": 0, "replaced": 0, "unchanged": 0, "failed": 0}

        def failed(f: Path, why: str) -> None:
            counts["failed"] += 1
            bar.close() if show else None
            print(f"openfunctions-mcp rag: skipped {str(f)!r}: {why}", file=sys.stderr)
            if args.json:
                print(json.dumps({"path": str(f), "error": why}))

        async def load() -> None:
            # files go in groups (Rag.ingest_many: batched embedding, few transactions)
            i = 0
            while i < len(files):
                group: list[tuple[Path, dict[str, Any]]] = []
                size = 0
                while i < len(files) and len(group) < GROUP_FILES and size < GROUP_BYTES:
                    f = files[i]
                    i += 1
                    try:
                        text = f.read_text(encoding="utf-8")
                    except (OSError, UnicodeDecodeError) as exc:
                        failed(f, f"{type(exc).__name__}: {exc}")
                        continue
                    group.append((f, {"doc_id": doc_id_for(f), "text": text, "source": str(f)}))
                    size += len(text)
                bar.update(i, str(files[i - 1]))
                results = await rag.ingest_many([item for _, item in group])
                for (f, _), res in zip(group, results, strict=True):
                    if isinstance(res, OpenFunctionsError):
                        failed(f, res.message)
                        continue
                    counts[res.status] += 1
                    bar.chunks += res.chunks
                    if args.json:
                        print(json.dumps({"path": str(f), **res.to_dict()}))

        try:
            if args.bulk:
                async with rag.bulk_load():
                    await load()
            else:
                await load()
            bar.update(len(files), "done", force=True)
            bar.close()
        finally:
            await rag.aclose()
        summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v) or "nothing"
        print(f"ingested {len(files)} file(s): {summary}; {bar.chunks} chunks", file=sys.stderr)
        return EXIT_PARTIAL if counts["failed"] else EXIT_OK

    try:
        return anyio.run(run)
    except OpenFunctionsError as exc:
        return _fail(exc.message)


def cmd_search(args: argparse.Namespace) -> int:
    import anyio

    from openfunctions.core import OpenFunctionsError

    async def run() -> list[dict[str, Any]]:
        rag = await _open(args)
        try:
            return await rag.search(args.query, k=args.k, mode=args.mode)
        finally:
            await rag.aclose()

    try:
        hits = anyio.run(run)
    except OpenFunctionsError as exc:
        return _fail(exc.message)
    if args.json:
        print(json.dumps({"results": hits}, ensure_ascii=False))
        return EXIT_OK
    if not hits:
        print("no results (is anything ingested? openfunctions-mcp rag ingest PATH...)", file=sys.stderr)
    for h in hits:
        text = " ".join(h["text"].split())
        print(f"{h['score']:.3f}  {h['chunk_id']}\n       {text[:300]}{'...' if len(text) > 300 else ''}")
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    import anyio

    from openfunctions.core import OpenFunctionsError

    async def run() -> dict[str, Any]:
        rag = await _open(args)
        try:
            return await rag.stats()
        finally:
            await rag.aclose()

    try:
        print(json.dumps(anyio.run(run)))
    except OpenFunctionsError as exc:
        return _fail(exc.message)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="openfunctions-mcp")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["rag", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["add_commands", "main"]
