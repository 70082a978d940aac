"""Self-distillation data: the target writes the replies its draft learns to predict.

Every prompt is chat-formatted and answered by the target itself through the engine's
batch generator: once greedily (what greedy DFlash must match token for token) and,
optionally, a few more times sampled at a temperature (more varied contexts). The
result, prompt ids plus reply ids (EOS included, so the draft learns where replies
end), is cached as JSON lines under a name that fingerprints the target, the prompts
and the generation settings; a second run with the same inputs reuses it, and a run
asking for more sampled passes starts from the finished data of fewer.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from omlx.draft.sampling import sample_with_temperature
from omlx.draft.train.prompts import PromptRecord, encode
from omlx.mlx_lm_compat.batch_join import FusedJoinBatchGenerator, takes_logits
from omlx.platform.device import on_cuda, on_gpu

Progress = Callable[[int, int], None]  # (done, total)


@dataclass(frozen=True, slots=True)
class GenerationSettings:
    max_new_tokens: int = 256
    num_sampled: int = 0  # extra replies per prompt, sampled at `temperature`
    temperature: float = 0.7
    batch_size: int = 64  # concurrent streams in the batch generator
    seed: int = 0
    # New prompts join the batch only once this many rows are free, all in one prefill.
    # 1: a freed row is refilled at once, one or two prompts a step, each a forward pass
    # of its own beside the decode step; on a GPU, whose steps are bound by the host,
    # every pass costs about a decode step (data generation ran at ~100 ms a 256-row step
    # on the H200, the step alone ~31 ms on an H100). Larger: a few rows wait, prefills
    # come once per many steps. Part of the data's name unless 1 (the carried data's).
    join_rows: int = 1


def _key_fields(settings: GenerationSettings) -> dict[str, Any]:
    """The settings that name the data: all, but `join_rows` only when it is not 1, so
    data written before it existed keeps its name."""
    fields = asdict(settings)
    if fields["join_rows"] == 1:
        del fields["join_rows"]
    return fields


@dataclass(frozen=True, slots=True)
class Sample:
    """One training sequence: a prompt and the target's own reply to it."""

    prompt_id: str
    category: str
    split: str
    greedy: bool
    prompt_ids: tuple[int, ...]
    reply_ids: tuple[int, ...]

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.reply_ids)


def target_fingerprint(model_path: str | Path) -> str:
    """What identifies a target's weights cheaply: its config and weight file sizes."""
    folder = Path(model_path)
    h = hashlib.sha256()
    config = folder / "config.json"
    if config.is_file():
        h.update(config.read_bytes())
    for f in sorted(folder.glob("*.safetensors")):
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()[:16]


def cache_key(
    target_id: str, prompts: Sequence[Sequence[int]], settings: GenerationSettings
) -> str:
    h = hashlib.sha256(target_id.encode())
    h.update(json.dumps(_key_fields(settings), sort_keys=True).encode())
    for ids in prompts:
        h.update(json.dumps(list(ids)).encode())
    return h.hexdigest()[:16]


def meta_path(data_file: Path) -> Path:
    """The record beside a data file, finished or partial: which target wrote it, how."""
    return data_file.with_name(data_file.name.removesuffix(".jsonl") + ".meta.json")


def write_meta(
    data_file: Path, target_id: str, settings: GenerationSettings, num_prompts: int
) -> None:
    """Written when data is finished, found by its name (which hashes the same facts) or
    left partial by its time budget, so another run can take the file as extra data
    (`--extra-data`) and check its target."""
    record = {
        "target_fingerprint": target_id,
        "generation": asdict(settings),
        "prompts": num_prompts,
    }
    meta = meta_path(data_file)
    tmp = meta.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
    tmp.replace(meta)  # never a torn record


def read_samples(path: Path, *, repair: bool = True) -> list[Sample]:
    """The samples of a data file. A partial one may end in a torn line (a run killed
    mid-append, or one appending now): it is never read; with `repair` (the run that
    owns the file) it is also cut from the file, so the next append starts a line."""
    samples = []
    text = path.read_text()
    if path.name.endswith(".partial.jsonl") and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        if repair:
            with path.open("r+b") as f:
                f.truncate(len(text.encode()))
    for line in text.splitlines():
        raw = json.loads(line)
        raw["prompt_ids"] = tuple(raw["prompt_ids"])
        raw["reply_ids"] = tuple(raw["reply_ids"])
        samples.append(Sample(**raw))
    return samples


