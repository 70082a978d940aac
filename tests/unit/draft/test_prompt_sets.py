"""The shipped prompt sets: made by their templates, and the more-prompts set apart."""

from __future__ import annotations

import json

import pytest

from omlx.draft.train import prompt_templates, prompt_templates_more
from omlx.draft.train.prompts import (
    MORE_PROMPTS,
    SHIPPED_PROMPTS,
    read_prompt_file,
    resolve_prompt_source,
)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_shipped_files_are_what_their_templates_make():
    # A template edit that changes the shipped set changes every carried data file's
    # name; the files must be rewritten on purpose, never drift.
    assert _lines(SHIPPED_PROMPTS) == prompt_templates.build()
    assert _lines(MORE_PROMPTS) == prompt_templates_more.build_more()


def test_more_prompts_are_new_training_prompts_of_every_category():
    shipped = read_prompt_file()
    more = read_prompt_file("more")
    assert len(more) == sum(prompt_templates_more.COUNTS.values())
    assert {r.split for r in more} == {"train"}  # the held-out split stays the shipped one
    assert {r.category for r in more} == {r.category for r in shipped}
    texts = [r.text for r in more]
    assert len(set(texts)) == len(texts)
    assert not set(texts) & {r.text for r in shipped}
    assert len({r.id for r in more} | {r.id for r in shipped}) == len(more) + len(shipped)


def test_a_file_named_like_a_set_is_read_as_the_file(tmp_path, monkeypatch):
    assert resolve_prompt_source(None) == SHIPPED_PROMPTS
    assert resolve_prompt_source("shipped") == SHIPPED_PROMPTS
    monkeypatch.chdir(tmp_path)
    assert resolve_prompt_source("more") == MORE_PROMPTS
    (tmp_path / "more").write_text('{"prompt": "hello"}\n')
    records = read_prompt_file("more")
    assert [r.text for r in records] == ["hello"]


@pytest.mark.parametrize("name", ["shipped", "more"])
def test_named_sets_import_without_mlx(name):
    import subprocess
    import sys

    code = (
        "import sys; from omlx.draft.train.prompts import read_prompt_file; "
        f"read_prompt_file({name!r}); assert 'mlx' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
