"""MLX on the preloaded OpenBLAS gives the same numbers and greedy tokens as on the stock BLAS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from omlx.platform.blas import (
    ENV_MARKER,
    active_blas_library,
    decide,
    optimized_env,
    preload_env,
    stock_env,
)
from tests.fixtures.blas_plugin import SESSION_BLAS_CHOICE

PLAN = decide({"OMLX_BLAS": "auto"}).plan
needs_blas = pytest.mark.skipif(PLAN is None, reason="no optimized BLAS applies on this machine")

# Runs in a fresh interpreter so that the BLAS is chosen at process start, both ways.
PROBE = r"""
import json, sys
import mlx.core as mx, mlx_lm, numpy as np
from mlx_lm.generate import generate_step
from omlx.platform.blas import active_blas_library

out = sys.argv[1]
mx.random.seed(0)
a, b = mx.random.normal((256, 512)), mx.random.normal((512, 384))
q, k, v = (mx.random.normal((1, 4, 37, 16)) for _ in range(3))
m = mx.random.normal((64, 64)) + 16 * mx.eye(64)
arrays = {
    "matmul": a @ b,
    "attention": mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask="causal"),
    "inverse": mx.linalg.inv(m, stream=mx.cpu),  # LAPACK sgetrf_/sgetri_
}
tokens = {}
for name, folder in zip(("llama", "hybrid"), sys.argv[2:]):
    model, tokenizer = mlx_lm.load(folder)
    prompt = mx.array(tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 3))
    arrays[name + "_logits"] = model(prompt[None])[0, -1]
    steps = generate_step(prompt, model, max_tokens=16)
    tokens[name] = [int(t) for t, _ in steps]
np.savez(out + ".npz", **{k: np.array(v) for k, v in arrays.items()})
with open(out + ".json", "w") as f:
    json.dump({"blas": active_blas_library(), "tokens": tokens}, f)
"""


def _probe(tmp_path: Path, name: str, env: dict[str, str], models: list[Path]):
    out = tmp_path / name
    args = [sys.executable, "-c", PROBE, str(out), *map(str, models)]
    subprocess.run(args, env=env, check=True, timeout=240)
    meta = json.loads(out.with_suffix(".json").read_text())
    return dict(np.load(out.with_suffix(".npz"))), meta


@needs_blas
def test_same_results_with_and_without_openblas(tmp_path, tiny_llama_dir, tiny_hybrid_dir):
    assert PLAN is not None
    models = [tiny_llama_dir, tiny_hybrid_dir]
    stock, stock_meta = _probe(tmp_path, "stock", stock_env(), models)
    fast, fast_meta = _probe(tmp_path, "fast", preload_env(stock_env(), PLAN), models)

    assert stock_meta["blas"] is None  # mlx-cpu's private reference BLAS
    assert fast_meta["blas"] == PLAN.library
    for key, expected in stock.items():
        np.testing.assert_allclose(fast[key], expected, rtol=1e-4, atol=1e-4, err_msg=key)
    assert fast_meta["tokens"] == stock_meta["tokens"]
    assert len(set(stock_meta["tokens"]["llama"])) > 2


@needs_blas
def test_env_helpers_for_child_processes():
    fast = optimized_env({"OMLX_BLAS": "off", "PATH": "/bin"})
    assert fast is not None and fast["LD_PRELOAD"].split()[0] == PLAN.library
    assert fast[ENV_MARKER] == PLAN.library
    assert optimized_env(fast)["LD_PRELOAD"] == fast["LD_PRELOAD"]  # never preloaded twice
    stock = stock_env({**fast, "LD_PRELOAD": fast["LD_PRELOAD"] + " /other/lib.so"})
    assert stock["LD_PRELOAD"] == "/other/lib.so"
    assert ENV_MARKER not in stock and stock["OMLX_BLAS"] == "off"


@needs_blas
def test_this_test_session_runs_on_the_optimized_blas():
    if SESSION_BLAS_CHOICE.lower() == "off":
        pytest.skip("session started with OMLX_BLAS=off")
    assert active_blas_library() == PLAN.library


def _reexec_script(log: Path) -> str:
    return (
        "import os, sys\n"
        f"open({str(log)!r}, 'a').write(str(os.getpid()) + '\\n')\n"
        "from omlx.platform.blas import reexec_with_blas, active_blas_library\n"
        "reexec_with_blas()\n"
        "print(active_blas_library(), sys.argv[1:], repr(sys.stdin.read()))\n"
        "sys.exit(7)\n"
    )


@needs_blas
def test_reexec_keeps_argv_stdin_exit_code_and_runs_once(tmp_path):
    log = tmp_path / "starts.log"
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", ENV_MARKER)}
    env.pop("OMLX_BLAS", None)
    args = [sys.executable, "-c", _reexec_script(log), "a", "b c"]
    proc = subprocess.run(args, env=env, input="hello\n", capture_output=True, text=True)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout.strip() == f"{PLAN.library} ['a', 'b c'] 'hello\\n'"
    pids = log.read_text().split()
    assert len(pids) == 2 and pids[0] == pids[1]  # one execve, same process


def test_reexec_is_a_no_op_when_off(tmp_path):
    log = tmp_path / "starts.log"
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", ENV_MARKER)}
    env["OMLX_BLAS"] = "off"
    args = [sys.executable, "-c", _reexec_script(log)]
    proc = subprocess.run(args, env=env, input="", capture_output=True, text=True)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout.startswith("None [] ")
    assert len(log.read_text().split()) == 1


@needs_blas
def test_config_show_reports_the_blas():
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", ENV_MARKER)}
    args = [sys.executable, "-m", "omlx.cli.main", "config", "show", "--json"]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    blas = json.loads(proc.stdout)["blas"]
    assert blas.startswith("OpenBLAS") and blas.endswith(f"preloaded from {PLAN.library}")
