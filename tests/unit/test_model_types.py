"""Model type detection, parameter counting and quantization labels, table-driven."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from omlx.models.types import (
    ModelType,
    NotAModelFolder,
    context_length,
    count_params,
    detect_type,
    inspect_model,
    quantization_label,
    read_safetensors_header,
)
from tests.fixtures.fake_models import write_model

ST = ["modules.json", "config_sentence_transformers.json", "1_Pooling"]

TYPE_CASES = [
    # (config, files, name, expected)
    ({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, [], "SmolLM2", "llm"),
    ({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text"}, [], "g", "llm"),
    ({"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next"}, [], "q", "llm"),
    ({"model_type": "mistral"}, [], "no-architectures", "llm"),
    (
        {
            "architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3",
            "vision_config": {},
        },
        [],
        "gemma-3-4b-it",
        "vlm",
    ),
    (
        {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl"},
        [],
        "Qwen2-VL-2B",
        "vlm",
    ),
    ({"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava"}, [], "l", "vlm"),
    (
        {"architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3"},
        [],
        "SmolVLM",
        "vlm",
    ),
    (
        {"architectures": ["DeepseekOCRForCausalLM"], "model_type": "deepseek_vl_v2"},
        [],
        "DeepSeek-OCR",
        "ocr",
    ),
    ({"architectures": ["DotsOCRForCausalLM"], "model_type": "dots_ocr"}, [], "dots", "ocr"),
    (
        {"architectures": ["PaddleOCRVLForConditionalGeneration"], "model_type": "paddleocr_vl"},
        [],
        "PaddleOCR-VL",
        "ocr",
    ),
    (
        {"architectures": ["GotOcr2ForConditionalGeneration"], "model_type": "got_ocr2"},
        [],
        "GOT",
        "ocr",
    ),
    # olmOCR is a Qwen2.5-VL fine-tune: only its name says OCR.
    (
        {
            "architectures": ["Qwen2_5_VLForConditionalGeneration"],
            "model_type": "qwen2_5_vl",
            "vision_config": {},
        },
        [],
        "allenai/olmOCR-7B-0725",
        "ocr",
    ),
    ({"architectures": ["BertModel"], "model_type": "bert"}, ST, "all-MiniLM-L6-v2", "embedding"),
    ({"architectures": ["BertModel"], "model_type": "bert"}, [], "bert", "embedding"),
    ({"architectures": ["XLMRobertaModel"], "model_type": "xlm-roberta"}, [], "e5", "embedding"),
    ({"model_type": "nomic_bert"}, [], "nomic", "embedding"),
    # Qwen3-Embedding ships a causal-LM architecture but sentence-transformers files.
    (
        {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"},
        ST[:1],
        "Qwen3-Embedding-0.6B",
        "embedding",
    ),
    (
        {"architectures": ["XLMRobertaForSequenceClassification"], "model_type": "xlm-roberta"},
        [],
        "bge-reranker-v2-m3",
        "reranker",
    ),
    (
        {"architectures": ["BertForSequenceClassification"], "model_type": "bert"},
        [],
        "ms-marco-MiniLM",
        "reranker",
    ),
    (
        {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"},
        [],
        "Qwen/Qwen3-Reranker-0.6B",
        "reranker",
    ),
    # A causal LM named like a reranker is a reranker; the same arch otherwise is an LLM.
    ({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}, [], "Qwen3-0.6B", "llm"),
]


@pytest.mark.parametrize(("config", "files", "name", "expected"), TYPE_CASES)
def test_detect_type(config, files, name, expected):
    assert detect_type(config, files, name) == ModelType(expected)


def _header(**tensors):
    return {k: {"dtype": d, "shape": s, "data_offsets": [0, 0]} for k, (d, s) in tensors.items()}


PARAM_CASES = [
    # (headers, config, expected params)
    ([_header(w=("F32", [16, 8]), b=("F32", [8]))], {}, 136),
    ([_header(a=("BF16", [4, 4])), _header(b=("BF16", [2, 3]))], {}, 22),
    # 4-bit: a [64, 8] uint32 weight packs 64 x 64 values; scales/biases are overhead.
    (
        [
            _header(
                **{
                    "l.weight": ("U32", [64, 8]),
                    "l.scales": ("F16", [64, 2]),
                    "l.biases": ("F16", [64, 2]),
                    "n.weight": ("F16", [64]),
                }
            )
        ],
        {"quantization": {"bits": 4, "group_size": 32}},
        64 * 64 + 64,
    ),
    (
        [
            _header(
                **{
                    "l.weight": ("U32", [64, 16]),
                    "l.scales": ("F16", [64, 8]),
                    "l.biases": ("F16", [64, 8]),
                }
            )
        ],
        {"quantization": {"bits": 8, "group_size": 64}},
        64 * 64,
    ),
    # Per-layer override: this layer is 8-bit although the default is 4.
    (
        [
            _header(
                **{
                    "a.weight": ("U32", [8, 4]),
                    "a.scales": ("F16", [8, 1]),
                    "a.biases": ("F16", [8, 1]),
                    "b.weight": ("U32", [8, 4]),
                    "b.scales": ("F16", [8, 1]),
                    "b.biases": ("F16", [8, 1]),
                }
            )
        ],
        {"quantization": {"bits": 4, "group_size": 32, "b": {"bits": 8, "group_size": 32}}},
        8 * 32 + 8 * 16,
    ),
    # A genuine uint32 tensor in an unquantized model is counted as is.
    ([_header(ids=("U32", [10]))], {}, 10),
]


@pytest.mark.parametrize(("headers", "config", "expected"), PARAM_CASES)
def test_count_params(headers, config, expected):
    assert count_params(headers, config)[0] == expected


QUANT_CASES = [
    ({"quantization": {"bits": 4, "group_size": 32}}, {"U32": 10}, "4-bit g32"),
    ({"quantization_config": {"bits": 8, "group_size": 64}}, {}, "8-bit g64"),
    ({"quantization": {"bits": 4, "group_size": 32, "mode": "mxfp4"}}, {}, "4-bit g32 mxfp4"),
    ({}, {"F32": 100, "BF16": 10}, "float32"),
    ({}, {"BF16": 100, "F32": 10}, "bfloat16"),
    ({"torch_dtype": "float16"}, {}, "float16"),
    ({}, {}, None),
]


@pytest.mark.parametrize(("config", "bytes_by_dtype", "expected"), QUANT_CASES)
def test_quantization_label(config, bytes_by_dtype, expected):
    assert quantization_label(config, bytes_by_dtype) == expected


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"max_position_embeddings": 8192}, 8192),
        ({"n_positions": 1024}, 1024),
        ({"text_config": {"max_position_embeddings": 32768}}, 32768),
        ({"max_position_embeddings": True}, None),
        ({}, None),
    ],
)
def test_context_length(config, expected):
    assert context_length(config) == expected


def test_inspect_model_reads_folder(tmp_path):
    path = write_model(tmp_path / "tiny")
    info = inspect_model(path)
    assert info.type is ModelType.LLM
    assert info.architecture == "LlamaForCausalLM"
    assert info.num_params == 16 * 8 + 8
    assert info.quantization == "float32"
    assert info.context_length == 2048
    assert info.size_bytes == sum(p.stat().st_size for p in path.iterdir())


def test_inspect_model_quantized_folder(tmp_path):
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "quantization": {"bits": 4, "group_size": 32},
    }
    tensors = {
        "l.weight": np.zeros((8, 4), dtype=np.uint32),
        "l.scales": np.zeros((8, 1), dtype=np.float16),
        "l.biases": np.zeros((8, 1), dtype=np.float16),
    }
    info = inspect_model(write_model(tmp_path / "q", config, tensors))
    assert info.num_params == 8 * 32
    assert info.quantization == "4-bit g32"


def test_sentence_transformers_folder_is_embedding(tmp_path):
    config = {"architectures": ["BertModel"], "model_type": "bert"}
    path = write_model(tmp_path / "mini", config, extra_files={"1_Pooling/config.json": "{}"})
    assert inspect_model(path).type is ModelType.EMBEDDING


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: None, "no config.json"),
        (lambda p: (p / "config.json").write_text("{not json"), "not readable JSON"),
        (lambda p: (p / "config.json").write_text("[1]"), "not a JSON object"),
        (lambda p: (p / "config.json").write_text("{}"), r"no \*\.safetensors"),
    ],
)
def test_inspect_model_rejects_bad_folders(tmp_path, setup, message):
    setup(tmp_path)
    with pytest.raises(NotAModelFolder, match=message):
        inspect_model(tmp_path)


def test_bad_safetensors_header(tmp_path):
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(struct.pack("<Q", 5) + b"nope!")
    with pytest.raises(NotAModelFolder, match="bad safetensors header"):
        read_safetensors_header(bad)
    bad.write_bytes(b"abc")
    with pytest.raises(NotAModelFolder, match="truncated"):
        read_safetensors_header(bad)
    good = tmp_path / "y.safetensors"
    good.write_bytes(struct.pack("<Q", 2) + b"{}")
    assert read_safetensors_header(good) == {}


def test_model_types_imports_without_mlx():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['mlx'] = None; "
        "import omlx.models.types, omlx.models.store, omlx.models.hub; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr
