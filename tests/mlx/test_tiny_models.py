"""The tiny checkpoints load through mlx_lm.load, generate varied greedy text, and chat."""

from __future__ import annotations

import hashlib
from pathlib import Path

import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache

from tests.fixtures.tiny_models import ARCHS, SLIDING_WINDOW, build_tiny_model

PROMPTS = ("The capital of France is", "def fibonacci(n):\n    return")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def _greedy(model, prompt_ids: list[int], num_tokens: int) -> list[int]:
    steps = generate_step(mx.array(prompt_ids), model, max_tokens=num_tokens)
    return [int(token) for token, _ in steps]


@pytest.mark.parametrize("arch", ARCHS)
def test_loads_and_generates_varied_greedy_tokens(tiny_model_dirs, arch):
    model, tokenizer = mlx_lm.load(str(tiny_model_dirs[arch]))
    outputs = [_greedy(model, tokenizer.encode(p), 8) for p in PROMPTS]
    for out in outputs:
        assert len(out) == 8
        assert len(set(out)) > 2, f"{arch}: degenerate greedy output {out}"
    assert outputs[0] != outputs[1]
    # Greedy decoding is deterministic: same prompt, same tokens.
    assert _greedy(model, tokenizer.encode(PROMPTS[0]), 8) == outputs[0]


def test_gemma3_has_sliding_and_global_layers(tiny_gemma3_dir):
    model, tokenizer = mlx_lm.load(str(tiny_gemma3_dir))
    caches = model.make_cache()
    assert isinstance(caches[0], RotatingKVCache)
    assert caches[0].max_size == SLIDING_WINDOW
    assert isinstance(caches[1], KVCache)
    # A prompt longer than the window exercises the rotating cache.
    long_prompt = tokenizer.encode("one two three four five six seven eight nine ten eleven")
    assert len(long_prompt) > SLIDING_WINDOW
    assert len(_greedy(model, long_prompt, 4)) == 4


def test_hybrid_has_linear_and_full_attention_layers(tiny_hybrid_dir):
    model, _ = mlx_lm.load(str(tiny_hybrid_dir))
    kinds = [type(c) for c in model.make_cache()]
    assert kinds == [ArraysCache, KVCache, ArraysCache, KVCache]
    assert [layer.is_linear for layer in model.layers] == [True, False, True, False]


def test_same_seed_same_bytes_other_seed_differs(tmp_path, tiny_llama_dir):
    def digest(folder: Path) -> str:
        return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()

    assert digest(build_tiny_model("llama", tmp_path / "same", seed=0)) == digest(tiny_llama_dir)
    assert digest(build_tiny_model("llama", tmp_path / "other", seed=1)) != digest(tiny_llama_dir)


def test_overrides_reach_the_config(tmp_path):
    folder = build_tiny_model("hybrid", tmp_path / "h", num_hidden_layers=2)
    model, _ = mlx_lm.load(str(folder))
    assert len(model.layers) == 2


def test_unknown_arch_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown tiny architecture 'mamba'"):
        build_tiny_model("mamba", tmp_path)


@pytest.mark.parametrize(
    "text",
    ["Hello, world!", "  leading spaces and\ttabs\n", "unicode: wörld 你好 🙂", "<think>x</think>"],
)
def test_tokenizer_round_trips(tiny_qwen3_dir, text):
    _, tokenizer = mlx_lm.load(str(tiny_qwen3_dir))
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_special_tokens_are_single_ids(tiny_qwen3_dir):
    _, tokenizer = mlx_lm.load(str(tiny_qwen3_dir))
    vocab = tokenizer.get_vocab()
    for token in ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>"):
        assert tokenizer.encode(token) == [vocab[token]]
    assert tokenizer.eos_token_ids == {vocab["<|im_end|>"]}
    assert tokenizer.has_thinking and tokenizer.think_start == "<think>"
    assert tokenizer.has_tool_calling and tokenizer.tool_call_start == "<tool_call>"


@pytest.mark.parametrize(
    ("kwargs", "expected_tail"),
    [
        ({}, "<|im_start|>assistant\n"),
        ({"enable_thinking": True}, "<|im_start|>assistant\n"),
        ({"enable_thinking": False}, "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    ],
)
def test_chat_template_generation_prompt(tiny_qwen3_dir, kwargs, expected_tail):
    _, tokenizer = mlx_lm.load(str(tiny_qwen3_dir))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, **kwargs
    )
    head = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    assert text == head + expected_tail


def test_chat_template_tools_and_tool_turns(tiny_qwen3_dir):
    _, tokenizer = mlx_lm.load(str(tiny_qwen3_dir))
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Use the tool.",
            "tool_calls": [call],
        },
        {"role": "tool", "content": "sunny"},
    ]
    text = tokenizer.apply_chat_template(
        messages, tools=TOOLS, add_generation_prompt=True, tokenize=False
    )
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in text
    assert (
        "<|im_start|>assistant\n<think>\nUse the tool.\n</think>\n\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
    ) in text
    assert text.endswith(
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True)
    assert tokenizer.decode(ids) == text
