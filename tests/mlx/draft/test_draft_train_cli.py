"""`omlx draft train` on a tiny checkpoint with a real tokenizer: JSON lines, data reuse,
a folder that `omlx dflash-bench --draft` takes unchanged."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from omlx.cli.main import app


def _lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_train_reuse_data_resume_and_bench(tiny_llama_dir, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        '{"prompt": "hello there", "split": "train"}\n'
        '{"messages": [{"role": "user", "content": "what is two plus two?"}]}\n'
        '{"prompt": "name a colour", "split": "heldout"}\n'
    )
    out = tmp_path / "draft"
    args = [
        "draft", "train", "--target", str(tiny_llama_dir), "--out", str(out),
        "--prompts", str(prompts), "--max-new-tokens", "6", "--gen-batch", "4",
        "--batch-size", "2", "--anchors", "2", "--block-size", "4", "--eval-every", "1",
        "--checkpoint-every", "1", "--json",
    ]  # fmt: skip
    first = CliRunner().invoke(app, [*args, "--steps", "2"])
    assert first.exit_code == 0, first.output
    records = _lines(first.output)
    result = records[-1]
    assert result["kind"] == "result" and result["steps"] == 2
    assert result["data"]["cached"] is False and result["data"]["samples"] == 3
    assert any(r["kind"] == "eval" and "eval_tau" in r for r in records)
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    # Three short replies use a few of the vocabulary's tokens: the draft scores those.
    vocab = json.loads((out / "draft_vocab.json").read_text())["token_ids"]
    assert result["draft_vocab"] == len(vocab) and 0 < len(vocab) <= 18

    again = CliRunner().invoke(app, [*args, "--steps", "3", "--resume"])
    assert again.exit_code == 0, again.output
    result = _lines(again.output)[-1]
    assert result["data"]["cached"] is True and result["resumed"] is True
    assert result["steps"] == 3

    bench = CliRunner().invoke(
        app,
        ["dflash-bench", "--model", str(tiny_llama_dir), "--draft", str(out),
         "--max-tokens", "8", "--json"],
    )  # fmt: skip
    assert bench.exit_code == 0, bench.output
    assert json.loads(bench.output)["identical"] is True


def test_bad_prompt_file_is_a_clean_error(tiny_llama_dir, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"text": "no prompt field"}\n')
    result = CliRunner().invoke(
        app,
        ["draft", "train", "--target", str(tiny_llama_dir), "--out", str(tmp_path / "d"),
         "--prompts", str(prompts)],
    )  # fmt: skip
    assert result.exit_code == 1
    assert 'needs a non-empty "prompt" or "messages"' in result.output


def test_generation_stops_on_its_budget_and_resumes(tiny_llama_dir, tmp_path):
    from omlx.draft.train.data import GenerationSettings, build_dataset, meta_path
    from omlx.draft.train.prompts import read_prompt_file, select
    from omlx.mlx_lm_compat import load

    model, tokenizer = load(str(tiny_llama_dir))
    records = select(read_prompt_file(), split="train", limit=5)
    settings = GenerationSettings(max_new_tokens=4, num_sampled=1, batch_size=2)

    def build(**kw):
        return build_dataset(
            model, tokenizer, records, settings, cache_dir=tmp_path / "data", target_id="t",
            chunk_size=2, **kw,
        )  # fmt: skip

    first, file, cached = build(time_budget_s=1e-9)
    assert len(first) == 2 and file.name.endswith(".partial.jsonl") and not cached
    partial_meta = meta_path(file)  # what is done can be --extra-data already
    assert json.loads(partial_meta.read_text())["target_fingerprint"] == "t"
    assert build(time_budget_s=0)[0] == first  # nothing new
    second, _, _ = build(time_budget_s=1e-9)
    assert len(second) == 4 and second[:2] == first
    rest, file, _ = build()
    assert len(rest) == 10 and not file.name.endswith(".partial.jsonl")
    assert meta_path(file).is_file() and not partial_meta.exists()
    assert [s.greedy for s in rest] == [True] * 5 + [False] * 5
    assert [s.prompt_id for s in rest] == [r.id for r in records] * 2
    again, same, cached = build()
    assert cached and same == file and again == rest

    fresh, _, _ = build_dataset(
        model, tokenizer, records, settings, cache_dir=tmp_path / "fresh", target_id="t",
        chunk_size=2,
    )  # fmt: skip
    assert fresh == rest  # an interrupted run ends with the same data as one that was not


def test_on_the_cpu_a_chunk_is_two_batches(tiny_llama_dir, tmp_path):
    """With no chunk size given, a CPU run cut short by its budget stops after two
    batches, not a GPU-sized chunk of 1,024 prompts it would need hours for."""
    from omlx.draft.train.data import GenerationSettings, build_dataset
    from omlx.draft.train.prompts import read_prompt_file, select
    from omlx.mlx_lm_compat import load

    model, tokenizer = load(str(tiny_llama_dir))
    records = select(read_prompt_file(), split="train", limit=7)
    settings = GenerationSettings(max_new_tokens=4, batch_size=3)
    samples, file, _ = build_dataset(
        model, tokenizer, records, settings, cache_dir=tmp_path, target_id="t",
        time_budget_s=1e-9,
    )  # fmt: skip
    assert len(samples) == 6 and file.name.endswith(".partial.jsonl")
    assert len(file.read_text().splitlines()) == 6


class _Killed(Exception):
    pass


def test_a_run_killed_mid_chunk_keeps_its_finished_replies(tiny_llama_dir, tmp_path):
    """Replies reach the disk as they end; a torn last line is dropped on resume; the
    chunks after the interrupted one draw what an uninterrupted run draws."""
    from omlx.draft.train import data
    from omlx.draft.train.prompts import read_prompt_file, select
    from omlx.mlx_lm_compat import load

    model, tokenizer = load(str(tiny_llama_dir))
    records = select(read_prompt_file(), split="train", limit=5)
    settings = data.GenerationSettings(max_new_tokens=4, num_sampled=1, batch_size=4)
    real = data.generate_replies

    def build(folder, kill_after=None):
        def killing(*args, on_reply, **kwargs):
            def counted(i, reply):
                on_reply(i, reply)
                calls.append(i)
                if len(calls) == kill_after:
                    raise _Killed

            return real(*args, on_reply=counted, **kwargs)

        calls: list[int] = []
        with pytest.MonkeyPatch.context() as mp:
            if kill_after is not None:
                mp.setattr(data, "generate_replies", killing)
            return data.build_dataset(
                model, tokenizer, records, settings, cache_dir=folder, target_id="t",
                chunk_size=4,
            )  # fmt: skip

    fresh, _, _ = build(tmp_path / "fresh")
    folder = tmp_path / "killed"
    with pytest.raises(_Killed):
        build(folder, kill_after=7)  # passes of 5: the sampled pass's second reply
    (partial,) = folder.glob("*.partial.jsonl")
    kept = data.read_samples(partial)
    assert 6 <= len(kept) < 10 and kept == fresh[: len(kept)]
    with partial.open("a") as f:
        f.write('{"prompt_id": "torn')  # what a kill inside a write leaves
    resumed, file, _ = build(folder)
    assert not file.name.endswith(".partial.jsonl") and len(resumed) == 10
    assert resumed[: len(kept)] == kept
    assert resumed[:5] == fresh[:5]  # the greedy pass: the same replies either way
    assert resumed[9:] == fresh[9:]  # the next chunk: its own seed, as in a fresh run
    assert [s.prompt_id for s in resumed] == [r.id for r in records] * 2


def test_more_sampled_passes_start_from_the_data_of_fewer(tiny_llama_dir, tmp_path):
    from omlx.draft.train import data
    from omlx.draft.train.prompts import read_prompt_file, select
    from omlx.mlx_lm_compat import load

    model, tokenizer = load(str(tiny_llama_dir))
    records = select(read_prompt_file(), split="train", limit=3)
    calls = []
    real = data.generate_replies

    def counting(*args, **kwargs):
        calls.append(kwargs["temperature"])
        return real(*args, **kwargs)

    def build(num_sampled, folder):
        settings = data.GenerationSettings(max_new_tokens=4, num_sampled=num_sampled, batch_size=2)
        return data.build_dataset(
            model, tokenizer, records, settings, cache_dir=folder, target_id="t", chunk_size=8
        )

    one, _, _ = build(1, tmp_path / "data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(data, "generate_replies", counting)
        three, file, cached = build(3, tmp_path / "data")
    assert not cached and not file.name.endswith(".partial.jsonl")
    assert calls == [0.7, 0.7]  # only the two new sampled passes were generated
    assert three[:6] == one and len(three) == 12
    assert build(3, tmp_path / "fresh")[0] == three  # as a fresh run of three passes


def test_init_from_continues_a_draft_and_keeps_its_shape(tiny_llama_dir, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        '{"prompt": "hello there", "split": "train"}\n'
        '{"prompt": "name a colour", "split": "heldout"}\n'
    )
    first, second = tmp_path / "first", tmp_path / "second"
    args = [
        "draft", "train", "--target", str(tiny_llama_dir), "--prompts", str(prompts),
        "--max-new-tokens", "6", "--gen-batch", "4", "--batch-size", "2", "--anchors", "2",
        "--eval-every", "1", "--steps", "2", "--json", "--data-dir", str(tmp_path / "data"),
    ]  # fmt: skip
    made = CliRunner().invoke(app, [*args, "--out", str(first), "--block-size", "4"])
    assert made.exit_code == 0, made.output

    more = CliRunner().invoke(app, [*args, "--out", str(second), "--init-from", str(first)])
    assert more.exit_code == 0, more.output
    assert json.loads((second / "config.json").read_text())["block_size"] == 4
    recipe = json.loads((second / "training.json").read_text())
    assert recipe["init_from"]["folder"] == str(first)
    assert len(recipe["init_from"]["weights_sha256"]) == 16
    assert recipe["init_from"]["recipe"]["draft_config"]["block_size"] == 4

    other = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "x"), "--init-from", str(first), "--block-size", "8"]
    )
    assert other.exit_code != 0
    assert "block_size=4, not 8" in other.output and "keeps its shape" in other.output
    assert not (tmp_path / "x").exists()  # refused before the target loads

    config = json.loads((first / "config.json").read_text())
    (first / "config.json").write_text(json.dumps({**config, "quantization": {"bits": 4}}))
    quantized = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "y"), "--init-from", str(first)]
    )
    assert quantized.exit_code != 0 and "quantized draft" in quantized.output


def test_a_bfloat16_target_trains_in_float32_on_the_cpu(tiny_llama_dir, tmp_path):
    import shutil

    import mlx.core as mx

    target = tmp_path / "bf16"
    shutil.copytree(tiny_llama_dir, target)
    weights = mx.load(str(target / "model.safetensors"))
    mx.save_safetensors(
        str(target / "model.safetensors"), {k: v.astype(mx.bfloat16) for k, v in weights.items()}
    )
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        '{"prompt": "hello there"}\n{"prompt": "name a colour", "split": "heldout"}\n'
    )
    out = tmp_path / "draft"
    result = CliRunner().invoke(
        app,
        ["draft", "train", "--target", str(target), "--out", str(out), "--prompts", str(prompts),
         "--max-new-tokens", "6", "--batch-size", "2", "--anchors", "2", "--block-size", "4",
         "--steps", "2", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads((out / "training.json").read_text())["target_dtype"] == "mlx.core.float32"
    # The draft is saved in the dtype asked for, whatever the target computed in.
    saved = mx.load(str(out / "model.safetensors"))
    assert {v.dtype for v in saved.values()} == {mx.bfloat16}
