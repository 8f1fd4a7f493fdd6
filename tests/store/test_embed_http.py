"""OpenAIEmbedder against a local server speaking the OpenAI ``/v1/embeddings`` wire format.

The server (127.0.0.1, a real socket) plays the model: its vectors are the
lexical embedder's, scaled by 3 (the client must normalize them), so search
results mean something. A script of failures per test exercises retries.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from openfunctions.store import EmbedderFailed, LexicalEmbedder, OpenAIEmbedder, create_embedder

LEX = LexicalEmbedder(64)


class WireServer:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.script: list[tuple[int, dict, object]] = []  # (status, headers, body) served before normal replies
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.requests.append(body)
                outer.headers.append(dict(self.headers))
                if self.path != "/v1/embeddings":
                    return self._send(404, {}, {"error": {"message": f"no route {self.path}"}})
                if outer.script:
                    return self._send(*outer.script.pop(0))
                inputs = body["input"]
                data = [{"object": "embedding", "index": i, "embedding": [3 * x for x in LEX.embed_one(t)]}
                        for i, t in enumerate(inputs)]
                data.reverse()  # the client must order by index
                self._send(200, {}, {"object": "list", "data": data, "model": body["model"],
                                     "usage": {"prompt_tokens": 1, "total_tokens": 1}})

            def _send(self, status: int, headers: dict, body: object) -> None:
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = WireServer()
    yield s
    s.close()


def make(server: WireServer, **kw: object) -> OpenAIEmbedder:
    e = OpenAIEmbedder("test-embed", base_url=server.url, api_key="sk-test", **kw)
    e.sleep = lambda s: waits.append(s)  # type: ignore[method-assign]
    return e


waits: list[float] = []


def test_wire_format_order_normalization_and_dimension_probe(server):
    e = make(server)
    assert e.dimension == 64 and e.name == "openai:test-embed"
    assert server.requests[0]["input"] == ["dimension probe"]  # no dimension given: one probe call
    vecs = e.embed(["the cat sat", "a dog barked", "the cat sat"])
    req = server.requests[-1]
    assert req == {"model": "test-embed", "input": ["the cat sat", "a dog barked", "the cat sat"],
                   "encoding_format": "float"}
    assert server.headers[-1]["authorization"] == "Bearer sk-test"
    assert vecs[0] == pytest.approx(LEX.embed_one("the cat sat"), abs=1e-9)  # ordered by index, unit length
    assert vecs[0] == vecs[2] and vecs[0] != vecs[1]


def test_batches_split_at_batch_size(server):
    e = make(server, dimension=64, batch_size=2)
    assert server.requests == []  # dimension given: no probe
    assert len(e.embed([f"text {i}" for i in range(5)])) == 5
    assert [len(r["input"]) for r in server.requests] == [2, 2, 1]


def test_retries_429_and_5xx_honouring_retry_after(server):
    waits.clear()
    e = make(server, dimension=64)
    server.script = [(429, {"retry-after": "2"}, {"error": {"message": "slow down"}}),
                     (503, {}, {"error": {"message": "overloaded"}})]
    assert len(e.embed(["x"])) == 1
    assert len(server.requests) == 3
    assert waits[0] == 2.0 and 0.5 <= waits[1] <= 1.0  # backoff for attempt 2: 1 s with jitter


def test_errors_name_the_status_and_the_providers_message(server):
    e = make(server, dimension=64)
    server.script = [(401, {}, {"error": {"message": "Incorrect API key provided"}})]
    with pytest.raises(EmbedderFailed, match="HTTP 401: Incorrect API key provided") as info:
        e.embed(["x"])
    assert info.value.code == "embedder_failed" and len(server.requests) == 1  # not retried
    server.script = [(429, {"retry-after": "3600"}, {"error": {"message": "quota"}})]
    with pytest.raises(EmbedderFailed, match="asked to wait 3600s"):
        e.embed(["x"])
    server.script = [(500, {}, b"boom")] * 4
    with pytest.raises(EmbedderFailed, match="HTTP 500: boom"):
        e.embed(["x"])
    server.script = [(200, {}, {"data": [{"index": 0}]})]
    with pytest.raises(EmbedderFailed, match="data\\[\\].embedding"):
        e.embed(["x"])
    server.script = [(200, {}, {"data": [{"index": 0, "embedding": [1.0, 0.0]}]})]
    with pytest.raises(EmbedderFailed, match="2 dimensions; this embedder has 64"):
        e.embed(["x"])


def test_unreachable_server_is_a_clear_error():
    e = OpenAIEmbedder("m", base_url="http://127.0.0.1:9/v1", dimension=8, max_attempts=2)
    e.sleep = lambda s: None  # type: ignore[method-assign]
    with pytest.raises(EmbedderFailed, match="cannot reach http://127.0.0.1:9/v1"):
        e.embed(["x"])


def test_create_embedder_reads_the_environment(server, monkeypatch):
    monkeypatch.setenv("OPENFUNCTIONS_EMBEDDINGS_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    e = create_embedder("openai:from-env")
    assert e.name == "openai:from-env" and e.dimension == 64
    assert server.headers[-1]["authorization"] == "Bearer sk-env"


@pytest.mark.anyio
async def test_rag_and_memory_search_by_meaning_through_the_api(server, tmp_path):
    from openfunctions.memory import Memory
    from openfunctions.rag import open_rag
    from openfunctions.store import open_local_store

    rag = await open_rag(data_dir=tmp_path, embedder=make(server, dimension=64))
    try:
        await rag.ingest("cats", "The cat sat on the warm mat. Cats sleep a lot.")
        await rag.ingest("ships", "Container ships cross the ocean with cargo.")
        hits = await rag.search("where did the cat sit", k=1)
        assert hits[0]["doc_id"] == "cats"
    finally:
        await rag.aclose()
    store = await open_local_store("mem", tmp_path)
    try:
        mem = Memory(store, embedder=make(server, dimension=64))
        await mem.save_fact("The deploy key rotates every 90 days", source="ops")
        await mem.save_fact("Lunch is at noon")
        mode, hits = await mem.search("deploy key rotation", mode="meaning")
        assert mode == "meaning" and hits[0].fact.text.startswith("The deploy key")
    finally:
        await store.aclose()
