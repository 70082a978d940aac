"""What clients are told about a model's limits: its context window and output budget."""

from __future__ import annotations

from omlx.settings import EngineSettings

# Without a server cap, agents are told a quarter of the window (the rest is prompt:
# system prompt, tool schemas, files), at most this many tokens.
MAX_ADVISED_OUTPUT_TOKENS = 32_768


def advised_output_tokens(context_length: int | None, engine: EngineSettings) -> int | None:
    """The output limit for clients: engine.max_output_tokens when set (the server clamps
    every request to it), else a quarter of the context window."""
    if context_length is None:
        return engine.max_output_tokens or None
    advised = min(max(1, context_length // 4), MAX_ADVISED_OUTPUT_TOKENS)
    if engine.max_output_tokens:
        advised = min(engine.max_output_tokens, context_length)
    return advised
