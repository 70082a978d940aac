"""engine.cpu_float32 reaches every worker loader: a bfloat16 embedding model, reranker
and VLM are computed in float32 on a CPU, and the pool accounts for what they then hold."""

from __future__ import annotations

import asyncio
import base64
import io
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from PIL import Image

from omlx.engine.api import ChatMessage
from omlx.pool.pool import LocalModelPool
from omlx.settings import EngineSettings, Settings
from omlx.workers.embeddings import embed, load_embedding_model
from omlx.workers.rerank import load_reranker, rerank
from omlx.workers.vlm import load_vlm
from tests.fixtures.tiny_vlm import build_tiny_qwen2_vl
from tests.mlx.engine.engine_helpers import collect, request

pytestmark = pytest.mark.timeout(180)


def _bf16_copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    for f in dest.glob("*.safetensors"):
        weights = mx.load(str(f))
        cast = {
            k: v.astype(mx.bfloat16) if v.dtype in (mx.float32, mx.float16) else v
            for k, v in weights.items()
        }
        mx.save_safetensors(str(f), cast, metadata={"format": "mlx"})
    return dest


def _float_dtypes(model) -> set[mx.Dtype]:
    return {
        v.dtype for _, v in tree_flatten(model.parameters()) if mx.issubdtype(v.dtype, mx.floating)
    }


def _weights_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


@pytest.fixture(scope="module")
def bf16_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vlm-bf16")
    return _bf16_copy(build_tiny_qwen2_vl(root / "f32"), root / "bf16")


def test_a_bfloat16_embedding_model(tiny_bert_dirs: list[Path], tmp_path: Path) -> None:
    folder = _bf16_copy(tiny_bert_dirs[0], tmp_path / "bert")
    kept = load_embedding_model("e", folder, cpu_float32="off")
    cast = load_embedding_model("e", folder, cpu_float32="auto")
    assert _float_dtypes(kept.model) == {mx.bfloat16}
    assert _float_dtypes(cast.model) == {mx.float32}
    assert cast.weight_bytes > 1.9 * kept.weight_bytes
    texts = ["a cat on a mat", "stock prices fell"]
    a, _, _ = embed(cast, texts)
    b, _, _ = embed(kept, texts)
    cosine = (np.array(a) * np.array(b)).sum(axis=1)  # both are normalised
    assert (cosine > 0.99).all(), cosine


def test_a_bfloat16_cross_encoder(tiny_cross_encoder_dir: Path, tmp_path: Path) -> None:
    folder = _bf16_copy(tiny_cross_encoder_dir, tmp_path / "ce")
    cast = load_reranker("ce", folder, cpu_float32="on")
    assert _float_dtypes(cast.model) == {mx.float32}
    scores, _ = rerank(cast, "pets", ["cats and dogs", "tax law"], None)
    kept_scores, _ = rerank(load_reranker("ce", folder), "pets", ["cats and dogs", "tax law"], None)
    assert scores == pytest.approx(kept_scores, abs=0.02)


def test_a_bfloat16_vlm_loads_in_float32(bf16_vlm: Path) -> None:
    assert _float_dtypes(load_vlm("v", bf16_vlm).model) == {mx.bfloat16}
    assert _float_dtypes(load_vlm("v", bf16_vlm, cpu_float32="auto").model) == {mx.float32}


def _png() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), "red").save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize(("setting", "factor"), [("auto", 2), ("off", 1)])
def test_the_pool_serves_a_bfloat16_vlm_as_set(bf16_vlm: Path, setting: str, factor: int) -> None:
    settings = Settings(engine=EngineSettings(cpu_float32=setting))
    pool = LocalModelPool(settings, models={"vlm": bf16_vlm})
    parts = [
        {"type": "text", "text": "What colour?"},
        {"type": "image_url", "image_url": {"url": _png()}},
    ]

    async def run():
        try:
            result = await collect(
                pool, request(model="vlm", messages=[ChatMessage("user", parts)], max_tokens=4)
            )
            [status] = [m for m in pool.status().data if m.id == "vlm"]
            return result, status
        finally:
            await pool.close(grace_s=0)

    result, status = asyncio.run(run())
    assert result.events  # the image request was answered
    held = status.memory_bytes / _weights_bytes(bf16_vlm)
    assert factor - 0.1 < held < factor + 0.1, held


def test_the_estimate_before_a_load_counts_the_cast(bf16_vlm: Path, tmp_path: Path) -> None:
    from omlx.models.types import weight_files
    from omlx.pool.memory_budget import LOAD_OVERHEAD, estimate_model_bytes
    from omlx.pool.weight_headers import half_precision_bytes

    files = weight_files(bf16_vlm)
    arrays = {k: v for f in files if f.suffix == ".safetensors" for k, v in mx.load(str(f)).items()}
    half = sum(v.nbytes for v in arrays.values() if v.dtype in (mx.bfloat16, mx.float16))
    assert half and half_precision_bytes(files) == half  # read from the headers alone
    plain = estimate_model_bytes(bf16_vlm)
    assert estimate_model_bytes(bf16_vlm, cpu_float32="off") == plain
    assert estimate_model_bytes(bf16_vlm, cpu_float32="auto") == int(
        (_weights_bytes(bf16_vlm) + half) * LOAD_OVERHEAD
    )
    # A file that is not safetensors inside is left to the loader to refuse.
    broken = tmp_path / "broken"
    shutil.copytree(bf16_vlm, broken)
    first, *_ = sorted(broken.glob("*.safetensors"))
    for junk in (b"\x00" * 4, b"\xff" * 64, b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all"):
        first.write_bytes(junk)
        assert estimate_model_bytes(broken, cpu_float32="on") > 0
