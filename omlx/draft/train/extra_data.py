"""Training on data another run wrote (`omlx draft train --extra-data FILE`).

A data file's name fingerprints the settings it was written with (batch size, joins,
passes), so data written faster, or in another session, lands in a file of its own;
this lets a run train on several. Only files with a record of their target beside them
are taken (build_dataset writes it when data is finished, and for a partial file when
its time budget stops it: the replies written so far are whole, so a set too large for
one session trains from the first), and only their training replies: the
held-out split stays the run's own, and a reply to any of its held-out prompts is
dropped, as is a reply the run already has, and a greedy reply to a prompt it has one for
(greedy replies are the same whatever the batching).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from omlx.draft.train.data import Sample, meta_path, read_samples
from omlx.errors import InvalidRequest


def check_extra_data(path: str | Path, target_id: str) -> Path:
    """`path` if it is data written by the target `target_id`; else why not."""
    path = Path(path)
    if not path.is_file():
        raise InvalidRequest(f"extra data {path}: no such file")
    meta = meta_path(path)
    if not meta.is_file():
        raise InvalidRequest(
            f"extra data {path}: no {meta.name} beside it, so nothing says which target "
            "wrote it (a run that writes or reuses data writes one)"
        )
    try:
        written_by = json.loads(meta.read_text()).get("target_fingerprint")
    except (json.JSONDecodeError, AttributeError) as e:
        raise InvalidRequest(f"extra data {path}: {meta.name} is not a JSON record") from e
    if written_by != target_id:
        raise InvalidRequest(
            f"extra data {path}: written by another target ({written_by}, not {target_id})"
        )
    return path


def extra_train_samples(own: Sequence[Sample], extras: Sequence[Sequence[Sample]]) -> list[Sample]:
    """The samples of `extras` to train on besides the run's own `own`."""
    heldout = {s.prompt_ids for s in own if s.split != "train"}
    greedy = {s.prompt_ids for s in own if s.greedy}
    # A reply already trained on adds nothing but weight: the run's own data file given
    # again as extra data, or two files sharing passes, would count its replies twice.
    seen = {(s.prompt_ids, s.reply_ids) for s in own}
    added = []
    for samples in extras:
        for s in samples:
            if s.split != "train" or s.prompt_ids in heldout:
                continue
            if (s.prompt_ids, s.reply_ids) in seen:
                continue
            seen.add((s.prompt_ids, s.reply_ids))
            if s.greedy:
                if s.prompt_ids in greedy:
                    continue
                greedy.add(s.prompt_ids)
            added.append(s)
    return added


def read_extra_data(paths: Sequence[Path]) -> list[list[Sample]]:
    # Never repaired: a partial file may be another run's, being appended to now.
    return [read_samples(p, repair=False) for p in paths]


__all__ = ["check_extra_data", "extra_train_samples", "read_extra_data"]
