"""benchmarks/attention_variant_apply.py: which measured kernel variant a GPU call makes
its device copy's default before its serving run, and how it rewrites the constants."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[3]
SCRIPT = ROOT / "benchmarks/attention_variant_apply.py"


def _load():
    # benchmarks/ is no package: load the module from its file, as the scripts find it.
    spec = importlib.util.spec_from_file_location("attention_variant_apply", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _line(case, default_ms, **variants):
    return {
        "case": case,
        "ok": True,
        "kernel_ms": default_ms,
        "variants": {n: {"ms": ms, "ok": True} for n, ms in variants.items()},
    }


def test_the_fastest_that_beats_the_defaults_everywhere_wins():
    pick = _load().pick
    lines = [
        _line("8b-decode-64", 3.5, first=3.8, keys4=3.5, lanes=2.0),
        _line("8b-decode-1", 0.55, first=0.56, keys4=0.55, lanes=0.56),
    ]
    assert pick(lines, "8b-decode-64", 0.05) == "lanes"


def test_a_variant_slower_on_another_case_gives_way_to_the_next():
    pick = _load().pick
    lines = [
        _line("8b-decode-64", 4.0, first=4.0, keys2=3.5, lanes=2.0),
        _line("8b-decode-1", 0.55, first=0.55, keys2=0.56, lanes=0.9),
    ]
    assert pick(lines, "8b-decode-64", 0.05) == "keys2"


def test_nothing_past_the_margin_or_only_broken_variants_keep_the_defaults():
    pick = _load().pick
    assert pick([_line("8b-decode-64", 3.5, first=3.8, keys2=3.4)], "8b-decode-64", 0.05) is None
    broken = _line("8b-decode-64", 3.5, lanes=1.0)
    broken["variants"]["lanes"]["ok"] = False  # out of bounds
    failed = _line("8b-decode-64", 3.5)
    failed["variants"]["keys8"] = {"error": "nvrtc: error"}
    assert pick([broken], "8b-decode-64", 0.05) is None
    assert pick([failed], "8b-decode-64", 0.05) is None


def test_apply_rewrites_the_candidate_constants(tmp_path, monkeypatch):
    module = _load()
    kernel = tmp_path / "attention_kernel.py"
    kernel.write_text(
        "PAIRED_LOADS = True\nPREFETCH_NEXT_KEY = False\nKEY_BATCH = 4\nLANE_KEYS = False\n"
    )
    monkeypatch.setattr(module, "KERNEL", kernel)
    check = tmp_path / "check.jsonl"
    check.write_text(json.dumps(_line("8b-decode-64", 3.5, lanes=2.0)) + "\n")
    monkeypatch.setattr(sys, "argv", ["x", str(check), "--apply"])
    assert module.main() == 0
    assert kernel.read_text() == (
        "PAIRED_LOADS = False\nPREFETCH_NEXT_KEY = False\nKEY_BATCH = 1\nLANE_KEYS = True\n"
    )


def test_the_real_kernel_module_has_every_constant_it_rewrites():
    text = (ROOT / "omlx/mlx_lm_compat/attention_kernel.py").read_text()
    for name in _load().flags("first"):
        assert sum(line.startswith(f"{name} = ") for line in text.splitlines()) == 1, name


def test_it_runs_as_a_script(tmp_path):
    check = tmp_path / "check.jsonl"
    check.write_text(json.dumps(_line("8b-decode-64", 3.5, first=3.8)) + "\n")
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(check)], capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == "defaults"
