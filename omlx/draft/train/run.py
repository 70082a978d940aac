"""`omlx draft train` end to end: load the target, distil its replies, train, save."""

from __future__ import annotations

import json
import platform
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from omlx.draft.capture import TargetAdapter
from omlx.draft.config import DEFAULT_DRAFT_BLOCK_SIZE
from omlx.draft.train.data import GenerationSettings, Progress, build_dataset, target_fingerprint
from omlx.draft.train.extra_data import check_extra_data, extra_train_samples, read_extra_data
from omlx.draft.train.init_from_draft import start_config, weights_digest
from omlx.draft.train.prompts import read_prompt_file, select
from omlx.draft.train.sizing import draft_config
from omlx.draft.train.trainer import RECIPE_FILE, Event, TrainConfig, Trainer, write_recipe
from omlx.draft.vocab import write_vocab
from omlx.platform.cpu_precision import compute_in_float32


@dataclass(frozen=True, slots=True)
class DraftShape:
    num_layers: int | None = None
    intermediate_size: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    block_size: int | None = None  # default: DEFAULT_DRAFT_BLOCK_SIZE
    target_layer_ids: tuple[int, ...] | None = None
    mask_token_id: int | None = None


def train_draft(
    target_path: str | Path,
    out: str | Path,
    *,
    prompts_file: str | Path | None = None,
    max_prompts: int | None = None,
    generation: GenerationSettings | None = None,
    training: TrainConfig | None = None,
    shape: DraftShape | None = None,
    data_dir: str | Path | None = None,
    extra_data: Sequence[str | Path] = (),
    resume: bool = False,
    data_only: bool = False,
    data_budget_s: float | None = None,
    on_event: Event | None = None,
    on_progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train a DFlash draft for the model folder `target_path` into `out`."""
    command_started = time.perf_counter()  # training.wall_budget_s counts from here
    from omlx.mlx_lm_compat import load
    from omlx.platform.blas_threads import process_governor

    # On a Linux CPU the omlx entry point starts OpenBLAS on one thread fewer than cores
    # (a server needs one for itself); a batch job has no such thread, so the governor
    # may use every core while the rest of the machine stays idle.
    governor = process_governor()
    if governor is not None:
        governor.start()
    generation = generation or GenerationSettings()
    training = training or TrainConfig()
    training.check()
    shape = shape or DraftShape()
    # A continued draft's shape is checked before anything slow happens.
    start_cfg = start_config(training.init_from, shape) if training.init_from else None
    out = Path(out)
    data_dir = Path(data_dir) if data_dir else out / "data"
    records = read_prompt_file(prompts_file)  # bad input fails before the model loads
    target_id = target_fingerprint(target_path)
    extra_files = [check_extra_data(p, target_id) for p in extra_data]
    model, tokenizer = load(str(target_path))
    # As `omlx serve` loads it (engine.cpu_float32 auto): on a CPU a half-precision target
    # computes in float32, several times faster, and the draft learns the states it serves.
    compute_in_float32(model, "auto", str(target_path))
    if max_prompts is not None:
        heldout = [r for r in records if r.split == "heldout"]
        keep_heldout = max(1, max_prompts // 12) if heldout else 0
        records = select(records, split="train", limit=max_prompts - keep_heldout) + select(
            heldout, limit=keep_heldout
        )
    # A seeded shuffle: data cut short by its time budget still covers every category.
    random.Random(generation.seed).shuffle(records)
    started = time.perf_counter()
    samples, data_file, cached = build_dataset(
        model,
        tokenizer,
        records,
        generation,
        cache_dir=data_dir,
        target_id=target_id,
        time_budget_s=data_budget_s,
        progress=on_progress,
        log=log,
    )
    data_s = time.perf_counter() - started
    if log:
        log(f"{'reused' if cached else 'have'} {len(samples)} samples: {data_file}")
    data = {
        "file": str(data_file),
        "cached": cached,
        "seconds": round(data_s, 2),
        "samples": len(samples),
        "complete": not data_file.name.endswith(".partial.jsonl"),
        "reply_tokens": sum(len(s.reply_ids) for s in samples),
    }
    if data_only:
        return {"out": str(out), "data": data}
    train_samples = [s for s in samples if s.split == "train"]
    extra = extra_train_samples(samples, read_extra_data(extra_files))
    train_samples += extra
    eval_samples = [s for s in samples if s.split == "heldout" and s.greedy]
    eval_on = "heldout"
    if not eval_samples:  # a user file with no held-out lines: watch the training fit
        eval_samples = [s for s in train_samples if s.greedy]
        eval_on = "train"

    draft_cfg = start_cfg or draft_config(
        model,
        num_layers=shape.num_layers,
        intermediate_size=shape.intermediate_size,
        num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads,
        block_size=shape.block_size or DEFAULT_DRAFT_BLOCK_SIZE,
        target_layer_ids=shape.target_layer_ids,
        mask_token_id=shape.mask_token_id,
        rope_from_target=training.init_from_target,
    )
    trainer = Trainer(
        model,
        draft_cfg,
        train_samples,
        eval_samples,
        training,
        out,
        on_event=on_event,
        deadline_from=command_started,
    )
    resumed = trainer.resume() if resume else False
    write_recipe(
        out,
        {
            "target": str(target_path),
            "target_fingerprint": target_id,
            "prompts": str(prompts_file) if prompts_file else "shipped",
            "max_prompts": max_prompts,
            "data_file": str(data_file),
            "extra_data": [str(p) for p in extra_files],
            "extra_train_samples": len(extra),
            "generation": asdict(generation),
            "training": asdict(training),
            "draft_config": draft_cfg.to_dict(),
            **({"init_from": _start_record(training.init_from)} if training.init_from else {}),
            "device": str(mx.default_device()),
            "target_dtype": str(TargetAdapter(model, ()).dtype),
            "machine": platform.machine(),
        },
    )
    result = trainer.run()
    vocab = None
    if trainer.vocab_ids is not None:
        write_vocab(out, trainer.vocab_ids, training.vocab_coverage)
        vocab = len(trainer.vocab_ids)
    return {
        **result,
        "draft_vocab": vocab,
        "resumed": resumed,
        "data": {**data, "eval_on": eval_on, "extra_train_samples": len(extra)},
    }


def _start_record(folder: str) -> dict[str, Any]:
    """Where a continued run started: the draft's weights by digest and its own recipe."""
    recipe = Path(folder) / RECIPE_FILE
    return {
        "folder": folder,
        "weights_sha256": weights_digest(folder),
        "recipe": json.loads(recipe.read_text()) if recipe.is_file() else None,
    }
