"""Grammar engines for constrained decoding, compared on this engine's vocabularies.

    # 1. (project venv) write the real tokenizers of SmolLM2 (49152) and Gemma-3 (262144)
    python benchmarks/grammar_engines.py --export-tokenizers /tmp/grammar-tok
    # 2. (a venv holding the engines: xgrammar drags in torch, so not the project's)
    python benchmarks/grammar_engines.py --tokenizers /tmp/grammar-tok --json OUT.json

Per engine and vocabulary: set-up time (tokenizer preprocessing), compile time of each
schema, the time to fill one row's token bitmask per decode step (p50 / p99 / max) while
walking real tokenizations of valid documents, the time to fill a batch of 16 rows per
step (one after another, and each engine's own parallel batch call where it has one),
and JSON Schema feature correctness: every valid document must be accepted token by
token and end in an accepting state, every invalid one must be refused somewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

# (feature, schema, valid documents, invalid documents)
CASES: list[tuple[str, dict[str, Any], list[Any], list[Any]]] = [
    (
        "nested objects + required",
        {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "address": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                    "required": ["city"],
                },
            },
            "required": ["name", "address"],
        },
        [
            {"name": "Ann", "address": {"city": "Oslo"}},
            {"name": "B", "address": {"city": "x", "zip": "1"}},
        ],
        [{"name": "Ann"}, {"name": 1, "address": {"city": "Oslo"}}, {"address": {"city": "x"}}],
    ),
    (
        "array minItems/maxItems",
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
        [[1], [1, 2, 3]],
        [[], [1, 2, 3, 4], ["a"]],
    ),
    ("enum", {"enum": ["red", "green", 3]}, ["red", "green", 3], ["blue", "re", 4]),
    ("const", {"const": "x"}, ["x"], ["y"]),
    (
        "integer bounds",
        {"type": "integer", "minimum": 1, "maximum": 10},
        [1, 5, 10],
        [0, 11, 100, -1, 2.5],
    ),
    (
        "number bounds",
        {"type": "number", "minimum": 0, "maximum": 1},
        [0, 0.5, 1],
        [1.5, -0.1, 2],
    ),
    ("exclusiveMinimum", {"type": "number", "exclusiveMinimum": 0}, [0.1, 3], [0, -1]),
    (
        "string length",
        {"type": "string", "minLength": 2, "maxLength": 4},
        ["ab", "abcd"],
        ["a", "abcde"],
    ),
    (
        "pattern",
        {"type": "string", "pattern": "^[a-z]+-[0-9]{3}$"},
        ["ab-123"],
        ["ab-12", "AB-123"],
    ),
    ("format date", {"type": "string", "format": "date"}, ["2024-01-31"], ["hello"]),
    (
        "format date-time",
        {"type": "string", "format": "date-time"},
        ["2024-01-31T10:20:30Z"],
        ["yesterday"],
    ),
    ("format email", {"type": "string", "format": "email"}, ["a@b.co"], ["not an email"]),
    ("anyOf", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, [1, "a"], [True, None]),
    (
        "$ref/$defs",
        {
            "$defs": {
                "pt": {
                    "type": "object",
                    "properties": {"x": {"type": "integer"}},
                    "required": ["x"],
                }
            },
            "type": "array",
            "items": {"$ref": "#/$defs/pt"},
        },
        [[{"x": 1}, {"x": 2}]],
        [[{"y": 1}]],
    ),
    (
        "recursive $ref",
        {
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {
                        "v": {"type": "integer"},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                    },
                    "required": ["v"],
                }
            },
            "$ref": "#/$defs/node",
        },
        [{"v": 1, "children": [{"v": 2, "children": [{"v": 3}]}]}],
        [{"v": 1, "children": [{"w": 2}]}],
    ),
    (
        "additionalProperties false",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "additionalProperties": False,
        },
        [{"a": 1}, {}],
        [{"a": 1, "b": 2}],
    ),
    (
        "additionalProperties schema",
        {"type": "object", "additionalProperties": {"type": "integer"}},
        [{"x": 1, "y": 2}],
        [{"x": "s"}],
    ),
    ("nullable type list", {"type": ["string", "null"]}, [None, "a"], [1]),
    (
        "allOf",
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": "string"}}, "required": ["b"]},
            ]
        },
        [{"a": 1, "b": "x"}],
        [{"a": 1}],
    ),
    (
        "any JSON object (json_object)",
        {"type": "object"},
        [{"a": [1, {"b": None}], "c": 'd"e\\n'}],
        [[1], "s"],
    ),
    ("unicode and escapes", {"type": "string"}, ['héllo ✓ "q" \\ \n'], [5]),
]

# Long documents for the timing walk: about 100-300 tokens each.
BENCH_SCHEMA = {
    "type": "object",
    "properties": {
        "users": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer", "minimum": 0},
                    "name": {"type": "string"},
                    "role": {"enum": ["admin", "user", "guest"]},
                    "score": {"type": "number", "minimum": 0, "maximum": 100},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["id", "name", "role"],
            },
        },
        "total": {"type": "integer"},
    },
    "required": ["users", "total"],
}


def bench_documents(n: int) -> list[Any]:
    roles = ["admin", "user", "guest"]
    return [
        {
            "users": [
                {
                    "id": 10 * d + i,
                    "name": f"user number {i} of doc {d}",
                    "role": roles[(i + d) % 3],
                    "score": round(12.5 + 7.25 * i, 2),
                    "tags": ["alpha", "beta gamma"][: (i + d) % 3],
                }
                for i in range(4 + d % 4)
            ],
            "total": 4 + d % 4,
        }
        for d in range(n)
    ]


# -- engines ---------------------------------------------------------------------------


class LLGuidance:
    name = "llguidance"

    def __init__(self, tok_path: Path, vocab: int, eos: int) -> None:
        import llguidance

        self.ll = llguidance
        self.tok = llguidance.LLTokenizer(tok_path.read_text(), n_vocab=vocab, eos_token=eos)
        self.executor = llguidance.LLExecutor()

    @property
    def version(self) -> str:
        return self.ll.get_version() if hasattr(self.ll, "get_version") else "?"

    def compile(self, schema: dict[str, Any]) -> Any:
        grammar = self.ll.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), defaults={"whitespace_flexible": False}
        )
        m = self.ll.LLMatcher(self.tok, grammar)
        if m.is_error():
            raise ValueError(m.get_error())
        return grammar

    def matcher(self, grammar: Any) -> Any:
        return self.ll.LLMatcher(self.tok, grammar)

    def fill(self, m: Any, mask: np.ndarray, row: int) -> None:
        from llguidance.numpy import fill_next_token_bitmask

        fill_next_token_bitmask(m, mask, row)

    def fill_batch(self, ms: list[Any], mask: np.ndarray) -> None:
        from llguidance.numpy import fill_next_token_bitmask_par

        fill_next_token_bitmask_par(self.executor, [(m, i) for i, m in enumerate(ms)], mask)

    def consume(self, m: Any, token: int) -> bool:
        return bool(m.consume_token(token)) and not m.is_error()


class XGrammar:
    name = "xgrammar"

    def __init__(self, tok_path: Path, vocab: int, eos: int) -> None:
        import torch
        import xgrammar
        from transformers import PreTrainedTokenizerFast

        self.torch, self.xgr = torch, xgrammar
        hf = PreTrainedTokenizerFast(tokenizer_file=str(tok_path))
        info = xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=vocab, stop_token_ids=[eos])
        self.compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        self.batch = (
            xgrammar.BatchGrammarMatcher() if hasattr(xgrammar, "BatchGrammarMatcher") else None
        )
        self._tensor: Any = None

    @property
    def version(self) -> str:
        from importlib.metadata import version

        return version("xgrammar")

    def compile(self, schema: dict[str, Any]) -> Any:
        return self.compiler.compile_json_schema(
            json.dumps(schema), any_whitespace=False, separators=(",", ":"), strict_mode=True
        )

    def matcher(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def _view(self, mask: np.ndarray) -> Any:
        return self.torch.from_numpy(mask)

    def fill(self, m: Any, mask: np.ndarray, row: int) -> None:
        m.fill_next_token_bitmask(self._view(mask), row)

    def fill_batch(self, ms: list[Any], mask: np.ndarray) -> None:
        if self.batch is None:
            raise NotImplementedError
        self.batch.batch_fill_next_token_bitmask(ms, self._view(mask))

    def consume(self, m: Any, token: int) -> bool:
        return bool(m.accept_token(token))


class OutlinesCore:
    name = "outlines_core"

    def __init__(self, tok_path: Path, vocab: int, eos: int) -> None:
        import outlines_core
        from outlines_core import Vocabulary

        self.oc = outlines_core
        self.eos = eos
        self.vocabulary = Vocabulary(eos, token_bytes_map(tok_path, exclude={eos}))

    @property
    def version(self) -> str:
        from importlib.metadata import version

        return version("outlines-core")

    def compile(self, schema: dict[str, Any]) -> Any:
        from outlines_core.json_schema import build_regex_from_schema

        regex = build_regex_from_schema(json.dumps(schema), whitespace_pattern="")
        return self.oc.Index(regex, self.vocabulary)

    def matcher(self, index: Any) -> Any:
        return self.oc.Guide(index)

    def fill(self, m: Any, mask: np.ndarray, row: int) -> None:
        view = mask[row]
        m.write_mask_into(view.ctypes.data, view.size, view.itemsize)

    def fill_batch(self, ms: list[Any], mask: np.ndarray) -> None:
        raise NotImplementedError

    def consume(self, m: Any, token: int) -> bool:
        try:
            m.advance(token, return_tokens=False)
        except Exception:
            return False
        return True


ENGINES = {e.name: e for e in (LLGuidance, XGrammar, OutlinesCore)}


def token_bytes_map(tok_path: Path, exclude: set[int]) -> dict[bytes, list[int]]:
    """Token id -> its bytes (GPT-2 byte-level or SentencePiece with byte fallback)."""
    data = json.loads(tok_path.read_text())
    vocab: dict[str, int] = data["model"]["vocab"]
    special = {t["id"] for t in data.get("added_tokens", []) if t.get("special")}
    decoder = json.dumps(data.get("decoder") or {})
    byte_level = "ByteLevel" in decoder
    table = {c: b for b, c in _bytes_to_unicode().items()}
    out: dict[bytes, list[int]] = {}
    for piece, tid in vocab.items():
        if tid in exclude or tid in special:
            continue
        if byte_level:
            try:
                raw = bytes(table[c] for c in piece)
            except KeyError:
                continue
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            raw = bytes([int(piece[3:5], 16)])
        else:
            raw = piece.replace("▁", " ").encode()
        out.setdefault(raw, []).append(tid)
    return out


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


# -- measuring -------------------------------------------------------------------------


def dump(doc: Any) -> str:
    # Compact separators and no free whitespace in every engine: a fixed layout keeps a
    # sampled model from padding its JSON with endless whitespace.
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def allowed(mask: np.ndarray, row: int, token: int) -> bool:
    return bool((int(mask[row, token >> 5]) >> (token & 31)) & 1)


def walk(engine: Any, compiled: Any, ids: list[int], eos: int, vocab: int) -> bool:
    """True when every token is allowed in turn and the stop token is allowed at the end."""
    m = engine.matcher(compiled)
    mask = np.zeros((1, (vocab + 31) // 32), dtype=np.int32)
    for t in ids:
        engine.fill(m, mask, 0)
        if not allowed(mask, 0, t) or not engine.consume(m, t):
            return False
    engine.fill(m, mask, 0)
    return allowed(mask, 0, eos)


def correctness(engine: Any, encode: Any, eos: int, vocab: int) -> list[dict[str, Any]]:
    rows = []
    for feature, schema, good, bad in CASES:
        row: dict[str, Any] = {"feature": feature}
        try:
            compiled = engine.compile(schema)
        except Exception as e:
            row.update(compiled=False, error=str(e)[:200], passed=0, total=len(good) + len(bad))
            rows.append(row)
            continue
        ok_good = [walk(engine, compiled, encode(dump(d)), eos, vocab) for d in good]
        ok_bad = [not walk(engine, compiled, encode(dump(d)), eos, vocab) for d in bad]
        row.update(
            compiled=True,
            passed=sum(ok_good) + sum(ok_bad),
            total=len(good) + len(bad),
            wrongly_refused=[d for d, ok in zip(good, ok_good, strict=True) if not ok],
            wrongly_accepted=[d for d, ok in zip(bad, ok_bad, strict=True) if not ok],
        )
        rows.append(row)
    return rows


def timing(engine: Any, encode: Any, vocab: int, batch: int, steps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    compiled = engine.compile(BENCH_SCHEMA)
    out: dict[str, Any] = {"batch": batch, "steps": steps}
    out["compile_ms"] = round(1000 * (time.perf_counter() - t0), 2)
    docs = [encode(dump(d)) for d in bench_documents(batch)]
    row_us, seq_ms = _walk_batch(engine, compiled, docs, vocab, steps, parallel=False)
    q = statistics.quantiles(row_us, n=100, method="inclusive")
    out.update(
        row_mask_us_mean=round(statistics.fmean(row_us), 1),
        row_mask_us_p50=round(q[49], 1),
        row_mask_us_p99=round(q[98], 1),
        row_mask_us_max=round(max(row_us), 1),
        step_ms_sequential_mean=round(statistics.fmean(seq_ms), 3),
    )
    try:
        _, par_ms = _walk_batch(engine, compiled, docs, vocab, steps, parallel=True)
        out["step_ms_parallel_mean"] = round(statistics.fmean(par_ms), 3)
    except NotImplementedError:
        out["step_ms_parallel_mean"] = None
    return out


def _walk_batch(
    engine: Any, compiled: Any, docs: list[list[int]], vocab: int, steps: int, *, parallel: bool
) -> tuple[list[float], list[float]]:
    """Row i walks document i (restarting at its end); (per-row µs, per-step ms) of the masks."""
    batch = len(docs)
    mask = np.zeros((batch, (vocab + 31) // 32), dtype=np.int32)
    matchers = [engine.matcher(compiled) for _ in range(batch)]
    positions = [0] * batch
    row_us: list[float] = []
    step_ms: list[float] = []
    for _ in range(steps):
        t_step = time.perf_counter()
        if parallel:
            engine.fill_batch(matchers, mask)
        else:
            for i, m in enumerate(matchers):
                t = time.perf_counter()
                engine.fill(m, mask, i)
                row_us.append(1e6 * (time.perf_counter() - t))
        step_ms.append(1000 * (time.perf_counter() - t_step))
        for i in range(batch):
            if positions[i] >= len(docs[i]):
                matchers[i], positions[i] = engine.matcher(compiled), 0
                continue
            token = docs[i][positions[i]]
            assert allowed(mask, i, token), f"{engine.name}: token {token} masked out"
            assert engine.consume(matchers[i], token)
            positions[i] += 1
    return row_us, step_ms


def run_engine(name: str, tok_dir: Path, batches: list[int], steps: int) -> dict[str, Any]:
    from tokenizers import Tokenizer

    meta = json.loads((tok_dir / "meta.json").read_text())
    tok_path = tok_dir / "tokenizer.json"
    vocab, eos = meta["vocab_size"], meta["eos_id"]
    hf = Tokenizer.from_file(str(tok_path))

    def encode(text: str) -> list[int]:
        return hf.encode(text, add_special_tokens=False).ids

    out: dict[str, Any] = {"engine": name, "vocab": tok_dir.name, "vocab_size": vocab}
    t0 = time.perf_counter()
    try:
        engine = ENGINES[name](tok_path, vocab, eos)
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"[:300]
        return out
    out["setup_s"] = round(time.perf_counter() - t0, 3)
    out["version"] = engine.version
    cases = correctness(engine, encode, eos, vocab)
    out["correct"] = sum(c["passed"] for c in cases)
    out["checks"] = sum(c["total"] for c in cases)
    out["cases"] = cases
    out["timing"] = [timing(engine, encode, vocab, b, steps) for b in batches]
    return out


def export_tokenizers(dest: Path) -> None:
    """SmolLM2's and Gemma-3's tokenizers from the offline GGUF packages (project venv)."""
    import tempfile

    from omlx.models.default_model import find_default_gguf, find_gemma_gguf_parts
    from omlx.models.gguf.reader import join_parts, read_gguf
    from omlx.models.gguf.tokenizer import write_tokenizer

    sources = {"smollm2": find_default_gguf()}
    parts = find_gemma_gguf_parts()
    if parts:
        joined = Path(tempfile.mkdtemp()) / "gemma.gguf"
        sources["gemma3"] = join_parts(parts, joined)
    for name, path in sources.items():
        if path is None:
            continue
        model = read_gguf(path)
        folder = dest / name
        folder.mkdir(parents=True, exist_ok=True)
        special = write_tokenizer(model, folder)
        vocab = len(model.metadata["tokenizer.ggml.tokens"])
        meta = {"vocab_size": vocab, "eos_id": special.eos_ids[0]}
        (folder / "meta.json").write_text(json.dumps(meta))
        print(name, meta)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--export-tokenizers", type=Path)
    ap.add_argument("--tokenizers", type=Path)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--smoke", action="store_true", help="20 steps, SmolLM2's vocabulary only")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.export_tokenizers:
        export_tokenizers(args.export_tokenizers)
        return
    assert args.tokenizers, "--tokenizers DIR (from --export-tokenizers) is required"
    steps = 20 if args.smoke else args.steps
    vocabs = ["smollm2"] if args.smoke else ["smollm2", "gemma3"]
    results = []
    for vocab in vocabs:
        for name in args.engines.split(","):
            r = run_engine(
                name, args.tokenizers / vocab, [int(b) for b in args.batch.split(",")], steps
            )
            r.update(machine=platform.machine(), cpus=os.cpu_count())
            print(json.dumps({k: v for k, v in r.items() if k != "cases"}), flush=True)
            results.append(r)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
