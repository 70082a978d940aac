"""Training prompts: the shipped set (prompts.jsonl), more of its kind (prompts_more.jsonl,
training prompts only) or a user's JSON-lines file.

A line is `{"prompt": "..."}` or `{"messages": [{"role": ..., "content": ...}, ...]}`
(a chat whose reply the target writes), with optional "category" and "split"
("train" or "heldout"). Lines without a split are assigned one by a hash of their
text, one in twelve held out, so the split is stable across runs and machines.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omlx.errors import InvalidRequest

SHIPPED_PROMPTS = Path(__file__).with_name("prompts.jsonl")
MORE_PROMPTS = Path(__file__).with_name("prompts_more.jsonl")
# Names a prompt source may be given by instead of a path (a file of that name wins).
NAMED_SETS = {"shipped": SHIPPED_PROMPTS, "more": MORE_PROMPTS}
SPLITS = ("train", "heldout")
HELDOUT_EVERY = 12


@dataclass(frozen=True, slots=True)
class PromptRecord:
    id: str
    category: str
    split: str
    messages: tuple[tuple[str, str], ...]  # (role, content), the last one a user turn

    @property
    def text(self) -> str:
        return self.messages[-1][1]

    def to_messages(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]


def _split_for(text: str) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return "heldout" if int.from_bytes(digest[:4], "big") % HELDOUT_EVERY == 0 else "train"


def _record(raw: Any, line_no: int, source: str) -> PromptRecord:
    where = f"{source} line {line_no}"
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{where}: expected a JSON object")
    if isinstance(raw.get("prompt"), str) and raw["prompt"].strip():
        messages: tuple[tuple[str, str], ...] = (("user", raw["prompt"]),)
    elif isinstance(raw.get("messages"), list) and raw["messages"]:
        try:
            messages = tuple((str(m["role"]), str(m["content"])) for m in raw["messages"])
        except (KeyError, TypeError) as exc:
            raise InvalidRequest(f"{where}: every message needs a role and a content") from exc
        # A trailing assistant turn is the reply the target rewrites itself.
        if messages[-1][0] == "assistant":
            messages = messages[:-1]
        if not messages:
            raise InvalidRequest(f"{where}: the chat has no turn before the reply")
    else:
        raise InvalidRequest(f'{where}: needs a non-empty "prompt" or "messages"')
    text = json.dumps(messages)
    split = raw.get("split") or _split_for(text)
    if split not in SPLITS:
        raise InvalidRequest(f"{where}: split must be one of {SPLITS}, not {split!r}")
    return PromptRecord(
        id=str(raw.get("id") or f"line-{line_no}"),
        category=str(raw.get("category") or "user"),
        split=split,
        messages=messages,
    )


def resolve_prompt_source(path: str | Path | None) -> Path:
    if path is None:
        return SHIPPED_PROMPTS
    if str(path) in NAMED_SETS and not Path(path).is_file():
        return NAMED_SETS[str(path)]
    return Path(path)


def read_prompt_file(path: str | Path | None = None) -> list[PromptRecord]:
    """The records of a JSON-lines prompt file; the shipped set when `path` is None, or a
    shipped set by its name in NAMED_SETS."""
    source = resolve_prompt_source(path)
    try:
        lines = source.read_text().splitlines()
    except OSError as exc:
        raise InvalidRequest(f"cannot read prompts file {source}: {exc}") from exc
    records = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidRequest(f"{source} line {line_no}: not JSON ({exc})") from exc
        records.append(_record(raw, line_no, source.name))
    if not records:
        raise InvalidRequest(f"prompts file {source} holds no prompts")
    return records


def select(
    records: Sequence[PromptRecord],
    *,
    split: str | None = None,
    categories: Sequence[str] | None = None,
    limit: int | None = None,
) -> list[PromptRecord]:
    """Records of one split and some categories; `limit` spreads over the categories."""
    chosen = [
        r
        for r in records
        if (split is None or r.split == split) and (not categories or r.category in categories)
    ]
    if limit is None or limit >= len(chosen):
        return chosen
    # Round-robin over categories so a small limit still sees every kind of prompt.
    by_category: dict[str, list[PromptRecord]] = {}
    for r in chosen:
        by_category.setdefault(r.category, []).append(r)
    out: list[PromptRecord] = []
    queues = [list(v) for v in by_category.values()]
    while len(out) < limit:
        for queue in queues:
            if queue and len(out) < limit:
                out.append(queue.pop(0))
    return out


def encode(tokenizer: Any, record: PromptRecord) -> list[int]:
    """Token ids of the chat up to the assistant's turn (as a server would render it)."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(record.to_messages(), add_generation_prompt=True)
        return list(ids if isinstance(ids, list) else tokenizer.encode(ids))
    return list(tokenizer.encode("\n".join(content for _, content in record.messages)))
