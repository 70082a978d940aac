"""`omlx draft train --extra-data`: training on replies another run wrote."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from omlx.cli.main import app
from omlx.draft.train.data import Sample
from omlx.draft.train.extra_data import extra_train_samples


def _sample(ids, split="train", greedy=True, reply=(9,)) -> Sample:
    return Sample("p", "chat", split, greedy, tuple(ids), tuple(reply))


def test_extra_samples_add_training_replies_only_and_no_greedy_twice() -> None:
    own = [_sample([1]), _sample([2], split="heldout"), _sample([1], greedy=False)]
    extra = [
        _sample([1]),  # the run's own greedy reply: the same whatever the batching
        _sample([1], greedy=False, reply=(5,)),  # another sampled reply: kept
        _sample([2], greedy=False),  # a reply to one of the run's held-out prompts
        _sample([3]),  # a greedy reply the run has not: kept, once
        _sample([4], split="heldout", greedy=False),  # their held-out split: not trained on
    ]
    again = [_sample([3])]
    added = extra_train_samples(own, [extra, again])
    assert added == [extra[1], extra[3]]
    # The run's own file given again, or a second file sharing its passes: nothing twice.
    assert extra_train_samples(own, [own, [own[2], extra[1], extra[1]]]) == [extra[1]]


def _lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_a_run_trains_on_another_runs_data(tiny_llama_dir, tmp_path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        '{"prompt": "hello there", "split": "train"}\n'
        '{"prompt": "what is two plus two?", "split": "train"}\n'
        '{"prompt": "name a colour", "split": "heldout"}\n'
    )
    base = [
        "draft", "train", "--target", str(tiny_llama_dir), "--prompts", str(prompts),
        "--max-new-tokens", "5", "--batch-size", "2", "--anchors", "2", "--block-size", "4",
        "--eval-every", "1", "--json",
    ]  # fmt: skip
    first_data = tmp_path / "first"
    made = CliRunner().invoke(
        app,
        [*base, "--out", str(tmp_path / "a"), "--data-dir", str(first_data), "--sampled", "1",
         "--gen-batch", "4", "--data-only"],
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    written = _lines(made.output)[-1]["data"]["file"]
    meta = json.loads(first_data.joinpath(written.rsplit("/", 1)[1].replace(
        ".jsonl", ".meta.json")).read_text())  # fmt: skip
    assert meta["generation"]["num_sampled"] == 1 and meta["prompts"] == 3
    assert len(meta["target_fingerprint"]) == 16

    run = CliRunner().invoke(
        app,
        [*base, "--out", str(tmp_path / "b"), "--data-dir", str(tmp_path / "second"),
         "--gen-batch", "2", "--steps", "1", "--extra-data", written],
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    result = _lines(run.output)[-1]
    # Its two greedy training replies are the run's own; the two sampled ones are added.
    assert result["data"]["extra_train_samples"] == 2
    recipe = json.loads((tmp_path / "b" / "training.json").read_text())
    assert recipe["extra_data"] == [written] and recipe["extra_train_samples"] == 2


def test_extra_data_without_a_record_of_its_target_is_refused(tiny_llama_dir, tmp_path) -> None:
    data = tmp_path / "distill-0123456789abcdef.jsonl"
    data.write_text("")
    args = [
        "draft", "train", "--target", str(tiny_llama_dir), "--out", str(tmp_path / "x"),
        "--steps", "1", "--json", "--extra-data",
    ]  # fmt: skip
    for path, expect in (
        (data, "nothing says which target wrote it"),
        (tmp_path / "missing.jsonl", "no such file"),
        (tmp_path / "distill-0123456789abcdef.partial.jsonl", "no such file"),
    ):
        refused = CliRunner().invoke(app, [*args, str(path)])
        said = " ".join(refused.output.split())  # the console wraps long lines
        assert refused.exit_code != 0 and expect in said, refused.output
    (tmp_path / "distill-0123456789abcdef.meta.json").write_text(
        json.dumps({"target_fingerprint": "someone-else"})
    )
    refused = CliRunner().invoke(app, [*args, str(data)])
    said = " ".join(refused.output.split())
    assert refused.exit_code != 0 and "written by another target" in said
    assert not (tmp_path / "x").exists()  # refused before anything was written


def test_a_partial_file_with_its_record_is_taken_without_its_torn_line(tmp_path) -> None:
    from omlx.draft.train.data import meta_path
    from omlx.draft.train.extra_data import check_extra_data, read_extra_data
    from omlx.errors import InvalidRequest

    partial = tmp_path / "distill-0123456789abcdef.partial.jsonl"
    whole = json.dumps(
        {"prompt_id": "more-chat-0001", "category": "chat", "split": "train", "greedy": True,
         "prompt_ids": [1, 2], "reply_ids": [3, 4]}
    )  # fmt: skip
    text = whole + "\n" + whole[:20]  # another run is appending its next reply now
    partial.write_text(text)
    with pytest.raises(InvalidRequest, match="nothing says which target"):
        check_extra_data(partial, "t")
    meta_path(partial).write_text(json.dumps({"target_fingerprint": "t"}))
    assert check_extra_data(partial, "t") == partial
    [samples] = read_extra_data([partial])
    assert [s.reply_ids for s in samples] == [(3, 4)]
    assert partial.read_text() == text  # the owner's file is left as it is
