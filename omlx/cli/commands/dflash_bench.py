"""`omlx dflash-bench`: plain decoding against DFlash speculative decoding."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from omlx.cli.output import console, fail
from omlx.errors import OmlxError


def _model_path(model: str) -> Path:
    """A model folder as given, else a name the model store resolves."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    from omlx.cli.commands.models import open_store

    return open_store().resolve(model).path


def dflash_bench(
    model: str = typer.Option(..., "--model", help="Target model: a folder or a store name."),
    draft: str = typer.Option(
        ..., "--draft", help="DFlash draft folder, or 'random' for an untrained draft."
    ),
    prompts: Path | None = typer.Option(None, "--prompts", help="One prompt per line."),
    max_tokens: int = typer.Option(128, "--max-tokens", min=1),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0),
    block_size: int | None = typer.Option(None, "--block-size", min=2),
    draft_by_argmax: bool = typer.Option(
        False, "--draft-by-argmax", help="With --temperature > 0: draft greedily."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
) -> None:
    """Compare plain greedy decoding with DFlash on the same prompts."""
    from omlx.draft.bench import run_bench

    try:
        result = run_bench(
            _model_path(model),
            draft,
            prompts_file=str(prompts) if prompts else None,
            max_tokens=max_tokens,
            temperature=temperature,
            draft_block_size=block_size,
            draft_by_argmax=draft_by_argmax,
        )
    except OmlxError as e:
        fail(e.message)
    if as_json:
        console.print_json(json.dumps(result))
        return
    _print_summary(result)


def _print_summary(r: dict) -> None:
    split = r["time_split_s"]
    console.print(f"plain   {r['plain_tokens_per_s']:8.1f} tok/s  ({r['plain_tokens']} tokens)")
    console.print(f"dflash  {r['dflash_tokens_per_s']:8.1f} tok/s  ({r['dflash_tokens']} tokens)")
    console.print(
        f"speedup {r['speedup']:.2f}x   τ {r['acceptance_length']:.2f} over {r['cycles']} cycles"
    )
    console.print(
        f"time    draft {split['draft']:.2f}s  verify {split['verify']:.2f}s  "
        f"rollback {split['rollback']:.2f}s  prefill {split['prefill']:.2f}s"
    )
    console.print(
        f"identical greedy output: {r['identical']}" if r["greedy"] else "sampled (temperature > 0)"
    )
