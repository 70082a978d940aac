"""`omlx pull ORG/NAME` against a stand-in hub on loopback, run as a real subprocess.

A subprocess because huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE once at import:
only a fresh process shows that omlx honours them as a user would set them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from omlx.cli.commands.models import human_bytes
from tests.fixtures.fake_hub import FakeHub, FakeRepo

pytestmark = pytest.mark.timeout(120)

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "max_position_embeddings": 512,
}


def _repo(num_rows: int = 16, **kwargs) -> FakeRepo:
    weights = save({"model.embed_tokens.weight": np.ones((num_rows, 64), dtype=np.float32)})
    files = {
        "config.json": json.dumps(CONFIG).encode(),
        "model.safetensors": weights,
        "tokenizer.json": b'{"version": "1.0"}',
    }
    return FakeRepo(files, **kwargs)


def _omlx(hub: FakeHub, *args: str, token: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
    env.update(HF_ENDPOINT=hub.url, COLUMNS="200", HF_HUB_DISABLE_TELEMETRY="1")
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "omlx.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@pytest.fixture
def models_dir(_isolated_omlx_home) -> Path:
    return _isolated_omlx_home / "models"


def test_pull_then_models_lists_it(models_dir):
    repo = _repo()
    with FakeHub({"org/tiny-llama": repo}) as hub:
        out = _omlx(hub, "pull", "org/tiny-llama")
        assert out.returncode == 0, out.stderr
        assert "added tiny-llama" in out.stdout
        for name, data in repo.files.items():
            assert (models_dir / "tiny-llama" / name).read_bytes() == data
        listed = _omlx(hub, "models", "--json")
    (entry,) = json.loads(listed.stdout)
    assert entry["name"] == "tiny-llama"
    assert entry["type"] == "llm"
    assert entry["num_params"] == 16 * 64
    assert entry["context_length"] == 512
    assert entry["size_bytes"] == sum(len(d) for d in repo.files.values())


def test_dry_run_lists_files_and_sizes_without_downloading(models_dir):
    repo = _repo()
    with FakeHub({"org/tiny": repo}) as hub:
        out = _omlx(hub, "pull", "org/tiny", "--dry-run")
    assert out.returncode == 0, out.stderr
    for name, data in repo.files.items():
        assert name in out.stdout
        assert human_bytes(len(data)) in out.stdout
    total = sum(len(d) for d in repo.files.values())
    assert "would download" in out.stdout and f"({total} bytes)" in out.stdout
    assert not any(r.method == "GET" and "/resolve/" in r.path for r in hub.requests)
    assert not (models_dir / "tiny" / "model.safetensors").exists()


def test_hf_token_is_sent_as_bearer(models_dir):
    with FakeHub({"org/private": _repo(token="hf_secret")}) as hub:
        denied = _omlx(hub, "pull", "org/private")
        assert denied.returncode != 0
        assert "HF_TOKEN" in denied.stderr
        ok = _omlx(hub, "pull", "org/private", token="hf_secret")
    assert ok.returncode == 0, ok.stderr
    repo_calls = [r for r in hub.requests if "org/private" in r.path]
    authed = [r for r in repo_calls if r.headers.get("authorization") == "Bearer hf_secret"]
    assert len(authed) >= 5  # revision, tree, and a HEAD + GET per file at least
    assert (models_dir / "private" / "model.safetensors").is_file()


def test_revision_is_resolved(models_dir):
    repo = _repo(refs={"v1": "f" * 40})
    with FakeHub({"org/tiny": repo}) as hub:
        ok = _omlx(hub, "pull", "org/tiny", "--revision", "v1", "--name", "tiny-v1")
        bad = _omlx(hub, "pull", "org/tiny", "--revision", "nope")
    assert ok.returncode == 0, ok.stderr
    assert any(r.path.endswith("/revision/v1") for r in hub.requests)
    assert any(f"/resolve/{'f' * 40}/config.json" in r.path for r in hub.requests)
    assert bad.returncode != 0
    assert "revision 'nope'" in bad.stderr


def test_unknown_repo_is_a_clear_error(models_dir):
    with FakeHub({}) as hub:
        out = _omlx(hub, "pull", "org/missing")
        dry = _omlx(hub, "pull", "org/missing", "--dry-run")
    assert out.returncode == 1
    assert "repository org/missing not found" in out.stderr
    assert "Traceback" not in out.stderr
    assert dry.returncode == 1
    assert "not found" in dry.stderr


def test_unreachable_hub_is_a_clear_error(models_dir):
    hub = FakeHub({})
    hub._server.server_close()  # nothing listens on its port any more
    out = _omlx(hub, "pull", "org/tiny")
    assert out.returncode == 1
    assert "cannot reach" in out.stderr
    assert "Traceback" not in out.stderr


def test_cut_transfer_resumes_with_a_range_request(models_dir):
    # huggingface_hub writes in 10 MiB chunks: cut after the first chunk reached the disk.
    chunk = 10 * 1024 * 1024
    repo = _repo(num_rows=(chunk + 2 * 1024 * 1024) // 256)
    size = len(repo.files["model.safetensors"])
    assert size > chunk + 1024 * 1024
    with FakeHub({"org/big": repo}) as hub:
        hub.cut_after["model.safetensors"] = chunk + 4096
        out = _omlx(hub, "pull", "org/big")
    assert out.returncode == 0, out.stderr
    gets = hub.gets("model.safetensors")
    assert [g.headers.get("range") for g in gets] == [None, f"bytes={chunk}-"]
    assert (models_dir / "big" / "model.safetensors").read_bytes() == repo.files[
        "model.safetensors"
    ]


def test_failed_pull_reruns_only_missing_files(models_dir):
    repo = _repo()
    with FakeHub({"org/tiny": repo}) as hub:
        hub.failing.add("model.safetensors")
        first = _omlx(hub, "pull", "org/tiny")
        assert first.returncode == 1
        assert "Traceback" not in first.stderr
        hub.failing.clear()
        second = _omlx(hub, "pull", "org/tiny")
    assert second.returncode == 0, second.stderr
    assert len(hub.gets("config.json")) == 1  # kept from the failed run
    assert (models_dir / "tiny" / "model.safetensors").read_bytes() == repo.files[
        "model.safetensors"
    ]
