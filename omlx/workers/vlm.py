"""Vision-language and OCR models through mlx-vlm, on the model's worker thread (MLX).

One request at a time per model: mlx-vlm's `stream_generate` serves a single prompt
(its batch API does not stream per request), so concurrent requests queue on the
worker. Events go back through `emit`, which the pool binds to the request's queue.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlx.utils import tree_flatten

from omlx.engine.api import (
    ChatMessage,
    Done,
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    Started,
    Token,
)
from omlx.errors import ImportFailed, InvalidRequest
from omlx.models.generation_config import sampling_defaults
from omlx.platform.cpu_precision import compute_in_float32
from omlx.workers.extras import VLM, require
from omlx.workers.images import IMAGE_PART_TYPES, LoadedImage

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 1024


@dataclass(frozen=True, slots=True)
class OcrPreset:
    """The instruction an OCR model was trained on, and where its transcript ends."""

    prompt: str
    stop: tuple[str, ...] = ()


# model_type -> preset; models not listed get DEFAULT_OCR (a plain instruction).
OCR_PRESETS: dict[str, OcrPreset] = {
    "deepseekocr": OcrPreset(
        "<|grounding|>Convert the document to markdown.", ("<｜end▁of▁sentence｜>",)
    ),
    "dots_ocr": OcrPreset(
        "Extract the text content from this image.", ("<|endofassistant|>", "<|im_end|>")
    ),
    "got_ocr2": OcrPreset("OCR: ", ("<|im_end|>",)),
    "paddleocr_vl": OcrPreset("OCR:", ("</s>",)),
}
DEFAULT_OCR = OcrPreset(
    "Transcribe all text in this image exactly, in reading order. Output only the text.",
    ("<|im_end|>", "<|endoftext|>", "</s>"),
)


@dataclass(slots=True)
class VlmModel:
    name: str
    model: Any
    processor: Any
    model_type: str
    is_ocr: bool
    weight_bytes: int
    eos_texts: tuple[str, ...] = field(default_factory=tuple)
    # generation_config.json's sampling keys, for requests that set none
    sampling_defaults: dict[str, float | int] = field(default_factory=dict)
    # ids the tokenizer has text for (text_token_limit); None: every id the model has
    text_tokens: int | None = None


def load_vlm(name: str, path: Path, *, is_ocr: bool = False, cpu_float32: str = "off") -> VlmModel:
    require(VLM, name)
    from mlx_vlm import load

    try:
        model, processor = load(str(path))
    except Exception as e:  # mlx-vlm raises many types for unsupported checkpoints
        raise ImportFailed(f"cannot load vision model {name!r} from {path}: {e}") from e
    compute_in_float32(model, cpu_float32, name)
    config = json.loads((path / "config.json").read_text())
    weight_bytes = sum(v.nbytes for _, v in tree_flatten(model.parameters()))
    log.info("loaded %s model %s (%.1f MB)", "OCR" if is_ocr else "VLM", name, weight_bytes / 1e6)
    model_type = str(config.get("model_type", ""))
    return VlmModel(
        name, model, processor, model_type, is_ocr, weight_bytes,
        sampling_defaults=sampling_defaults(path), text_tokens=text_token_limit(processor),
    )  # fmt: skip


def load_ocr(name: str, path: Path, *, cpu_float32: str = "off") -> VlmModel:
    return load_vlm(name, path, is_ocr=True, cpu_float32=cpu_float32)


def ocr_preset(model_type: str) -> OcrPreset:
    return OCR_PRESETS.get(model_type, DEFAULT_OCR)


def template_messages(
    messages: list[ChatMessage], preset: OcrPreset | None
) -> list[dict[str, Any]]:
    """Chat messages for the processor's template: image parts become `{"type": "image"}`.

    OCR models get their preset instruction when the user sent only images.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        if not isinstance(m.content, list):
            out.append({"role": m.role, "content": m.content or ""})
            continue
        parts: list[dict[str, Any]] = []
        for part in m.content:
            kind = part.get("type")
            if kind in IMAGE_PART_TYPES:
                parts.append({"type": "image"})
            elif kind in ("text", "input_text"):
                parts.append({"type": "text", "text": str(part.get("text", ""))})
        has_text = any(p["type"] == "text" and p["text"].strip() for p in parts)
        if preset is not None and m.role == "user" and not has_text:
            parts.append({"type": "text", "text": preset.prompt})
        out.append({"role": m.role, "content": parts})
    return out


