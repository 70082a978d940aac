"""Training a DFlash draft on self-distilled samples: AdamW, warm-up then cosine decay.

Labels are the replies' tokens, or with `labels="greedy"` the target's own picks
(`objective.greedy_relabel`); held-out evaluation always uses greedy replies as they are.
The schedule runs on progress, the larger of steps done / `steps` and seconds spent /
`time_budget_s`, so a run bounded by time still warms up, decays and ends cleanly.
Every `eval_every` steps the held-out samples (greedy replies only: their tokens are
the target's own greedy chain, so a block's accepted prefix is exactly what greedy
DFlash would accept) give a loss and the acceptance length τ, walked cycle by cycle
as decoding walks it (loop_eval; `eval_block_tau` is the mean over random anchors,
which overstates it). With `keep_best` the finished folder holds the weights of the
evaluation with the highest τ, since a small data set overfits. Checkpoints keep the
float32 weights, the optimizer state and the data order, so `resume` continues the
same run. The finished folder is config.json + safetensors in the published layout.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from omlx.draft.capture import TargetAdapter
from omlx.draft.config import DFlashConfig
from omlx.draft.model import DFlashDraftModel
from omlx.draft.train.data import Sample
from omlx.draft.train.init_from_draft import start_weights
from omlx.draft.train.init_from_target import init_from_target
from omlx.draft.train.loop_eval import loop_acceptance
from omlx.draft.train.objective import (
    BlockBatch,
    VocabLoss,
    block_loss,
    default_gamma,
    greedy_relabel,
    make_batch,
    position_weights,
    soft_relabel,
    target_context,
    target_context_and_greedy,
    target_context_and_tops,
)
from omlx.draft.vocab import RestrictedHead, choose_vocab
from omlx.errors import InvalidRequest

DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}
LABELS = ("greedy", "reply", "soft")
CHECKPOINT_DIR = "checkpoint"
LOG_FILE = "train_log.jsonl"
RECIPE_FILE = "training.json"

Event = Callable[[dict[str, Any]], None]


@dataclass(slots=True)
class TrainConfig:
    steps: int | None = 2000
    time_budget_s: float | None = None  # seconds of training steps; the schedule follows it
    # A hard stop: seconds of wall time from `deadline_from` (the command's start, by
    # default the run's), evaluations and checkpoints included. Past it the run ends as
    # if done (last evaluation, save), its schedule cut short, not stretched: for a
    # device lent by the call, where a step-time budget alone overran its deadline.
    wall_budget_s: float | None = None
    batch_size: int = 16  # sequences per step
    anchors_per_seq: int = 32  # draft blocks per sequence per step
    max_seq_len: int = 1024
    lr: float = 6e-4
    min_lr_ratio: float = 0.05
    warmup: float = 0.04  # fraction of the run
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    gamma: float | None = None  # position-weight decay; None: the paper's for the block size
    dtype: str = "float32"  # training dtype of the draft's weights
    save_dtype: str = "bfloat16"  # dtype of the finished folder's weights
    shard_mb: float = 0.0  # split the finished weights into files of at most this size
    eval_every: int = 100
    eval_sequences: int = 64
    log_every: int = 10
    checkpoint_every: int = 500
    keep_best: bool = True  # save the weights of the best held-out τ, not the last
    vocab_coverage: float = 0.99  # draft vocabulary: this share of reply tokens; 1: none
    # The loss's softmax over the draft vocabulary only (objective.VocabLoss): the tokens
    # decoding's argmax chooses among, at a fraction of the full head's cost.
    vocab_loss: bool = True
    # "reply": the reply's own tokens; "greedy": the target's argmax, kept while the
    # reply followed it (objective.greedy_relabel: sampled replies then add contexts,
    # not sampled choices). Not yet compared on a real run, so not the default.
    # "soft": as greedy, each label with the target's top tokens and probabilities as
    # the loss's target (objective.soft_relabel).
    labels: str = "reply"
    # Keep each training sequence's captured target states after its first epoch, so
    # later epochs skip the target's forward pass. Memory: tokens x hidden x captured
    # layers x 4 bytes (float32: ~22 GB for the default model's 9,600 replies).
    cache_context: bool = False
    # The dtype the cached states are kept in: bfloat16 halves their memory (the draft's
    # fc then reads them rounded, as a bfloat16 target's would be; the first epoch reads
    # them as computed). For the default model's ~24,000 replies: ~55 GB in float32,
    # ~28 GB in bfloat16 (scaled from run 4's 22 GB for 9,600), which an 80 GB GPU holds.
    cache_dtype: str = "float32"
    # Start the draft's layers and final norm from the target's last layers
    # (init_from_target.py) instead of random weights.
    init_from_target: bool = False
    # Start from a trained draft's folder (init_from_draft.py): its shape and weights,
    # with a fresh optimizer and schedule.
    init_from: str | None = None
    seed: int = 0

    def check(self) -> None:
        if not self.steps and not self.time_budget_s:
            raise InvalidRequest("give a number of steps or a time budget")
        for name in ("dtype", "save_dtype", "cache_dtype"):
            if getattr(self, name) not in DTYPES:
                raise InvalidRequest(f"{name} must be one of {sorted(DTYPES)}")
        if not 0.0 < self.vocab_coverage <= 1.0:
            raise InvalidRequest("the draft vocabulary's coverage must be in (0, 1]")
        if self.wall_budget_s is not None and self.wall_budget_s <= 0:
            raise InvalidRequest("the wall-clock budget must be positive")
        if self.batch_size < 1 or self.anchors_per_seq < 1:
            raise InvalidRequest("batch size and anchors per sequence must be at least 1")
        if self.labels not in LABELS:
            raise InvalidRequest(f"labels must be one of {list(LABELS)}")
        if self.init_from and self.init_from_target:
            raise InvalidRequest("start from a trained draft or from the target, not both")


@dataclass(slots=True)
class TrainState:
    step: int = 0
    elapsed_s: float = 0.0
    epoch: int = 0
    position: int = 0  # index into this epoch's order
    order: list[int] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)


def learning_rate(cfg: TrainConfig, progress: float) -> float:
    if progress < cfg.warmup:
        return cfg.lr * max(progress / cfg.warmup, 0.01)
    t = min(1.0, (progress - cfg.warmup) / max(1e-9, 1.0 - cfg.warmup))
    low = cfg.lr * cfg.min_lr_ratio
    return low + (cfg.lr - low) * 0.5 * (1.0 + math.cos(math.pi * t))


def _save_weights(model: nn.Module, folder: Path, dtype: mx.Dtype, shard_mb: float) -> None:
    params = {k: v.astype(dtype) for k, v in tree_flatten(model.parameters())}
    mx.eval(params)
    for old in folder.glob("model*.safetensors"):
        old.unlink()
    if shard_mb <= 0:
        mx.save_safetensors(str(folder / "model.safetensors"), params)
        return
    limit = shard_mb * 2**20
    shards: list[dict[str, mx.array]] = [{}]
    size = 0
    for name, value in params.items():
        if shards[-1] and size + value.nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][name] = value
        size += value.nbytes
    for i, shard in enumerate(shards, start=1):
        mx.save_safetensors(str(folder / f"model-{i:05d}-of-{len(shards):05d}.safetensors"), shard)


def save_trained(model: DFlashDraftModel, out: Path, cfg: TrainConfig) -> Path:
    """The finished draft: what `load_draft`, `omlx serve --draft` and dflash-bench read."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(model.config.to_dict(), indent=2))
    _save_weights(model, out, DTYPES[cfg.save_dtype], cfg.shard_mb)
    return out


