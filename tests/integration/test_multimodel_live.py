"""Live server: embeddings through the openai client, rerank, model status and control."""

from __future__ import annotations

import asyncio
import base64
import math
import struct
from pathlib import Path

import httpx
import openai
import pytest

from omlx.pool.pool import LocalModelPool
from omlx.settings import ModelSettings, Settings
from tests.fixtures.live_server import running_server
from tests.fixtures.tiny_encoders import build_tiny_bert, minilm_dir

pytestmark = pytest.mark.timeout(180)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, tiny_qwen3_dir: Path):
    root = tmp_path_factory.mktemp("multimodel")
    models = {
        "minilm": minilm_dir(),
        "ce": build_tiny_bert(root / "ce", seed=3, num_labels=1),
        "q": tiny_qwen3_dir,
    }
    settings = Settings(models=ModelSettings(pinned=["ce"]))
    pool = LocalModelPool(settings, models=models)
    with running_server(pool, settings) as server:
        yield server
    asyncio.run(pool.close(grace_s=0))


def test_embeddings_through_openai_client(live) -> None:
    client = openai.OpenAI(base_url=live.openai_base_url, api_key="x")
    texts = [
        "eating food",
        "eating bread",
        "The weather is lovely today.",
        "It's so sunny outside!",
    ]
    resp = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    vecs = [d.embedding for d in resp.data]
    assert [d.index for d in resp.data] == [0, 1, 2, 3]
    assert len(vecs[0]) == 384
    assert abs(math.sqrt(sum(x * x for x in vecs[0])) - 1) < 1e-4  # normalised
    # sentence-transformers' published value for this pair, and our reference forward
    assert cosine(vecs[2], vecs[3]) == pytest.approx(0.6660, abs=2e-3)
    assert cosine(vecs[0], vecs[1]) == pytest.approx(0.7054, abs=2e-3)
    assert resp.usage.prompt_tokens == 4 + 4 + 8 + 9
    # the client's default: base64, decoded by the client to the same floats
    single = client.embeddings.create(model="minilm", input="eating food")
    assert single.data[0].embedding == pytest.approx(vecs[0], abs=1e-5)


