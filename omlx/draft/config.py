"""DFlash draft checkpoint config: parsed from config.json, checked against a target."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omlx.errors import DraftMismatch, InvalidRequest

DEFAULT_DRAFT_BLOCK_SIZE = 16
# On a CPU a verify costs more the wider it is (SmolLM2, float32, 2 cores: 77 ms for one
# token, 92 for 4, 150 for 16), so a draft of τ ≈ 2 decodes fastest there in blocks of 4
# (1.30x plain, against 1.17x with 3 and 1.21x with 5, one run: benchmarks/results/
# dflash_blocks_cpu.jsonl); a GPU verifies 16 tokens for about the cost of one.
CPU_DRAFT_BLOCK_SIZE = 4


def serving_block_size(trained: int, *, gpu: bool) -> int:
    """The block a draft decodes with when none is set: the one it was trained with on a
    GPU, at most CPU_DRAFT_BLOCK_SIZE on a CPU."""
    return trained if gpu else min(trained, CPU_DRAFT_BLOCK_SIZE)


@dataclass(frozen=True, slots=True)
class DFlashConfig:
    """What a published DFlash draft's config.json says (Qwen3-style decoder layers)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_target_layers: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    block_size: int = DEFAULT_DRAFT_BLOCK_SIZE
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 40960
    attention_bias: bool = False
    quantization: dict[str, Any] | None = field(default=None, compare=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> DFlashConfig:
        dflash = raw.get("dflash_config") or {}
        try:
            num_heads = int(raw["num_attention_heads"])
            hidden = int(raw["hidden_size"])
            rope = raw.get("rope_parameters") or {}
            return cls(
                hidden_size=hidden,
                num_hidden_layers=int(raw["num_hidden_layers"]),
                num_attention_heads=num_heads,
                num_key_value_heads=int(raw.get("num_key_value_heads") or num_heads),
                head_dim=int(raw.get("head_dim") or hidden // num_heads),
                intermediate_size=int(raw["intermediate_size"]),
                vocab_size=int(raw["vocab_size"]),
                num_target_layers=int(raw["num_target_layers"]),
                target_layer_ids=tuple(int(i) for i in dflash["target_layer_ids"]),
                mask_token_id=int(dflash["mask_token_id"]),
                block_size=int(
                    raw.get("block_size") or dflash.get("block_size") or DEFAULT_DRAFT_BLOCK_SIZE
                ),
                rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
                rope_theta=float(raw.get("rope_theta") or rope.get("rope_theta") or 1e6),
                rope_scaling=raw.get("rope_scaling"),
                max_position_embeddings=int(raw.get("max_position_embeddings", 40960)),
                attention_bias=bool(raw.get("attention_bias", False)),
                quantization=raw.get("quantization"),
            )
        except KeyError as exc:
            raise InvalidRequest(f"DFlash draft config lacks {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise InvalidRequest(f"DFlash draft config is malformed: {exc}") from exc

    @classmethod
    def load(cls, path: str | Path) -> DFlashConfig:
        config_path = Path(path) / "config.json"
        if not config_path.is_file():
            raise InvalidRequest(f"no DFlash draft config at {config_path}")
        try:
            raw = json.loads(config_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidRequest(f"cannot read {config_path}: {exc}") from exc
        if "dflash_config" not in raw:
            raise InvalidRequest(f"{config_path} is not a DFlash draft (no dflash_config)")
        return cls.from_dict(raw)

    def to_dict(self) -> dict[str, Any]:
        """config.json in the published layout (what `random_init` writes)."""
        return {
            "architectures": ["DFlashDraftModel"],
            "model_type": "qwen3",
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "attention_bias": self.attention_bias,
            "block_size": self.block_size,
            "num_target_layers": self.num_target_layers,
            "dflash_config": {
                "target_layer_ids": list(self.target_layer_ids),
                "mask_token_id": self.mask_token_id,
            },
        }

    def check_target(self, *, hidden_size: int, vocab_size: int, num_layers: int) -> None:
        """Raise DraftMismatch unless this draft can run on a target of these sizes."""
        problems = []
        if hidden_size != self.hidden_size:
            problems.append(f"hidden size {self.hidden_size} != target's {hidden_size}")
        if vocab_size != self.vocab_size:
            problems.append(f"vocabulary {self.vocab_size} != target's {vocab_size}")
        if not 0 <= self.mask_token_id < vocab_size:
            problems.append(f"mask token {self.mask_token_id} outside the vocabulary")
        bad_ids = [i for i in self.target_layer_ids if not 0 <= i < num_layers]
        if bad_ids:
            problems.append(f"target layer ids {bad_ids} outside 0..{num_layers - 1}")
        if not self.target_layer_ids:
            problems.append("no target layer ids")
        if self.num_target_layers != num_layers:
            problems.append(
                f"trained for {self.num_target_layers} target layers, target has {num_layers}"
            )
        if problems:
            raise DraftMismatch("DFlash draft does not fit the target: " + "; ".join(problems))
