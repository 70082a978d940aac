"""Run MLX's Linux CPU backend on OpenBLAS instead of the reference BLAS bundled with mlx-cpu.

The `mlx[cpu]` wheel links a netlib reference BLAS (about 6 GFLOP/s for a float32 1024²
matmul on 2 cores here; OpenBLAS: about 300). libmlx.so calls the standard `cblas_*` and
LAPACK (`sgetrf_`, ...) symbols, so a library preloaded before it serves those calls. A
running process cannot preload, so the `omlx` entry point re-executes itself once with
`LD_PRELOAD` set (`reexec_with_blas`); execve keeps the pid, argv, stdin and exit code.

`OMLX_BLAS` chooses: unset or `auto` (OpenBLAS from the `ngsolve-openblas` package, a
DYNAMIC_ARCH build that picks its kernels for the CPU it runs on; else a system
`libopenblas.so.0`; else `cmeel-openblas` where this CPU runs its single-target build),
`off` (the bundled reference BLAS), or a path to a shared library exporting cblas/LAPACK
symbols (MKL's `libmkl_rt.so`, say). Only Linux with the mlx-cpu backend: macOS uses
Accelerate and CUDA does its matmuls on the GPU.

This module is pure Python and never imports MLX: the decision runs before MLX loads.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import mmap
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from omlx.errors import OmlxError

ENV_CHOICE = "OMLX_BLAS"
# Set on the re-executed process: its value is the preloaded library. Guards against loops.
ENV_MARKER = "OMLX_BLAS_PRELOADED"
ENV_AUTO_THREADS = "OMLX_BLAS_AUTO_THREADS"  # set when omlx picked OPENBLAS_NUM_THREADS
OFF_VALUES = frozenset({"off", "0", "false", "no", "none", "reference"})
CMEEL_LIBRARY = "cmeel.prefix/lib/libopenblas.so.0"
NGSOLVE_GLOB = "ngsolve_openblas/libopenblas*.so*"
# Kernel targets of single-target OpenBLAS builds that execute AVX-512 instructions: on a
# CPU (or VM) without avx512f they die of SIGILL at the first matmul.
AVX512_TARGETS = ("SKYLAKEX", "COOPERLAKE", "SAPPHIRERAPIDS", "ZEN5")
CPUINFO = Path("/proc/cpuinfo")
SYSTEM_OPENBLAS = "libopenblas.so.0"
GFORTRAN = "libgfortran.so.5"
LD_SO_CACHE = Path("/etc/ld.so.cache")


class BlasConfigError(OmlxError):
    code = "invalid_blas"


@dataclass(frozen=True, slots=True)
class BlasPlan:
    """What to preload: `library` goes into LD_PRELOAD, `library_dirs` before LD_LIBRARY_PATH."""

    library: str
    source: str
    library_dirs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BlasDecision:
    plan: BlasPlan | None
    reason: str


def decide(env: Mapping[str, str], *, platform: str = sys.platform) -> BlasDecision:
    """Whether and what to preload, from the environment and the installed packages."""
    choice = env.get(ENV_CHOICE, "auto").strip()
    if choice.lower() in OFF_VALUES:
        return BlasDecision(None, f"{ENV_CHOICE}={choice}")
    if not platform.startswith("linux"):
        return BlasDecision(None, "not Linux (MLX uses Accelerate on macOS)")
    backend = mlx_backend()
    if backend != "cpu":
        return BlasDecision(None, f"MLX backend is {backend}, not the Linux CPU build")
    if choice.lower() != "auto":
        path = Path(choice).expanduser()
        if not path.is_file():
            raise BlasConfigError(
                f"{ENV_CHOICE}={choice!r}: expected 'auto', 'off' or the path of a shared "
                "library exporting cblas/LAPACK symbols"
            )
        return BlasDecision(BlasPlan(str(path.resolve()), ENV_CHOICE), "chosen by OMLX_BLAS")
    plan = _ngsolve_openblas() or _system_openblas() or _cmeel_openblas()
    if plan is None:
        return BlasDecision(None, "no OpenBLAS found (pip install ngsolve-openblas)")
    return BlasDecision(plan, f"found {plan.source}")


def mlx_backend() -> str:
    """'cpu', 'cuda', 'metal' or 'missing', from the installed distributions (MLX not imported)."""
    if sys.platform == "darwin":
        return "metal"
    for name in ("mlx-cuda-13", "mlx-cuda-12", "mlx-cuda"):
        if _has_distribution(name):
            return "cuda"
    return "cpu" if _has_distribution("mlx-cpu") else "missing"


def preload_env(env: Mapping[str, str], plan: BlasPlan) -> dict[str, str]:
    """`env` plus LD_PRELOAD/LD_LIBRARY_PATH for `plan` and the loop-guard marker."""
    out = dict(env)
    out["LD_PRELOAD"] = _prepend(plan.library, env.get("LD_PRELOAD", ""), " ")
    for directory in reversed(plan.library_dirs):
        out["LD_LIBRARY_PATH"] = _prepend(directory, out.get("LD_LIBRARY_PATH", ""), ":")
    out[ENV_MARKER] = plan.library
    # The re-exec is the one moment to tune glibc's malloc, which reads this at start:
    # two arenas instead of eight per core keep what a burst of requests leaves resident
    # ~650 MB lower on the default model (storms in test_disconnect_storm.py), no slower.
    out.setdefault("MALLOC_ARENA_MAX", "2")
    if "OPENBLAS_NUM_THREADS" not in env and "OMP_NUM_THREADS" not in env:
        out["OPENBLAS_NUM_THREADS"] = str(default_num_threads())
        out[ENV_AUTO_THREADS] = "1"  # omlx chose the count: blas_threads may change it
    return out


def thread_control() -> Callable[[int], None] | None:
    """Sets the loaded OpenBLAS's thread count, when omlx chose it (None otherwise)."""
    if os.environ.get(ENV_AUTO_THREADS) != "1":
        return None
    try:
        set_threads = ctypes.CDLL(None).openblas_set_num_threads
    except (AttributeError, OSError):
        return None
    set_threads.argtypes = [ctypes.c_int]
    set_threads.restype = None
    return set_threads


