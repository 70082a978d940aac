"""Sampling defaults from a model's generation_config.json, and how requests take them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omlx.engine.api import NEUTRAL_SAMPLING, SamplingParams
from omlx.models import default_model
from omlx.models.generation_config import add_sampling_defaults, sampling_defaults
from tests.fixtures.fake_models import write_model


def _folder(tmp_path: Path, generation: object) -> Path:
    (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    return tmp_path


@pytest.mark.parametrize(
    ("generation", "expect"),
    [
        (
            {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0, "eos_token_id": 2},
            {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0},
        ),
        ({"repetition_penalty": 1.1, "do_sample": False}, {"repetition_penalty": 1.1}),
        ({"top_k": 20.0}, {"top_k": 20}),
        # Unusable values are skipped, not fatal: a bad file must not stop a model loading.
        ({"temperature": "hot", "top_p": 0, "top_k": 2.5, "min_p": True}, {}),
        ({"temperature": -1, "repetition_penalty": 0, "top_p": 1.5}, {}),
        ([1, 2], {}),
    ],
)
def test_sampling_defaults(tmp_path: Path, generation: object, expect: dict) -> None:
    assert sampling_defaults(_folder(tmp_path, generation)) == expect


def test_missing_or_broken_file_gives_none(tmp_path: Path) -> None:
    assert sampling_defaults(tmp_path) == {}
    (tmp_path / "generation_config.json").write_text("{not json")
    assert sampling_defaults(tmp_path) == {}


def test_request_values_win_then_model_then_neutral() -> None:
    model = {"temperature": 0.2, "top_p": 0.9}
    unset = SamplingParams()
    assert unset.with_defaults(model) == SamplingParams(
        temperature=0.2, top_p=0.9, top_k=0, min_p=0.0, repetition_penalty=1.0
    )
    explicit = SamplingParams(temperature=1.0, top_k=5)
    got = explicit.with_defaults(model)
    assert (got.temperature, got.top_p, got.top_k) == (1.0, 0.9, 5)
    assert SamplingParams(temperature=0.0).with_defaults(model).is_greedy
    neutral = unset.with_defaults({})
    assert {k: getattr(neutral, k) for k in NEUTRAL_SAMPLING} == NEUTRAL_SAMPLING
    resolved = unset.with_defaults(model)
    assert resolved.with_defaults({"temperature": 5.0}) is resolved  # already complete


def test_preset_adds_only_missing_keys(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"eos_token_id": 2, "temperature": 0.7})
    assert add_sampling_defaults(folder, {"temperature": 0.2, "top_p": 0.9})
    data = json.loads((folder / "generation_config.json").read_text())
    assert data == {"eos_token_id": 2, "temperature": 0.7, "top_p": 0.9}
    assert not add_sampling_defaults(folder, {"temperature": 0.2, "top_p": 0.9})


def test_an_imported_default_model_from_before_gets_the_preset(tmp_path: Path) -> None:
    """SmolLM2 folders imported before the preset existed are upgraded at the next start."""
    folder = write_model(tmp_path / default_model.DEFAULT_MODEL_NAME)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
    assert default_model.ensure_default_model(tmp_path) == folder
    assert sampling_defaults(folder) == {"temperature": 0.0}
    data = json.loads((folder / "generation_config.json").read_text())
    assert data["eos_token_id"] == 2 and data["do_sample"] is False
