"""Model store: scanning model directories and the HF cache, resolving names."""

from __future__ import annotations

from pathlib import Path

import pytest

from omlx.errors import ModelNotFound
from omlx.models.store import ModelStore, default_models_dir
from omlx.models.types import ModelType
from omlx.settings import ModelSettings, hf_hub_cache
from tests.fixtures.fake_models import write_model


def _hf_snapshot(cache: Path, repo_id: str, rev: str = "a" * 40, ref: bool = True) -> Path:
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = write_model(repo / "snapshots" / rev)
    if ref:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(rev)
    return snapshot


@pytest.fixture
def store(tmp_path) -> ModelStore:
    models = tmp_path / "models"
    write_model(models / "tiny-llama")
    write_model(models / "org" / "Nested-Model")
    write_model(
        models / "mini-embed",
        {"architectures": ["BertModel"], "model_type": "bert"},
        extra_files={"modules.json": "[]"},
    )
    (models / "not-a-model").mkdir()
    (models / "broken").mkdir()
    (models / "broken" / "config.json").write_text("{}")  # no weights
    (models / ".hidden").mkdir()
    cache = tmp_path / "hub"
    _hf_snapshot(cache, "HuggingFaceTB/SmolLM2-Hub")
    return ModelStore([models], hf_cache=cache, pinned=["tiny-llama"])


def test_list_finds_dirs_nested_and_hf_cache(store):
    entries = {e.name: e for e in store.list()}
    assert sorted(entries) == [
        "HuggingFaceTB/SmolLM2-Hub",
        "mini-embed",
        "org/Nested-Model",
        "tiny-llama",
    ]
    assert entries["tiny-llama"].pinned is True
    assert entries["mini-embed"].pinned is False
    assert entries["mini-embed"].type is ModelType.EMBEDDING
    assert entries["tiny-llama"].type is ModelType.LLM
    assert entries["tiny-llama"].num_params == 136
    assert entries["HuggingFaceTB/SmolLM2-Hub"].source == "hf-cache"
    assert entries["HuggingFaceTB/SmolLM2-Hub"].path.name == "a" * 40


def test_scan_hf_cache_can_be_disabled(store):
    store.scan_hf_cache = False
    assert "HuggingFaceTB/SmolLM2-Hub" not in {e.name for e in store.list()}


def test_hf_cache_without_ref_takes_newest_snapshot(tmp_path):
    import os

    cache = tmp_path / "hub"
    old = _hf_snapshot(cache, "o/m", rev="1" * 40, ref=False)
    new = _hf_snapshot(cache, "o/m", rev="2" * 40, ref=False)
    os.utime(old, (1_000, 1_000))
    os.utime(new, (2_000, 2_000))
    (entry,) = ModelStore([tmp_path / "none"], hf_cache=cache).list()
    assert entry.path == new


def test_first_directory_wins_a_name_clash(tmp_path):
    a = write_model(tmp_path / "a" / "same")
    write_model(tmp_path / "b" / "same", {"architectures": ["BertModel"]})
    (entry,) = ModelStore([tmp_path / "a", tmp_path / "b"], scan_hf_cache=False).list()
    assert entry.path == a
    assert entry.type is ModelType.LLM


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("tiny-llama", "tiny-llama"),
        ("TINY-LLAMA", "tiny-llama"),
        ("Nested-Model", "org/Nested-Model"),
        ("smollm2-hub", "HuggingFaceTB/SmolLM2-Hub"),
        ("huggingfacetb/smollm2-hub", "HuggingFaceTB/SmolLM2-Hub"),
    ],
)
def test_resolve_by_name(store, query, expected):
    assert store.resolve(query).name == expected


def test_resolve_by_path(store, tmp_path):
    outside = write_model(tmp_path / "elsewhere" / "loose-model")
    entry = store.resolve(str(outside))
    assert entry.name == "loose-model"
    assert entry.path == outside.resolve()


def test_resolve_unknown_lists_what_exists(store):
    with pytest.raises(ModelNotFound) as info:
        store.resolve("nope")
    assert "tiny-llama" in info.value.message
    assert "org/Nested-Model" in info.value.message


def test_resolve_ambiguous_suffix(tmp_path):
    write_model(tmp_path / "m" / "a" / "x")
    write_model(tmp_path / "m" / "b" / "x")
    store = ModelStore([tmp_path / "m"], scan_hf_cache=False)
    with pytest.raises(ModelNotFound, match="ambiguous"):
        store.resolve("x")
    assert store.resolve("a/x").name == "a/x"


def test_empty_store_says_how_to_add(tmp_path):
    with pytest.raises(ModelNotFound, match="omlx pull"):
        ModelStore([tmp_path / "nothing"], hf_cache=tmp_path / "nohub").resolve("x")


def test_symlinked_model_is_listed(tmp_path):
    target = write_model(tmp_path / "real")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "linked").symlink_to(target)
    (entry,) = ModelStore([tmp_path / "models"], scan_hf_cache=False).list()
    assert entry.name == "linked"


def test_from_settings_uses_default_dir_then_extra_dirs(tmp_path):
    extra = tmp_path / "extra"
    write_model(extra / "x")
    store = ModelStore.from_settings(
        ModelSettings(dirs=[str(extra)], scan_hf_cache=False, pinned=["x"])
    )
    assert store.dirs == [default_models_dir(), extra]
    assert store.primary_dir == default_models_dir()
    assert [(e.name, e.pinned) for e in store.list()] == [("x", True)]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HF_HUB_CACHE": "/c/hub"}, "/c/hub"),
        ({"HUGGINGFACE_HUB_CACHE": "/legacy"}, "/legacy"),
        ({"HF_HOME": "/h"}, "/h/hub"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub"),
    ],
)
def test_hf_hub_cache_env(monkeypatch, env, expected):
    for k in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert hf_hub_cache() == Path(expected)
