"""The narrow async interface between the server and the engines (imports no MLX).

The server converts every API dialect into one `GenerationRequest` and consumes
`GenerationEvent`s; it never sees MLX, BatchGenerator uids or engine internals.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NewType, Protocol

from omlx.schemas.cache import CacheReport
from omlx.schemas.models import ImportProgress, PoolStatus, StoreEntry
from omlx.schemas.stats import StatsSnapshot

RequestId = NewType("RequestId", str)


# What sampling means when neither the request nor the model says otherwise.
NEUTRAL_SAMPLING: dict[str, float | int] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
}


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to pick tokens. The first five fields are None when the request left them
    unset: the engine fills them from the model's generation_config.json, then from
    NEUTRAL_SAMPLING (`with_defaults`), before anything samples."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    logprobs: bool = False
    top_logprobs: int = 0

    def with_defaults(self, model_defaults: Mapping[str, float | int]) -> SamplingParams:
        """Unset fields from `model_defaults`, else NEUTRAL_SAMPLING; set ones stay."""
        filled = {
            key: model_defaults.get(key, neutral)
            for key, neutral in NEUTRAL_SAMPLING.items()
            if getattr(self, key) is None
        }
        return dataclasses.replace(self, **filled) if filled else self

    @property
    def is_greedy(self) -> bool:
        t = NEUTRAL_SAMPLING["temperature"] if self.temperature is None else self.temperature
        return t <= 1e-5


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str | list[dict[str, Any]] | None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """What the answer must be: free text, any JSON object, or JSON matching `json_schema`."""

    type: str = "text"  # text | json_object | json_schema
    json_schema: dict[str, Any] | None = None
    name: str | None = None

    @property
    def is_constrained(self) -> bool:
        return self.type != "text"


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One generation, as the engine sees it.

    Exactly one of `messages` (chat: rendered with the model's template) or
    `prompt` (text completion) or `prompt_token_ids` is set.
    """

    request_id: RequestId
    model: str
    messages: list[ChatMessage] | None = None
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # Text appended after the rendered template (prefill of an assistant turn).
    add_generation_prompt: bool = True
    # Anthropic `thinking.budget_tokens`: once this many tokens were spent inside the
    # reasoning block, the engine closes it (emits the end-of-thinking markup) itself.
    thinking_budget_tokens: int | None = None
    # JSON mode / JSON Schema, enforced by constrained decoding (as are forced tool calls).
    response_format: ResponseFormat | None = None
    # False: a forced tool call is exactly one call (OpenAI parallel_tool_calls, Anthropic
    # disable_parallel_tool_use).
    parallel_tool_calls: bool = True