def generate_replies(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    eos_token_ids: Sequence[int],
    settings: GenerationSettings,
    *,
    temperature: float = 0.0,
    progress: Progress | None = None,
    on_reply: Callable[[int, list[int]], None] | None = None,
) -> list[list[int]]:
    """One reply per prompt from the target, batched; EOS kept when it comes.

    `on_reply(i, reply)` is called as the reply to `prompts[i]` ends (in any order).
    """

    @takes_logits  # an argmax or a categorical draw: the batch need not normalise
    def sampler(logits: mx.array) -> mx.array:
        return sample_with_temperature(logits, temperature)

    # The serving engine's generator: a finished reply's slot is refilled without a
    # forward pass of its own. On CUDA, where a wide prefill costs about what a narrow one
    # does, new prompts are prefilled 64 at a time (as the engine does); a CPU is bound by
    # compute, and bigger prefill batches only pad more.
    gen = FusedJoinBatchGenerator(
        model,
        max_tokens=settings.max_new_tokens,
        stop_tokens=[[t] for t in eos_token_ids],
        sampler=sampler,
        completion_batch_size=settings.batch_size,
        prefill_batch_size=min(settings.batch_size, 64 if on_cuda() else 16),
    )
    replies: dict[int, list[int]] = {}
    index: dict[int, int] = {}  # uid -> prompt index
    waiting = list(range(len(prompts)))[::-1]  # popped from the end, in prompt order

    def admit(running: int) -> None:
        """Insert waiting prompts: all at once with `join_rows` 1 (the generator refills
        freed rows itself), else a group whenever that many rows are free."""
        free = settings.batch_size - running if settings.join_rows > 1 else len(waiting)
        if not waiting or free < min(settings.join_rows, len(waiting)):
            return
        take = [waiting.pop() for _ in range(min(free, len(waiting)))]
        for uid, i in zip(gen.insert([list(prompts[i]) for i in take]), take, strict=True):
            replies[uid], index[uid] = [], i

    try:
        admit(0)
        done = idle = 0
        while done < len(prompts):
            # A step where only primed rows join reports no token (see batch_join).
            responses = gen.next_generated()
            idle = 0 if responses else idle + 1
            if idle > 100:  # a join step yields nothing; this many means nothing runs
                raise RuntimeError("the batch generator stopped before every reply ended")
            for r in responses:
                replies[r.uid].append(int(r.token))
                if r.finish_reason is not None:
                    done += 1
                    if on_reply:
                        on_reply(index[r.uid], replies[r.uid])
                    if progress:
                        progress(done, len(prompts))
            admit(len(index) - done)
    finally:
        gen.close()
    by_prompt = {i: replies[uid] for uid, i in index.items()}
    return [by_prompt[i] for i in range(len(prompts))]


def _append_samples(path: Path, samples: Sequence[Sample]) -> None:
    with path.open("a") as f:
        for s in samples:
            f.write(json.dumps(asdict(s)) + "\n")


class _PrefixWriter:
    """Appends a chunk's samples to the partial file as soon as they form a prefix.

    Replies end in any order; the file must stay a prefix of the (pass, prompt) order, so
    each finished reply waits until every earlier one of its chunk is written. A run
    killed mid-chunk then keeps what had reached the disk instead of the whole chunk's
    loss.
    """

    def __init__(self, path: Path, make: Callable[[int, list[int]], Sample], size: int) -> None:
        self.path, self.make, self.size = path, make, size
        self.samples: list[Sample] = []
        self._pending: dict[int, Sample] = {}

    def add(self, i: int, reply: list[int]) -> None:
        self._pending[i] = self.make(i, reply)
        ready = []
        while len(self.samples) + len(ready) in self._pending:
            ready.append(self._pending.pop(len(self.samples) + len(ready)))
        if ready:
            _append_samples(self.path, ready)
            self.samples += ready

    def check_complete(self) -> None:
        if len(self.samples) != self.size:
            raise RuntimeError(f"{self.size - len(self.samples)} replies of a chunk never ended")