def test_embeddings_base64_and_token_ids(live) -> None:
    url = f"{live.openai_base_url}/embeddings"
    r = httpx.post(
        url, json={"model": "minilm", "input": "eating food", "encoding_format": "base64"}
    )
    assert r.status_code == 200, r.text
    raw = base64.b64decode(r.json()["data"][0]["embedding"])
    b64 = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    ids = httpx.post(url, json={"model": "minilm", "input": [[101, 5983, 2833, 102]]}).json()
    assert ids["data"][0]["embedding"] == pytest.approx(b64, abs=1e-5)
    flat = httpx.post(url, json={"model": "minilm", "input": [101, 5983, 2833, 102]}).json()
    assert flat["data"][0]["embedding"] == pytest.approx(b64, abs=1e-5)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "minilm", "input": "x", "dimensions": 128}, "dimensions"),
        ({"model": "minilm", "input": []}, "input"),
        ({"model": "minilm", "input": [[1, 2], "x"]}, "input"),
        ({"model": "minilm", "input": [[99999999]]}, "input"),
        ({"model": "q", "input": "x"}, "model"),
    ],
)
def test_embeddings_bad_requests(live, body: dict, param: str) -> None:
    r = httpx.post(f"{live.openai_base_url}/embeddings", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_embeddings_unknown_model_404(live) -> None:
    r = httpx.post(f"{live.openai_base_url}/embeddings", json={"model": "nope", "input": "x"})
    assert r.status_code == 404


def test_rerank_cross_encoder_over_http(live) -> None:
    docs = ["the cat sat", "stock markets fell", {"text": "a dog barked"}, "rain today"]
    r = httpx.post(
        f"{live.base_url}/v1/rerank",
        json={"model": "ce", "query": "animals", "documents": docs, "top_n": 3},
    )
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == 3
    scores = [x["relevance_score"] for x in results]
    assert scores == sorted(scores, reverse=True)
    assert all(0 <= s <= 1 for s in scores)
    texts = ["the cat sat", "stock markets fell", "a dog barked", "rain today"]
    assert all(x["document"]["text"] == texts[x["index"]] for x in results)
    bare = httpx.post(
        f"{live.base_url}/v1/rerank",
        json={"model": "ce", "query": "animals", "documents": docs, "return_documents": False},
    ).json()["results"]
    assert len(bare) == 4 and all(x["document"] is None for x in bare)
    assert [x["index"] for x in bare][:3] == [x["index"] for x in results]


def test_rerank_causal_lm_over_http(live) -> None:
    r = httpx.post(
        f"{live.base_url}/v1/rerank",
        json={"model": "q", "query": "capital of France", "documents": ["Paris", "bread", "x"]},
    )
    assert r.status_code == 200, r.text
    scores = [x["relevance_score"] for x in r.json()["results"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)


def test_rerank_bad_requests(live) -> None:
    url = f"{live.base_url}/v1/rerank"
    assert httpx.post(url, json={"model": "ce", "query": "q", "documents": []}).status_code == 400
    assert httpx.post(url, json={"model": "ce", "query": "q", "documents": [3]}).status_code == 400
    assert (
        httpx.post(url, json={"model": "minilm", "query": "q", "documents": ["a"]}).status_code
        == 400
    )


def test_model_status_and_control(live) -> None:
    base = live.openai_base_url
    assert httpx.post(f"{base}/models/minilm/load").json()["state"] == "loaded"
    status = {m["id"]: m for m in httpx.get(f"{base}/models/status").json()["data"]}
    assert status["minilm"]["state"] == "loaded" and status["minilm"]["memory_bytes"] > 80e6
    assert status["minilm"]["type"] == "embedding" and status["minilm"]["last_used"] > 0
    assert status["ce"]["pinned"] is True and status["ce"]["type"] == "reranker"
    cards = {m["id"]: m for m in httpx.get(f"{base}/models").json()["data"]}
    assert cards["minilm"]["status"] == "loaded" and cards["q"]["type"] == "llm"
    r = httpx.post(f"{base}/models/minilm/pin").json()
    assert r["pinned"] is True
    assert httpx.post(f"{base}/models/minilm/unpin").json()["pinned"] is False
    assert httpx.post(f"{base}/models/minilm/unload").json()["state"] == "available"
    cards = {m["id"]: m for m in httpx.get(f"{base}/models").json()["data"]}
    assert cards["minilm"]["status"] == "available"
    assert httpx.post(f"{base}/models/minilm/explode").status_code == 400
    assert httpx.post(f"{base}/models/nope/load").status_code == 404


def test_cli_pin_reaches_the_running_server(live, monkeypatch, _isolated_omlx_home) -> None:
    from typer.testing import CliRunner

    from omlx.cli.main import app

    models_dir = _isolated_omlx_home / "models"
    models_dir.mkdir(exist_ok=True)
    (models_dir / "minilm").symlink_to(minilm_dir(), target_is_directory=True)
    monkeypatch.setenv("OMLX_SERVER__PORT", str(live.port))
    result = CliRunner().invoke(app, ["pin", "minilm"])
    assert result.exit_code == 0, result.output
    assert "running server" in result.output
    status = {m["id"]: m for m in httpx.get(f"{live.openai_base_url}/models/status").json()["data"]}
    assert status["minilm"]["pinned"] is True
    result = CliRunner().invoke(app, ["unpin", "minilm"])
    assert result.exit_code == 0, result.output
    status = {m["id"]: m for m in httpx.get(f"{live.openai_base_url}/models/status").json()["data"]}
    assert status["minilm"]["pinned"] is False


def test_embeddings_too_long_is_refused_unless_truncate(live) -> None:
    url = f"{live.openai_base_url}/embeddings"
    long_text = "eating food " * 400  # 800 words: past MiniLM's 256-token window (512 pos)
    r = httpx.post(url, json={"model": "minilm", "input": ["short", long_text]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "input" and "input 1" in error["message"]
    assert "truncate" in error["message"]
    cut = httpx.post(url, json={"model": "minilm", "input": ["short", long_text], "truncate": True})
    assert cut.status_code == 200, cut.text
    usage = cut.json()["usage"]
    assert usage["truncated_inputs"] == 1
    short = httpx.post(url, json={"model": "minilm", "input": "short"}).json()["usage"]
    assert usage["prompt_tokens"] == short["prompt_tokens"] + 256  # the window of this model
    assert short["truncated_inputs"] == 0