class FinishReason(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CANCELLED = "cancelled"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: str
    logprob: float
    top: list[tuple[str, float]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Started:
    """The request is admitted; prompt_tokens is final, cached_tokens came from the cache."""

    request_id: RequestId
    prompt_tokens: int
    cached_tokens: int = 0
    # The completion budget in force: the request's max_tokens, or less when it was
    # clamped to the room the prompt leaves in the context (None: not known here).
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """Prefill progress, while the first token is pending."""

    request_id: RequestId
    processed_tokens: int
    total_tokens: int


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it


@dataclass(frozen=True, slots=True)
class Token:
    """One step's output, already parsed for the model's reasoning/tool-call markup.

    `text` is answer content (markup and stop strings removed), `reasoning` is
    thinking text, `tool_calls` are calls completed in this step; any may be empty.
    """

    request_id: RequestId
    text: str
    token_ids: list[int]
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None


@dataclass(frozen=True, slots=True)
class Done:
    request_id: RequestId
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    served_by: str = "batch"  # which path served it: "batch" or "dflash"
    # The request's stop string that ended generation (Anthropic reports it), if any.
    stop_sequence: str | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    request_id: RequestId
    error: Exception


GenerationEvent = Started | Progress | Token | Done | Failed


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: str
    type: str  # llm | vlm | embedding | reranker | ocr
    loaded: bool
    pinned: bool = False
    created: int = 0
    context_length: int | None = None
    memory_bytes: int = 0


@dataclass(frozen=True, slots=True)
class PromptLogprobs:
    """Each prompt token's text, log-probability given the tokens before it (None for
    the first) and its `top_n` most likely alternatives."""

    tokens: list[str]
    logprobs: list[float | None]
    top: list[list[tuple[str, float]] | None]


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    """Texts or token-id lists to embed; `dimensions` shortens Matryoshka embeddings."""

    model: str
    inputs: list[str] | list[list[int]]
    dimensions: int | None = None
    # Cut texts longer than the model reads (keeping the final special token) instead
    # of refusing them; token-id inputs are never cut.
    truncate: bool = False


@dataclass(frozen=True, slots=True)
class EmbeddingResult:
    model: str
    embeddings: list[list[float]]  # in input order
    prompt_tokens: int
    truncated_inputs: int = 0  # how many inputs were cut to fit (only with truncate)


@dataclass(frozen=True, slots=True)
class RerankRequest:
    model: str
    query: str
    documents: list[str]
    instruction: str | None = None  # causal-LM rerankers: the task description


@dataclass(frozen=True, slots=True)
class RerankResult:
    model: str
    scores: list[float]  # relevance in [0, 1], one per document in input order
    prompt_tokens: int


class ModelPool(Protocol):
    """What the server needs from the engines."""

    def list_models(self) -> list[ModelInfo]: ...

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Stream events for one request; raises OmlxError subclasses before the first one."""
        ...

    async def generate_into(
        self, request: GenerationRequest, deliver: Callable[[GenerationEvent], None]
    ) -> None:
        """`generate`, each event handed to `deliver` (on the event loop) as it comes;
        returns after Done or Failed. Cancelling the caller cancels the request. The
        server's streams take this path: no task is woken per token on the way."""
        ...

    async def count_tokens(self, request: GenerationRequest) -> int: ...

    def cancel(self, request_id: RequestId) -> None: ...

    def stats(self) -> StatsSnapshot: ...

    async def close(self) -> None: ...

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        """Embed with an embedding model, loading it if needed."""
        ...

    async def rerank(self, request: RerankRequest) -> RerankResult:
        """Score documents against a query with a reranker, loading it if needed."""
        ...

    async def prompt_logprobs(self, model: str, prompt: str, top_n: int) -> PromptLogprobs:
        """Log-probabilities of a text prompt's own tokens (completions' echo)."""
        ...

    async def load(self, name: str) -> Any:
        """Load a model now (evicting idle ones if the budget says so); the result is opaque."""
        ...

    async def unload(self, name: str) -> bool:
        """Unload a model; False when it was not loaded."""
        ...

    async def pin(self, name: str) -> None: ...

    async def unpin(self, name: str) -> None: ...

    def status(self) -> PoolStatus:
        """Every model with its load state, memory, last use and TTL; the budget."""
        ...

    def model_state(self, name: str | None = None) -> tuple[str, str]:
        """(name, "loaded" | "loading" | "available") of a model, of the default model when
        `name` is None ("" when there is none). Cheap, no store scan: GET /ready polls it."""
        ...

    async def set_ttl(self, name: str | None, ttl_s: float | None) -> None:
        """Idle TTL of one model (`name`), or the default one (`name` None); None for a
        model drops its own TTL (back to the default), 0 means never."""
        ...


class CacheAdmin(Protocol):
    """What the server needs from the tiered KV cache (omlx.cache.PrefixCache).

    The engine process's proxy (omlx.enginehost.client.RemoteCache) answers `report` and
    `clear` with awaitables instead; callers accept both."""

    def report(self) -> CacheReport: ...

    def clear(self, model_fingerprint: str | None = None, tier: str = "all") -> int: ...

    def close(self, spill: bool = True) -> None: ...


class ModelCatalog(Protocol):
    """The model store as the web admin manages it; blocking calls (run them in a thread)."""

    def entries(self) -> list[StoreEntry]: ...

    def delete(self, name: str) -> str:
        """Remove a model folder (or the link to it) from the store; returns what went."""
        ...

    def import_model(
        self,
        source: str,
        *,
        name: str | None = None,
        dtype: str = "float32",
        progress: Callable[[ImportProgress], None] | None = None,
    ) -> StoreEntry:
        """`omlx pull SOURCE`: a .gguf file, a model folder, or a hub ORG/NAME."""
        ...
