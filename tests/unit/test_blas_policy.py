"""The BLAS preload decision (omlx.platform.blas) without MLX: choices, env building, guards."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from omlx.platform import blas
from omlx.platform.blas import BlasConfigError, BlasPlan, decide, is_preloaded, preload_env


@pytest.fixture
def cpu_backend(monkeypatch):
    monkeypatch.setattr(blas, "mlx_backend", lambda: "cpu")


@pytest.mark.parametrize("value", ["off", "OFF", "0", "none", "reference", " false "])
def test_off_values_disable(value):
    decision = decide({"OMLX_BLAS": value}, platform="linux")
    assert decision.plan is None
    assert "OMLX_BLAS=" in decision.reason


def test_never_on_macos():
    decision = decide({}, platform="darwin")
    assert decision.plan is None and "macOS" in decision.reason


@pytest.mark.parametrize("backend", ["cuda", "missing"])
def test_only_with_the_cpu_backend(monkeypatch, backend):
    monkeypatch.setattr(blas, "mlx_backend", lambda: backend)
    decision = decide({}, platform="linux")
    assert decision.plan is None and backend in decision.reason


def test_explicit_library_path(cpu_backend, tmp_path):
    library = tmp_path / "libmyblas.so"
    library.write_bytes(b"")
    plan = decide({"OMLX_BLAS": str(library)}, platform="linux").plan
    assert plan == BlasPlan(str(library.resolve()), "OMLX_BLAS")


def test_explicit_missing_library_is_a_clear_error(cpu_backend, tmp_path):
    with pytest.raises(BlasConfigError, match="expected 'auto', 'off' or the path"):
        decide({"OMLX_BLAS": str(tmp_path / "nope.so")}, platform="linux")


def test_auto_without_any_openblas(cpu_backend, monkeypatch):
    monkeypatch.setattr(blas, "_ngsolve_openblas", lambda: None)
    monkeypatch.setattr(blas, "_cmeel_openblas", lambda: None)
    monkeypatch.setattr(blas, "_system_openblas", lambda: None)
    decision = decide({}, platform="linux")
    assert decision.plan is None and "pip install ngsolve-openblas" in decision.reason


def test_auto_prefers_the_dynamic_arch_package(cpu_backend, monkeypatch):
    ngsolve = BlasPlan("/x/libopenblasp-r0.3.33.so", "ngsolve-openblas", ("/shim",))
    cmeel = BlasPlan("/x/libopenblas.so.0", "cmeel-openblas", ("/shim",))
    system = BlasPlan("libopenblas.so.0", "system")
    monkeypatch.setattr(blas, "_ngsolve_openblas", lambda: ngsolve)
    monkeypatch.setattr(blas, "_cmeel_openblas", lambda: cmeel)
    monkeypatch.setattr(blas, "_system_openblas", lambda: system)
    assert decide({"OMLX_BLAS": "auto"}, platform="linux").plan == ngsolve
    monkeypatch.setattr(blas, "_ngsolve_openblas", lambda: None)
    assert decide({"OMLX_BLAS": "auto"}, platform="linux").plan == system
    monkeypatch.setattr(blas, "_system_openblas", lambda: None)
    assert decide({"OMLX_BLAS": "auto"}, platform="linux").plan == cmeel


@pytest.mark.parametrize(
    ("config", "flags", "runs"),
    [
        (b"OpenBLAS 0.3.31 NO_AFFINITY SKYLAKEX MAX_THREADS=4", {"avx2", "fma"}, False),
        (b"OpenBLAS 0.3.31 NO_AFFINITY SKYLAKEX MAX_THREADS=4", {"avx2", "avx512f"}, True),
        (b"OpenBLAS 0.3.29 NO_AFFINITY ZEN MAX_THREADS=64", {"avx2", "fma"}, True),
        (b"OpenBLAS 0.3.33 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=128", {"sse2"}, True),
        (b"", {"avx2"}, True),  # no config string found: trust it
    ],
)
def test_single_target_avx512_builds_are_refused_without_avx512(tmp_path, config, flags, runs):
    # The 0.3.31 cmeel-openblas wheel (SKYLAKEX) died of SIGILL on an AVX2-only EPYC VM.
    library = tmp_path / "libopenblas.so.0"
    library.write_bytes(b"\x7fELF" + b"\0" * 64 + config + b"\0tail")
    assert blas.runs_on_this_cpu(library, frozenset(flags)) is runs


def test_preload_env_prepends_and_marks():
    plan = BlasPlan("/x/libopenblas.so.0", "cmeel-openblas", ("/shim",))
    env = {"LD_PRELOAD": "/y/libfoo.so", "LD_LIBRARY_PATH": "/lib/a", "HOME": "/h"}
    out = preload_env(env, plan)
    assert out["LD_PRELOAD"] == "/x/libopenblas.so.0 /y/libfoo.so"
    assert out["LD_LIBRARY_PATH"] == "/shim:/lib/a"
    assert out[blas.ENV_MARKER] == "/x/libopenblas.so.0"
    assert out["HOME"] == "/h"
    assert out["MALLOC_ARENA_MAX"] == "2"
    assert env == {"LD_PRELOAD": "/y/libfoo.so", "LD_LIBRARY_PATH": "/lib/a", "HOME": "/h"}
    assert preload_env({"MALLOC_ARENA_MAX": "8"}, plan)["MALLOC_ARENA_MAX"] == "8"  # theirs
    assert preload_env({}, BlasPlan("/x/lib.so", "OMLX_BLAS"))["LD_PRELOAD"] == "/x/lib.so"


def test_preload_env_leaves_a_core_for_the_server_threads(monkeypatch):
    plan = BlasPlan("/x/libopenblas.so.0", "cmeel-openblas")
    monkeypatch.setattr(blas.os, "cpu_count", lambda: 2)
    assert preload_env({}, plan)["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setattr(blas.os, "cpu_count", lambda: 16)
    assert preload_env({}, plan)["OPENBLAS_NUM_THREADS"] == "15"
    assert blas.default_num_threads(1) == 1
    # The user's choice wins.
    assert preload_env({"OPENBLAS_NUM_THREADS": "4"}, plan)["OPENBLAS_NUM_THREADS"] == "4"
    assert "OPENBLAS_NUM_THREADS" not in preload_env({"OMP_NUM_THREADS": "3"}, plan)


def test_is_preloaded_by_marker_or_ld_preload():
    plan = BlasPlan("/x/libopenblas.so.0", "cmeel-openblas")
    assert is_preloaded({blas.ENV_MARKER: "/x/libopenblas.so.0"})
    assert is_preloaded({"LD_PRELOAD": "/a.so:/x/libopenblas.so.0"}, plan)
    assert not is_preloaded({"LD_PRELOAD": "/a.so"}, plan)
    assert not is_preloaded({})


def test_shim_links_and_refuses_a_folder_others_can_write(tmp_path):
    target = tmp_path / "libgfortran-abc.so.5.0.0"
    target.write_bytes(b"")
    shim = tmp_path / "shim"
    blas._link_all(shim, {"libgfortran.so.5": target})
    assert (shim / "libgfortran.so.5").resolve() == target.resolve()
    blas._link_all(shim, {"libgfortran.so.5": target})  # idempotent
    shim.chmod(0o777)
    with pytest.raises(OSError, match="not a private folder"):
        blas._link_all(shim, {"libgfortran.so.5": target})


def test_imports_without_mlx():
    code = "import sys; sys.modules['mlx'] = None; import omlx.platform.blas"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