def _start_from_fewer_passes(
    partial: Path, target_id: str, prompts: Sequence[Sequence[int]], settings: GenerationSettings
) -> None:
    """Seed a run asking for N sampled passes with the finished data of fewer.

    Samples are stored pass by pass and each chunk's seed depends only on its pass and
    first prompt, so the data of k < N passes is exactly the start of the data of N: a
    later run with `--sampled 3` generates only the passes an earlier `--sampled 1` did
    not, and ends with what a fresh `--sampled 3` run would write.
    """
    for fewer in range(settings.num_sampled - 1, -1, -1):
        smaller = replace(settings, num_sampled=fewer)
        done = partial.parent / f"distill-{cache_key(target_id, prompts, smaller)}.jsonl"
        if done.is_file():
            tmp = partial.with_suffix(".tmp")
            shutil.copyfile(done, tmp)
            tmp.replace(partial)
            return


def build_dataset(
    model: nn.Module,
    tokenizer: Any,
    records: Sequence[PromptRecord],
    settings: GenerationSettings,
    *,
    cache_dir: Path,
    target_id: str,
    time_budget_s: float | None = None,
    chunk_size: int | None = None,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[list[Sample], Path, bool]:
    """The samples for `records`, from the cache when present; (samples, file, cached).

    Replies are generated in chunks of prompts and appended to a `.partial` file as each
    chunk ends, so an interrupted run picks up where it stopped. With `time_budget_s`,
    no new chunk starts once that much time has gone (one always runs, except with a
    budget of 0, which takes what is on disk): the samples so far are returned from the
    partial file, which the next run completes.
    """
    prompts = [encode(tokenizer, r) for r in records]
    path = Path(cache_dir) / f"distill-{cache_key(target_id, prompts, settings)}.jsonl"
    if path.is_file():
        if not meta_path(path).is_file():  # data written before records were
            write_meta(path, target_id, settings, len(prompts))
        return read_samples(path), path, True
    partial = path.with_suffix(".partial.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    if not partial.is_file():
        _start_from_fewer_passes(partial, target_id, prompts, settings)
    samples = read_samples(partial) if partial.is_file() else []
    eos = list(getattr(tokenizer, "eos_token_ids", None) or [tokenizer.eos_token_id])
    passes = [(True, 0.0)] + [(False, settings.temperature)] * settings.num_sampled
    total = len(prompts) * len(passes)
    # Replies reach the disk as they end (in prompt order), so a chunk only sets how long
    # the batch stays full (it drains at a chunk's end), how often the time budget is
    # looked at, and the random seeds. A GPU writes 1,024 replies in a few minutes; a
    # CPU (~100 tokens/s for SmolLM2 at 256 streams) needs an hour, so there a chunk is
    # two batches, and a budget overruns by less.
    default_chunk = max(4 * settings.batch_size, 256) if on_gpu() else 2 * settings.batch_size
    chunk = chunk_size or default_chunk
    start = time.perf_counter()
    # Samples are stored in (pass, prompt) order, so the ones on disk are a prefix.
    job = len(samples)
    while job < total and time_budget_s != 0:
        pass_index, first = divmod(job, len(prompts))
        greedy, temperature = passes[pass_index]
        # Chunks keep their boundaries when a killed run resumes inside one, so every
        # later chunk draws what an uninterrupted run would.
        last = min((first // chunk + 1) * chunk, len(prompts))
        mx.random.seed(settings.seed + 1_000_003 * pass_index + first)

        def report(done: int, _total: int, offset: int = job) -> None:
            if progress:
                progress(offset + done, total)

        def make(i: int, reply: list[int], first: int = first, greedy: bool = greedy) -> Sample:
            r, ids = records[first + i], tuple(prompts[first + i])
            return Sample(r.id, r.category, r.split, greedy, ids, tuple(reply))

        writer = _PrefixWriter(partial, make, last - first)
        generate_replies(
            model,
            prompts[first:last],
            eos,
            settings,
            temperature=temperature,
            progress=report,
            on_reply=writer.add,
        )
        writer.check_complete()
        samples += writer.samples
        job += len(writer.samples)
        if time_budget_s is not None and time.perf_counter() - start >= time_budget_s:
            break
    if log:
        num_tokens = sum(len(s.reply_ids) for s in samples)
        elapsed = time.perf_counter() - start
        log(f"{len(samples)}/{total} replies, {num_tokens} reply tokens, in {elapsed:.1f} s")
    if len(samples) < total:
        if samples:  # what is done can be another run's extra data already
            write_meta(partial, target_id, settings, len(prompts))
        return samples, partial, False
    partial.replace(path)
    write_meta(path, target_id, settings, len(prompts))
    meta_path(partial).unlink(missing_ok=True)
    return samples, path, False