class Trainer:
    def __init__(
        self,
        target: nn.Module,
        draft_cfg: DFlashConfig,
        train_samples: Sequence[Sample],
        eval_samples: Sequence[Sample],
        cfg: TrainConfig,
        out: Path,
        *,
        on_event: Event | None = None,
        deadline_from: float | None = None,
    ) -> None:
        cfg.check()
        if not train_samples:
            raise InvalidRequest("no training samples")
        self.cfg = cfg
        self.out = Path(out)
        self.adapter = TargetAdapter(target, draft_cfg.target_layer_ids)
        draft_cfg.check_target(
            hidden_size=self.adapter.hidden_size,
            vocab_size=self.adapter.vocab_size,
            num_layers=self.adapter.num_layers,
        )
        self.draft_cfg = draft_cfg
        self.train_samples = list(train_samples)
        self.eval_samples = list(eval_samples)
        self.on_event = on_event or (lambda _e: None)
        self._deadline_from = deadline_from  # time.perf_counter() at the command's start
        mx.random.seed(cfg.seed)
        self.draft = DFlashDraftModel(draft_cfg)
        self.draft.set_dtype(DTYPES[cfg.dtype])
        if cfg.init_from_target:
            init_from_target(self.draft, self.adapter.layers, self.adapter.final_norm)
        if cfg.init_from:
            try:
                self.draft.load_weights(start_weights(cfg.init_from), strict=True)
            except ValueError as exc:
                raise InvalidRequest(f"{cfg.init_from}: weights do not match: {exc}") from exc
            self.draft.set_dtype(DTYPES[cfg.dtype])
            mx.eval(self.draft.parameters())
        self.optimizer = optim.AdamW(
            learning_rate=cfg.lr, betas=[0.9, 0.95], weight_decay=cfg.weight_decay
        )
        self.weights = position_weights(
            draft_cfg.block_size, cfg.gamma or default_gamma(draft_cfg.block_size)
        )
        self.state = TrainState()
        self.rng = np.random.default_rng(cfg.seed)
        # The draft vocabulary (saved with the weights): the walked τ drafts through it,
        # as decoding will, and with `vocab_loss` so does the loss.
        self.vocab_ids: list[int] | None = None
        self._vocab_loss: VocabLoss | None = None
        self._draft_head: RestrictedHead | None = None
        if cfg.vocab_coverage < 1.0:
            ids = choose_vocab((s.reply_ids for s in self.train_samples), cfg.vocab_coverage)
            if len(ids) < self.adapter.vocab_size:
                self.vocab_ids = ids
                self._draft_head = RestrictedHead(
                    self.adapter.head_module, ids, self.adapter.vocab_size
                )
                if cfg.vocab_loss:
                    self._vocab_loss = VocabLoss.of(self._draft_head)
        self._eval_batches = self._make_eval_batches()
        self._best: tuple[float, int, list[tuple[str, mx.array]]] | None = None
        self._loss_and_grad = nn.value_and_grad(self.draft, self._loss)
        self._picked: list[int] = []  # indices of the samples in the last batch
        self._picks: dict[int, np.ndarray] = {}  # sample index -> the target's argmax
        # sample index -> the target's top tokens and their probabilities (soft labels)
        self._tops: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._contexts: dict[int, mx.array] = {}  # sample index -> its captured states

    # -- data ---------------------------------------------------------------------------

    def _make_eval_batches(self) -> list[BlockBatch]:
        rng = np.random.default_rng(1234)
        chosen = self.eval_samples[: self.cfg.eval_sequences]
        return [
            self._batch(chosen[i : i + self.cfg.batch_size], rng)
            for i in range(0, len(chosen), self.cfg.batch_size)
        ]

    def _batch(self, samples: Sequence[Sample], rng: np.random.Generator) -> BlockBatch:
        return make_batch(
            samples,
            block_size=self.draft_cfg.block_size,
            anchors_per_seq=self.cfg.anchors_per_seq,
            mask_token_id=self.draft_cfg.mask_token_id,
            rng=rng,
            max_len=self.cfg.max_seq_len,
        )

    def _next_samples(self) -> list[Sample]:
        st = self.state
        if not st.order or st.position >= len(st.order):
            st.order = [int(i) for i in self.rng.permutation(len(self.train_samples))]
            st.position = 0
            st.epoch += 1 if st.step else 0
        picked = st.order[st.position : st.position + self.cfg.batch_size]
        st.position += self.cfg.batch_size
        self._picked = picked
        return [self.train_samples[i] for i in picked]

    def _target_outputs(self, batch: BlockBatch) -> tuple[mx.array, BlockBatch]:
        """The target's captured states for `batch`, and the batch relabelled from the
        target's argmax after every position with greedy labels (with its top tokens,
        soft ones). Both depend on the sequence alone, so each is computed in a
        sequence's first epoch and reused: the picks always (the full-vocabulary head
        cost as much as the rest of a step: 4.8 against 8.3 steps/s on the H200, run 4),
        the states with `cache_context`."""
        soft = self.cfg.labels == "soft"
        picks_needed = self.cfg.labels in ("greedy", "soft")
        rows = self._picked if len(self._picked) == batch.tokens.shape[0] else []
        have_picks = not picks_needed or (rows and all(i in self._picks for i in rows))
        cache_states = self.cfg.cache_context and bool(rows)
        width = batch.tokens.shape[1]
        tops: tuple[mx.array, mx.array] | None = None
        if not have_picks:
            if soft:
                hidden, greedy_next, top_ids, top_probs = target_context_and_tops(
                    self.adapter, batch.tokens
                )
                assert top_ids is not None and top_probs is not None
                tops = (top_ids, top_probs)
                ids, probs = np.array(top_ids), np.array(top_probs.astype(mx.float16))
                for row, i in enumerate(rows):
                    n = self._length(i)
                    self._tops[i] = (ids[row, :n], probs[row, :n])
            else:
                hidden, greedy_next = target_context_and_greedy(self.adapter, batch.tokens)
            picks = np.array(greedy_next)
            for row, i in enumerate(rows):
                self._picks[i] = picks[row, : self._length(i)]
        else:
            greedy_next = self._stacked_picks(rows, width) if picks_needed else None
            tops = self._stacked_tops(rows, width) if soft else None
            if cache_states and all(i in self._contexts for i in rows):
                return self._stacked_contexts(rows, width), self._relabel(batch, greedy_next, tops)
            hidden = target_context(self.adapter, batch.tokens)
        if cache_states:
            keep = DTYPES[self.cfg.cache_dtype]
            kept = [(hidden[row, : self._length(i)] + 0).astype(keep) for row, i in enumerate(rows)]
            mx.eval(kept)  # copies: the batch's padded array is not held
            self._contexts.update(zip(rows, kept, strict=True))
        return hidden, self._relabel(batch, greedy_next, tops)

    @staticmethod
    def _relabel(
        batch: BlockBatch, greedy_next: mx.array | None, tops: tuple[mx.array, mx.array] | None
    ) -> BlockBatch:
        if greedy_next is None:
            return batch
        if tops is None:
            return greedy_relabel(batch, greedy_next)
        return soft_relabel(batch, greedy_next, *tops)

    def _length(self, i: int) -> int:
        sample = self.train_samples[i]
        return min(len(sample.prompt_ids) + len(sample.reply_ids), self.cfg.max_seq_len)

    def _stacked_picks(self, rows: list[int], width: int) -> mx.array:
        stacked = np.zeros((len(rows), width), np.int32)
        for row, i in enumerate(rows):
            cached = self._picks[i][:width]
            stacked[row, : len(cached)] = cached
        return mx.array(stacked)

    def _stacked_tops(self, rows: list[int], width: int) -> tuple[mx.array, mx.array]:
        top = next(iter(self._tops.values()))[0].shape[1]
        ids = np.zeros((len(rows), width, top), np.int32)
        probs = np.zeros((len(rows), width, top), np.float16)
        for row, i in enumerate(rows):
            cached_ids, cached_probs = self._tops[i]
            ids[row, : len(cached_ids)] = cached_ids[:width]
            probs[row, : len(cached_probs)] = cached_probs[:width]
        return mx.array(ids), mx.array(probs.astype(np.float32))

    def _stacked_contexts(self, rows: list[int], width: int) -> mx.array:
        """Cached states padded with zeros to the batch's width: a block attends only to
        positions before its anchor, inside its sequence, so padding is never read."""
        parts = []
        for i in rows:
            ctx = self._contexts[i][:width]
            parts.append(mx.pad(ctx, [(0, width - ctx.shape[0]), (0, 0)]))
        return mx.stack(parts)

    # -- steps --------------------------------------------------------------------------

    def _loss(self, batch: BlockBatch, hidden: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        m = block_loss(self.draft, self.adapter, batch, hidden, self.weights, self._vocab_loss)
        return m.loss, m.accuracy, m.tau

    def progress(self) -> float:
        parts = []
        if self.cfg.steps:
            parts.append(self.state.step / self.cfg.steps)
        if self.cfg.time_budget_s:
            parts.append(self.state.elapsed_s / self.cfg.time_budget_s)
        return max(parts)

    def train_step(self, batch: BlockBatch) -> tuple[float, float]:
        lr = learning_rate(self.cfg, self.progress())
        self.optimizer.learning_rate = mx.array(lr)
        hidden, batch = self._target_outputs(batch)
        (loss, _acc, tau), grads = self._loss_and_grad(batch, hidden)
        if self.cfg.grad_clip > 0:
            grads, _ = optim.clip_grad_norm(grads, self.cfg.grad_clip)
        self.optimizer.update(self.draft, grads)
        mx.eval(self.draft.parameters(), self.optimizer.state, loss, tau)
        return float(loss.item()), float(tau.item())

    def evaluate(self) -> dict[str, Any]:
        """Loss, per-position accuracy and τ on the held-out batches (no update)."""
        total_blocks = 0
        loss_sum = tau_sum = 0.0
        acc_sum = np.zeros(self.draft_cfg.block_size - 1)
        for batch in self._eval_batches:
            hidden = target_context(self.adapter, batch.tokens)
            m = block_loss(self.draft, self.adapter, batch, hidden, self.weights, self._vocab_loss)
            mx.eval(m.loss, m.tau, m.accuracy)
            n = batch.num_blocks
            total_blocks += n
            loss_sum += float(m.loss.item()) * n
            tau_sum += float(m.tau.item()) * n
            acc_sum += np.array(m.accuracy) * n
        if not total_blocks:
            return {}
        chosen = self.eval_samples[: self.cfg.eval_sequences]
        tokens = cycles = 0
        for i in range(0, len(chosen), self.cfg.batch_size):
            walked = loop_acceptance(
                self.draft,
                self.adapter,
                chosen[i : i + self.cfg.batch_size],
                block_size=self.draft_cfg.block_size,
                mask_token_id=self.draft_cfg.mask_token_id,
                max_len=self.cfg.max_seq_len,
                head=self._draft_head,
            )
            tokens, cycles = tokens + walked.tokens, cycles + walked.cycles
        return {
            "eval_loss": loss_sum / total_blocks,
            "eval_tau": tokens / cycles if cycles else 1.0,
            "eval_block_tau": tau_sum / total_blocks,
            "eval_accuracy": [round(float(a), 4) for a in acc_sum / total_blocks],
        }

    def _keep_if_best(self, record: dict[str, Any]) -> None:
        tau = record.get("eval_tau")
        if tau is not None and (self._best is None or tau > self._best[0]):
            # Optimizer updates replace the arrays, so holding these copies nothing.
            self._best = (tau, record["step"], tree_flatten(self.draft.parameters()))

    # -- checkpoints --------------------------------------------------------------------

    def checkpoint(self) -> Path:
        folder = self.out / CHECKPOINT_DIR
        folder.mkdir(parents=True, exist_ok=True)
        mx.save_safetensors(
            str(folder / "draft.safetensors"), dict(tree_flatten(self.draft.parameters()))
        )
        mx.save_safetensors(
            str(folder / "optimizer.safetensors"), dict(tree_flatten(self.optimizer.state))
        )
        state = {
            **asdict(self.state),
            "rng": self.rng.bit_generator.state,
            "draft_config": self.draft_cfg.to_dict(),
            "train_config": asdict(self.cfg),
        }
        tmp = folder / "state.json.tmp"
        tmp.write_text(json.dumps(state))
        tmp.replace(folder / "state.json")
        return folder

    def resume(self) -> bool:
        """Continue from the checkpoint in the output folder; False when there is none."""
        folder = self.out / CHECKPOINT_DIR
        if not (folder / "state.json").is_file():
            return False
        raw = json.loads((folder / "state.json").read_text())
        if raw["draft_config"] != self.draft_cfg.to_dict():
            raise InvalidRequest(
                f"the checkpoint in {folder} is for another draft shape; "
                "use the same flags or a new --out"
            )
        self.draft.load_weights(str(folder / "draft.safetensors"))
        self.draft.set_dtype(DTYPES[self.cfg.dtype])
        opt_state = tree_unflatten(list(mx.load(str(folder / "optimizer.safetensors")).items()))
        self.optimizer.state = opt_state
        self.rng.bit_generator.state = raw.pop("rng")
        for key in ("draft_config", "train_config"):
            raw.pop(key)
        self.state = TrainState(**raw)
        mx.eval(self.draft.parameters(), self.optimizer.state)
        return True

    # -- the run ------------------------------------------------------------------------

    def _record(self, record: dict[str, Any]) -> None:
        self.state.history.append(record)
        with (self.out / LOG_FILE).open("a") as f:
            f.write(json.dumps(record) + "\n")
        self.on_event(record)

    def run(self) -> dict[str, Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        cfg, st = self.cfg, self.state
        since = self._deadline_from if self._deadline_from is not None else time.perf_counter()
        deadline = None if cfg.wall_budget_s is None else since + cfg.wall_budget_s
        cut = False
        if st.step == 0:
            (self.out / LOG_FILE).unlink(missing_ok=True)
            self._record({"kind": "eval", "step": 0, "elapsed_s": 0.0, **self.evaluate()})
        window: list[tuple[float, float]] = []
        while self.progress() < 1.0:
            if deadline is not None and time.perf_counter() >= deadline:
                cut = True
                break
            started = time.perf_counter()
            batch = self._batch(self._next_samples(), self.rng)
            loss, tau = self.train_step(batch)
            st.step += 1
            st.elapsed_s += time.perf_counter() - started
            window.append((loss, tau))
            if st.step % cfg.log_every == 0 or self.progress() >= 1.0:
                self._record(
                    {
                        "kind": "train",
                        "step": st.step,
                        "elapsed_s": round(st.elapsed_s, 2),
                        "progress": round(min(1.0, self.progress()), 4),
                        "lr": learning_rate(cfg, self.progress()),
                        "loss": sum(x for x, _ in window) / len(window),
                        "tau": sum(t for _, t in window) / len(window),
                        "epoch": st.epoch,
                    }
                )
                window = []
            if st.step % cfg.eval_every == 0:
                record = {
                    "kind": "eval",
                    "step": st.step,
                    "elapsed_s": round(st.elapsed_s, 2),
                    **self.evaluate(),
                }
                self._record(record)
                self._keep_if_best(record)
            if cfg.checkpoint_every and st.step % cfg.checkpoint_every == 0:
                self.checkpoint()
        final = {
            "kind": "eval",
            "step": st.step,
            "elapsed_s": round(st.elapsed_s, 2),
            **self.evaluate(),
        }
        self._record(final)
        self._keep_if_best(final)
        self.checkpoint()  # the last weights: `resume` continues the run, not the best
        kept = final
        if cfg.keep_best and self._best is not None and self._best[1] != st.step:
            best_step = self._best[1]
            kept = next(r for r in st.history if r["kind"] == "eval" and r["step"] == best_step)
            self.draft.load_weights(self._best[2])
        save_trained(self.draft, self.out, cfg)
        return {
            "out": str(self.out),
            "steps": st.step,
            "train_s": round(st.elapsed_s, 2),
            # The wall budget ended the run before its schedule did.
            "stopped_by": "wall_budget" if cut else "schedule",
            "train_samples": len(self.train_samples),
            "eval_samples": len(self.eval_samples),
            "final": final,
            "saved": kept,
            "first": next((r for r in st.history if r["kind"] == "eval"), None),
            "draft_config": self.draft_cfg.to_dict(),
        }


def write_recipe(out: Path, recipe: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / RECIPE_FILE).write_text(json.dumps(recipe, indent=2))
