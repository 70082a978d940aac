"""Requests name models in the store; a folder path is refused (unless models.allow_paths),
and the answer is the same whether or not a model lives there."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import httpx
import pytest

from omlx.models.store import ModelStore, looks_like_path
from omlx.pool.pool import LocalModelPool
from omlx.settings import ModelSettings, Settings
from tests.fixtures.live_server import running_server

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@pytest.fixture
def layout(tmp_path: Path, tiny_llama_dir: Path) -> tuple[ModelStore, Path]:
    store_dir, outside = tmp_path / "models", tmp_path / "elsewhere" / "Secret"
    shutil.copytree(tiny_llama_dir, store_dir / "tiny")
    shutil.copytree(tiny_llama_dir, outside)
    return ModelStore([store_dir], scan_hf_cache=False), outside


def _post(base_url: str, model: str) -> httpx.Response:
    body = {**CHAT, "model": model}
    return httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=60)


def test_a_request_cannot_name_a_folder(layout: tuple[ModelStore, Path]) -> None:
    store, outside = layout
    pool = LocalModelPool(Settings(), store=store)
    with running_server(pool, Settings()) as live:
        answers = [
            _post(live.base_url, name)
            for name in (str(outside), str(outside.parent / "Nothing"), "../elsewhere/Secret")
        ]
        listed = httpx.get(f"{live.base_url}/v1/models").json()["data"]
    asyncio.run(pool.close(grace_s=0))
    assert [r.status_code for r in answers] == [404, 404, 404]
    assert answers[0].json() == answers[1].json()  # no oracle for which folders hold models
    for r in answers:
        assert "elsewhere" not in r.text and "Secret" not in r.text
        assert "allow_paths" in r.json()["error"]["message"]
    assert [m["id"] for m in listed] == ["tiny"]


def test_allow_paths_setting_lets_a_trusted_client_name_a_folder(
    layout: tuple[ModelStore, Path],
) -> None:
    store, outside = layout
    settings = Settings(models=ModelSettings(allow_paths=True))
    pool = LocalModelPool(settings, store=store)
    with running_server(pool, settings) as live:
        r = _post(live.base_url, str(outside))
    asyncio.run(pool.close(grace_s=0))  # the engine thread must not outlive the test
    assert r.status_code == 200, r.text


def test_store_resolution_for_the_cli_still_takes_paths(layout: tuple[ModelStore, Path]) -> None:
    store, outside = layout
    assert store.resolve(str(outside)).path == outside.resolve()
    assert store.resolve("tiny", allow_paths=False).name == "tiny"


@pytest.mark.parametrize(
    ("name", "is_path"),
    [("/a/b", True), ("~/m", True), ("./m", True), ("org/../x", True), ("..", True),
     ("org/name", False), ("SmolLM2-135M-Instruct", False), ("a..b", False)],
)  # fmt: skip
def test_looks_like_path(name: str, is_path: bool) -> None:
    assert looks_like_path(name) is is_path