def render_prompt(vm: VlmModel, request: GenerationRequest, preset: OcrPreset | None) -> str:
    if request.messages is None:
        if request.prompt is None:
            raise InvalidRequest(
                "vision models take chat messages or a text prompt", param="messages"
            )
        return request.prompt
    messages = template_messages(request.messages, preset)
    tokenizer = getattr(vm.processor, "tokenizer", vm.processor)
    target = vm.processor if getattr(vm.processor, "chat_template", None) else tokenizer
    return target.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def text_token_limit(processor: Any) -> int | None:
    """How many ids the tokenizer has text for (mlx-vlm's detokenizer maps exactly
    these); None where it cannot say."""
    tokenizer = getattr(processor, "tokenizer", processor)
    vocab = getattr(tokenizer, "vocab", None)
    return len(vocab) if vocab else None


def only_tokens_below(limit: int) -> Callable[[Any, Any], Any]:
    """A logits processor that never lets an id >= limit be sampled: a vocabulary padded
    past the tokenizer (Qwen2-VL's is) has ids without text, on which mlx-vlm's
    detokenizer fails mid-stream."""
    import mlx.core as mx

    keep: dict[int, Any] = {}  # vocabulary size -> mask, built once

    def process(tokens: Any, logits: Any) -> Any:
        n = logits.shape[-1]
        if n <= limit:
            return logits
        if n not in keep:
            keep[n] = mx.arange(n) < limit
        return mx.where(keep[n], logits, mx.array(-mx.inf, dtype=logits.dtype))

    return process


def generate_vlm(
    vm: VlmModel,
    request: GenerationRequest,
    images: list[LoadedImage],
    emit: Callable[[GenerationEvent], None],
    *,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
) -> None:
    """Stream one request: Started, Tokens (stop strings applied), Done."""
    from mlx_vlm.generate import stream_generate

    preset = ocr_preset(vm.model_type) if vm.is_ocr else None
    prompt = render_prompt(vm, request, preset)
    stops = [*request.stop, *(preset.stop if preset else ())]
    sampling = request.sampling.with_defaults(vm.sampling_defaults)
    kwargs: dict[str, Any] = {
        "max_tokens": request.max_tokens or default_max_tokens,
        "temperature": 0.0 if sampling.is_greedy else sampling.temperature,
        "top_p": sampling.top_p,
    }
    if vm.text_tokens is not None:
        kwargs["logits_processors"] = [only_tokens_below(vm.text_tokens)]
    pil_images = [im.to_pil() for im in images] or None
    rid = request.request_id
    text, num_tokens, prompt_tokens, started = "", 0, 0, False
    finish, stop_sequence = FinishReason.LENGTH, None
    for result in stream_generate(vm.model, vm.processor, prompt, image=pil_images, **kwargs):
        if not started:
            prompt_tokens = int(getattr(result, "prompt_tokens", 0))
            emit(Started(rid, prompt_tokens))
            started = True
        # mlx-vlm's last result repeats the count with finish_reason set: trust its counter
        num_tokens = int(getattr(result, "generation_tokens", num_tokens + 1))
        piece = result.text
        hit = next((s for s in stops if s and s in text + piece), None)
        if hit is not None:  # emit up to the stop string, then finish
            piece = (text + piece)[: (text + piece).index(hit)][len(text) :]
            finish, stop_sequence = FinishReason.STOP, hit
        text += piece
        if piece:
            emit(Token(rid, piece, [int(result.token)]))
        if hit is not None:
            break
        if getattr(result, "finish_reason", None) == "stop":
            finish = FinishReason.STOP
    if not started:
        emit(Started(rid, prompt_tokens))
    emit(Done(rid, finish, prompt_tokens, num_tokens, stop_sequence=stop_sequence))
