"""Which local model an Anthropic request's model name reaches (README: "Model names")."""

from __future__ import annotations

import pytest

from omlx.engine.api import ModelInfo
from omlx.server.anthropic_requests import resolve_model
from omlx.settings import AgentSettings, EngineSettings, Settings

MODELS = [ModelInfo(id="smol", type="llm", loaded=True), ModelInfo("qwen", "llm", False)]


def _settings(fallback: bool) -> Settings:
    return Settings(
        engine=EngineSettings(default_model="smol"),
        agents=AgentSettings(model_aliases={"sonnet": "qwen"}, claude_fallback=fallback),
    )


@pytest.mark.parametrize(
    ("name", "with_fallback", "without"),
    [
        ("qwen", "qwen", "qwen"),  # a model's id
        ("sonnet", "qwen", "qwen"),  # an alias, exactly
        ("claude-sonnet-4-5", "qwen", "qwen"),  # an alias inside the name
        ("claude-opus-4-1", "smol", "claude-opus-4-1"),  # Claude name: default, or 404
        ("Claude-3-haiku", "smol", "Claude-3-haiku"),
        ("haiku", "smol", "haiku"),  # a tier keyword
        ("", "smol", "smol"),  # no name: the default model either way
        ("gpt-4o", "gpt-4o", "gpt-4o"),  # unknown and not Claude: 404 either way
    ],
)
def test_model_name_rule(name: str, with_fallback: str, without: str) -> None:
    assert resolve_model(name, _settings(True), MODELS) == with_fallback
    assert resolve_model(name, _settings(False), MODELS) == without