def default_num_threads(num_cores: int | None = None) -> int:
    """One BLAS thread fewer than cores: the server's own threads need a core.

    OpenBLAS threads spin at barriers; when one of them loses its core to another thread,
    a whole matmul waits (measured on 2 cores with one core busy: prefill fell from ~190 to
    ~25 tok/s with 2 threads, and stayed at ~190 with 1). This is the starting count; while
    other processes leave the machine alone, blas_threads.py raises it to every core.
    """
    return max(1, (num_cores or os.cpu_count() or 1) - 1)


def optimized_env(env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """`env` (default: os.environ) with the optimized BLAS preloaded, for child processes.

    For benchmarks that start other programs (mlx_lm.server, a stock-vs-optimized probe)
    on the same BLAS omlx uses; None where none applies (macOS, CUDA, none installed).
    `OMLX_BLAS=off` in `env` counts as `auto` here: it only says this process runs stock.
    Unlike a bare LD_PRELOAD, this also makes the library's own deps loadable.
    """
    env = os.environ if env is None else env
    choice = env.get(ENV_CHOICE, "auto")
    if choice.strip().lower() in OFF_VALUES:
        choice = "auto"
    plan = decide({ENV_CHOICE: choice}).plan
    if plan is None:
        return None
    if is_preloaded({"LD_PRELOAD": env.get("LD_PRELOAD", "")}, plan):
        return {**env, ENV_MARKER: plan.library}
    return preload_env(env, plan)


def stock_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` without any BLAS preload and with OMLX_BLAS=off: MLX's bundled reference BLAS."""
    env = os.environ if env is None else env
    ours = {env.get(ENV_MARKER, "")}
    plan = decide({ENV_CHOICE: "auto"}).plan
    if plan is not None:
        ours.add(plan.library)
    out = {k: v for k, v in env.items() if k not in (ENV_MARKER, ENV_AUTO_THREADS)}
    kept = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p not in ours]
    if kept:
        out["LD_PRELOAD"] = " ".join(kept)
    else:
        out.pop("LD_PRELOAD", None)
    out[ENV_CHOICE] = "off"
    return out


def is_preloaded(env: Mapping[str, str], plan: BlasPlan | None = None) -> bool:
    """True in a process started with the BLAS already preloaded (never re-exec it again)."""
    if env.get(ENV_MARKER):
        return True
    preload = env.get("LD_PRELOAD", "").replace(":", " ").split()
    return plan is not None and plan.library in preload


def reexec_with_blas(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> None:
    """Replace this process by itself with the BLAS preloaded; return if nothing to do.

    `argv` defaults to `sys.orig_argv` (interpreter options, `-m module` and script kept).
    """
    env = os.environ if env is None else env
    if is_preloaded(env) or "_OMLX_COMPLETE" in env:  # shell completion must stay instant
        return
    try:
        decision = decide(env)
    except BlasConfigError as e:
        print(f"omlx: {e.message}; continuing on MLX's reference BLAS", file=sys.stderr)
        return
    if decision.plan is None or is_preloaded(env, decision.plan):
        return
    args = list(sys.orig_argv if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, args, preload_env(env, decision.plan))
    except OSError as e:  # exec failed: this process is intact, run as is
        print(f"omlx: could not re-execute with {decision.plan.library}: {e}", file=sys.stderr)


def active_blas_library() -> str | None:
    """The file whose `cblas_sgemm` this process resolves first, or None if none is global.

    A preloaded library sits in the global scope, ahead of libmlx's own dependencies, so
    this is the BLAS MLX calls. mlx-cpu's bundled BLAS is loaded privately and not seen.
    """
    try:
        process = ctypes.CDLL(None)
        symbol = process.cblas_sgemm
    except (AttributeError, OSError):
        return None
    return _library_of(process, ctypes.cast(symbol, ctypes.c_void_p).value)


def blas_description() -> str:
    """One line for logs, `omlx config show` and /api/stats: which BLAS MLX runs on."""
    backend = mlx_backend()
    if backend == "metal":
        return "Accelerate (macOS)"
    if backend == "cuda":
        return "not used for matmuls (CUDA backend)"
    library = active_blas_library()
    if library is None:
        try:
            reason = decide(os.environ).reason
        except BlasConfigError as e:
            reason = e.message
        return f"reference BLAS bundled with mlx-cpu (slow; {reason})"
    return f"{_openblas_config() or Path(library).name}, preloaded from {library}"


def _ngsolve_openblas() -> BlasPlan | None:
    try:
        dist = importlib.metadata.distribution("ngsolve-openblas")
    except importlib.metadata.PackageNotFoundError:
        return None
    found = sorted(Path(str(dist.locate_file("."))).glob(NGSOLVE_GLOB))
    return _with_fortran(found[0], "ngsolve-openblas") if found else None


def _cmeel_openblas() -> BlasPlan | None:
    try:
        dist = importlib.metadata.distribution("cmeel-openblas")
    except importlib.metadata.PackageNotFoundError:
        return None
    library = Path(str(dist.locate_file(CMEEL_LIBRARY)))
    if not library.is_file() or not runs_on_this_cpu(library):
        return None
    return _with_fortran(library, "cmeel-openblas")


def _with_fortran(library: Path, source: str) -> BlasPlan | None:
    # These OpenBLAS builds need the Fortran runtime; mlx-cpu ships one under a hashed name.
    dirs = () if _system_has(GFORTRAN) else _gfortran_shim()
    if dirs is None:
        return None
    return BlasPlan(str(library), source, dirs)


def runs_on_this_cpu(library: Path, cpu_flags: frozenset[str] | None = None) -> bool:
    """False for a single-target OpenBLAS built for AVX-512 on a CPU without it.

    The build's config string ("OpenBLAS 0.3.31 NO_AFFINITY SKYLAKEX ...") is read from
    the file, not by loading it: loading is safe, but the first matmul would not be.
    """
    config = openblas_build_config(library)
    if config is None or "DYNAMIC_ARCH" in config:
        return True
    flags = cpu_flags if cpu_flags is not None else _cpu_flags()
    return "avx512f" in flags or not any(t in config.split() for t in AVX512_TARGETS)


def openblas_build_config(library: Path) -> str | None:
    try:
        with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            at = m.find(b"OpenBLAS 0.")
            if at < 0:
                return None
            end = m.find(b"\0", at, at + 200)
            return m[at : end if end > 0 else at + 200].decode(errors="replace")
    except (OSError, ValueError):
        return None


def _cpu_flags() -> frozenset[str]:
    try:
        text = CPUINFO.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def _system_openblas() -> BlasPlan | None:
    return BlasPlan(SYSTEM_OPENBLAS, "system") if _system_has(SYSTEM_OPENBLAS) else None


def _system_has(soname: str) -> bool:
    # ld.so.cache lists the libraries the dynamic loader finds by name; reading it is cheap.
    try:
        return soname.encode() + b"\0" in LD_SO_CACHE.read_bytes()
    except OSError:
        return False


def _gfortran_shim() -> tuple[str, ...] | None:
    """A folder where `libgfortran.so.5` links to mlx-cpu's renamed copy, or None if absent."""
    try:
        dist = importlib.metadata.distribution("mlx-cpu")
    except importlib.metadata.PackageNotFoundError:
        return None
    libs = Path(str(dist.locate_file("mlx_cpu.libs")))
    gfortran = sorted(libs.glob("libgfortran-*.so*"))
    if not gfortran:
        return None
    # Its RPATH is $ORIGIN, resolved from the link's folder: link its deps there too.
    targets = {GFORTRAN: gfortran[0]} | {p.name: p for p in libs.glob("libquadmath-*.so*")}
    key = hashlib.sha256(str(libs).encode()).hexdigest()[:12]
    shim = Path(tempfile.gettempdir()) / f"omlx-blas-{os.getuid()}-{key}"
    try:
        _link_all(shim, targets)
    except OSError:
        return None
    return (str(shim),)


def _link_all(shim: Path, targets: dict[str, Path]) -> None:
    if shim.exists() or shim.is_symlink():
        # The folder sits in a shared temp dir: trust only a real folder of ours that
        # nobody else can write, since the loader will run what it links to.
        st = shim.lstat()
        if shim.is_symlink() or st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise OSError(f"{shim} is not a private folder of this user")
        if all((shim / n).resolve() == t.resolve() for n, t in targets.items()):
            return
    # Build beside, then rename: concurrent starts never see a half-made folder.
    tmp = Path(tempfile.mkdtemp(prefix=shim.name + ".", dir=shim.parent))
    for name, target in targets.items():
        (tmp / name).symlink_to(target)
    try:
        tmp.rename(shim)
    except OSError:  # another process made it first (or a stale one is in the way)
        for name in targets:
            (tmp / name).unlink()
        tmp.rmdir()
        if not all((shim / n).resolve() == t.resolve() for n, t in targets.items()):
            raise


def _has_distribution(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _prepend(item: str, current: str, sep: str) -> str:
    return f"{item}{sep}{current}" if current else item


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _library_of(process: ctypes.CDLL, address: int | None) -> str | None:
    info = _DlInfo()
    try:
        dladdr = process.dladdr
    except AttributeError:
        return None
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    if not address or not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return info.dli_fname.decode(errors="replace")


def _openblas_config() -> str | None:
    try:
        process = ctypes.CDLL(None)
        get_config = process.openblas_get_config
        num_threads = process.openblas_get_num_threads()
    except (AttributeError, OSError):
        return None
    get_config.restype = ctypes.c_char_p
    config = (get_config() or b"OpenBLAS").decode(errors="replace").strip()
    return f"{config} ({num_threads} thread{'' if num_threads == 1 else 's'})"
