"""`omlx draft train`: make a DFlash draft for a model by self-distillation."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from omlx.cli.output import console, err_console, fail
from omlx.errors import OmlxError

app = typer.Typer(help="DFlash drafts: train one for the model you run.", no_args_is_help=True)


def _target_path(model: str | None) -> Path:
    """A model folder as given, else a store name; the default model when none is given."""
    from omlx.cli.commands.models import open_store
    from omlx.models.default_model import DEFAULT_MODEL_NAME, ensure_default_model

    name = model or DEFAULT_MODEL_NAME
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    store = open_store()
    try:
        return Path(store.resolve(name).path)
    except OmlxError:
        if name != DEFAULT_MODEL_NAME:
            raise
    return ensure_default_model(store.primary_dir)


def _layer_ids(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        fail(f"--target-layers takes comma-separated layer numbers, not {text!r}")


@app.command("train")
def train(
    target: str | None = typer.Option(
        None, "--target", help="Target model: a folder or a store name (default: SmolLM2)."
    ),
    out: Path = typer.Option(..., "--out", help="Folder for the draft (config + weights)."),
    prompts: Path | None = typer.Option(
        None,
        "--prompts",
        help='JSON lines of {"prompt": ...} or {"messages": [...]} '
        "(default: the shipped chat/code/maths/instructions set); `more`: 7,200 more "
        "training prompts of the same kinds, to write data for --extra-data.",
    ),
    max_prompts: int | None = typer.Option(None, "--max-prompts", min=2),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", min=1),
    sampled: int = typer.Option(0, "--sampled", min=0, help="Extra sampled replies per prompt."),
    sample_temperature: float = typer.Option(0.7, "--sample-temperature", min=0.0),
    gen_batch: int = typer.Option(64, "--gen-batch", min=1, help="Streams while generating."),
    gen_join: int = typer.Option(
        1,
        "--gen-join",
        min=1,
        help="New prompts join the generating batch once this many rows are free, in one "
        "prefill (1: each freed row refilled at once; larger suits a GPU).",
    ),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Default: OUT/data."),
    data_budget: float | None = typer.Option(
        None,
        "--data-budget",
        min=0.0,
        help="Seconds of generation (0: none); train on what is done, finish it next run.",
    ),
    layers: int | None = typer.Option(None, "--layers", min=1, help="Draft layers."),
    intermediate_size: int | None = typer.Option(
        None, "--intermediate-size", min=1, help="Draft MLP size (width is the target's)."
    ),
    heads: int | None = typer.Option(None, "--heads", min=1),
    block_size: int | None = typer.Option(
        None, "--block-size", min=2, help="Tokens per draft block (default 16)."
    ),
    target_layers: str | None = typer.Option(
        None, "--target-layers", help="Captured target layers, e.g. 1,9,17 (default: spread)."
    ),
    steps: int | None = typer.Option(2000, "--steps", min=1),
    time_budget: float | None = typer.Option(
        None, "--time-budget", min=1.0, help="Seconds of training; the schedule follows it."
    ),
    wall_budget: float | None = typer.Option(
        None,
        "--wall-budget",
        min=1.0,
        help="Hard stop: seconds from the command's start (loading, data, evaluations "
        "included); past it training ends early, then evaluates and saves as usual.",
    ),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Sequences per step."),
    anchors: int = typer.Option(32, "--anchors", min=1, help="Draft blocks per sequence."),
    lr: float = typer.Option(6e-4, "--lr", min=0.0),
    warmup: float = typer.Option(0.04, "--warmup", min=0.0, max=0.9),
    weight_decay: float = typer.Option(0.01, "--weight-decay", min=0.0),
    dtype: str = typer.Option("float32", "--dtype", help="float32 or bfloat16 training."),
    save_dtype: str = typer.Option("bfloat16", "--save-dtype"),
    shard_mb: float = typer.Option(0.0, "--shard-mb", min=0.0, help="Split weight files."),
    eval_every: int = typer.Option(100, "--eval-every", min=1),
    eval_sequences: int = typer.Option(
        64, "--eval-sequences", min=1, help="Held-out replies walked at each evaluation."
    ),
    vocab_coverage: float = typer.Option(
        0.99,
        "--vocab-coverage",
        min=0.01,
        max=1.0,
        help="Draft vocabulary: the tokens making this share of the replies (1: all).",
    ),
    vocab_loss: bool = typer.Option(
        True,
        "--vocab-loss/--full-vocab-loss",
        help="The loss's softmax over the draft vocabulary only (what drafting chooses "
        "among; cheaper), not the target's whole vocabulary.",
    ),
    keep_best: bool = typer.Option(
        True, "--keep-best/--keep-last", help="Save the weights of the best held-out τ."
    ),
    labels: str = typer.Option(
        "reply",
        "--labels",
        help="reply: the replies' own tokens; greedy: the target's argmax, so sampled "
        "replies add contexts, not their sampled choices; soft: greedy, half of each "
        "label's target the target's distribution over its top 8 tokens.",
    ),
    cache_context: bool = typer.Option(
        False,
        "--cache-context",
        help="Keep each sequence's target states after its first epoch (later epochs "
        "skip the target's forward; memory: tokens x hidden x captured layers x 4 bytes).",
    ),
    cache_dtype: str = typer.Option(
        "float32",
        "--cache-dtype",
        help="dtype of the cached target states: bfloat16 halves their memory.",
    ),
    init_from_target: bool = typer.Option(
        False,
        "--init-from-target",
        help="Start the draft's layers from the target's last layers, not random weights.",
    ),
    init_from: Path | None = typer.Option(
        None,
        "--init-from",
        help="Continue a trained draft (its folder): its shape and weights, a fresh "
        "optimizer and schedule; e.g. on more data or in another session.",
    ),
    extra_data: list[Path] = typer.Option(
        [],
        "--extra-data",
        help="Also train on this data file of the same target (repeatable; a partial "
        "one's finished replies too): replies another run wrote, e.g. with other "
        "generation settings or --prompts more; its training replies only.",
    ),
    checkpoint_every: int = typer.Option(500, "--checkpoint-every", min=0),
    seed: int = typer.Option(0, "--seed"),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/checkpoint."),
    data_only: bool = typer.Option(
        False, "--data-only", help="Only write (or find) the distilled data, then stop."
    ),
    as_json: bool = typer.Option(False, "--json", help="JSON lines for scripts."),
) -> None:
    """Train a DFlash draft on the target's own replies; OUT loads with --draft OUT."""
    from omlx.draft.train.data import GenerationSettings
    from omlx.draft.train.run import DraftShape, train_draft
    from omlx.draft.train.trainer import TrainConfig

    def emit(record: dict) -> None:
        if as_json:
            print(json.dumps(record), flush=True)
        elif record["kind"] == "eval" and "eval_tau" in record:
            console.print(
                f"step {record['step']:>6}  held-out loss {record['eval_loss']:.3f}  "
                f"τ {record['eval_tau']:.2f}"
            )
        elif record["kind"] == "train":
            console.print(
                f"step {record['step']:>6}  loss {record['loss']:.3f}  τ {record['tau']:.2f}  "
                f"lr {record['lr']:.2e}  {record['elapsed_s']:.0f}s",
                style="dim",
            )

    progress_bar = None
    if not as_json:
        from rich.progress import Progress

        progress_bar = Progress(console=err_console, transient=True)
    task = None

    def on_progress(done: int, total: int) -> None:
        nonlocal task
        if progress_bar is None:
            if done == total or done % 64 == 0:
                print(json.dumps({"kind": "data", "done": done, "total": total}), flush=True)
            return
        if task is None:
            progress_bar.start()
            task = progress_bar.add_task("target writes replies", total=total)
        progress_bar.update(task, completed=done)
        if done >= total:
            progress_bar.stop()

    try:
        result = train_draft(
            _target_path(target),
            out,
            prompts_file=prompts,
            max_prompts=max_prompts,
            generation=GenerationSettings(
                max_new_tokens=max_new_tokens,
                num_sampled=sampled,
                temperature=sample_temperature,
                batch_size=gen_batch,
                join_rows=gen_join,
                seed=seed,
            ),
            training=TrainConfig(
                steps=steps,
                time_budget_s=time_budget,
                wall_budget_s=wall_budget,
                batch_size=batch_size,
                anchors_per_seq=anchors,
                lr=lr,
                warmup=warmup,
                weight_decay=weight_decay,
                dtype=dtype,
                save_dtype=save_dtype,
                shard_mb=shard_mb,
                eval_every=eval_every,
                eval_sequences=eval_sequences,
                keep_best=keep_best,
                vocab_coverage=vocab_coverage,
                vocab_loss=vocab_loss,
                labels=labels,
                cache_context=cache_context,
                cache_dtype=cache_dtype,
                init_from_target=init_from_target,
                init_from=str(init_from) if init_from else None,
                checkpoint_every=checkpoint_every,
                seed=seed,
            ),
            shape=DraftShape(
                num_layers=layers,
                intermediate_size=intermediate_size,
                num_heads=heads,
                block_size=block_size,
                target_layer_ids=_layer_ids(target_layers),
            ),
            data_dir=data_dir,
            extra_data=extra_data,
            resume=resume,
            data_only=data_only,
            data_budget_s=data_budget,
            on_event=emit,
            on_progress=on_progress,
            log=None if as_json else lambda msg: err_console.print(msg, style="dim"),
        )
    except OmlxError as e:
        fail(e.message)
    finally:
        if progress_bar is not None and task is not None:
            progress_bar.stop()
    if as_json:
        print(json.dumps({"kind": "result", **result}), flush=True)
        return
    if data_only:
        data = result["data"]
        console.print(
            f"{data['samples']} samples, {data['reply_tokens']} reply tokens: {data['file']}"
        )
        return
    saved = result["saved"]
    console.print(
        f"draft written to {result['out']}: {result['steps']} steps in {result['train_s']:.0f}s, "
        f"weights of step {saved['step']}: held-out τ {saved.get('eval_tau', 0):.2f} "
        f"(loss {saved.get('eval_loss', 0):.3f})"
    )
    console.print(f"use it: omlx serve --dflash --draft {result['out']}")
