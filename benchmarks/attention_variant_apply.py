"""Make the fastest measured kernel variant this checkout's default, on a GPU machine.

    python benchmarks/attention_variant_apply.py CHECK.jsonl [--case 8b-decode-64]
        [--margin 0.05] [--apply]

Reads `attention_kernel_check.py --variants ...` output and picks the fastest variant
on the case that beats the module's current defaults there (each line's kernel_ms) by
more than the margin and is no slower than them by more than the margin on any other
case, among those that ran without error or out-of-bounds output. Prints its name, or
"defaults" when none qualifies. With --apply it rewrites the candidate constants of
omlx/mlx_lm_compat/attention_kernel.py in this working tree to the chosen variant, so
a serving run that follows in the same device call measures it.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

KERNEL = Path(__file__).resolve().parent.parent / "omlx/mlx_lm_compat/attention_kernel.py"


def flags(name: str) -> dict[str, str]:
    parts = set(name.split("+")) - {"first"}
    batch = next((p[4:] for p in parts if p.startswith("keys")), "1")
    return {
        "PAIRED_LOADS": str("pairs" in parts),
        "PREFETCH_NEXT_KEY": str("prefetch" in parts),
        "KEY_BATCH": batch,
        "LANE_KEYS": str("lanes" in parts),
    }


def pick(lines: list[dict], case: str, margin: float) -> str | None:
    """The fastest variant on `case` that beats the module's defaults there (the line's
    kernel_ms) by more than `margin` and is not slower than them by more than `margin`
    on any other case, without errors or out-of-bounds outputs; None: keep the defaults."""
    by_case = {line["case"]: line for line in lines}
    if case not in by_case or "kernel_ms" not in by_case[case]:
        return None
    bad = {
        n
        for line in lines
        for n, v in line.get("variants", {}).items()
        if "ms" not in v or not v.get("ok", True)
    }
    timed = {n: v["ms"] for n, v in by_case[case].get("variants", {}).items() if n not in bad}
    for name in sorted(timed, key=timed.get):
        if timed[name] > (1 - margin) * by_case[case]["kernel_ms"]:
            return None  # the rest are slower still
        others = [
            (line["variants"][name]["ms"], line["kernel_ms"])
            for line in lines
            if "kernel_ms" in line and "ms" in line.get("variants", {}).get(name, {})
        ]
        if all(ms <= (1 + margin) * default for ms, default in others):
            return name
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("check")
    ap.add_argument("--case", default="8b-decode-64")
    ap.add_argument("--margin", type=float, default=0.05)
    ap.add_argument("--apply", action="store_true")
    args = ap.parse_args()
    lines = [json.loads(x) for x in Path(args.check).read_text().splitlines() if x.strip()]
    best = pick(lines, args.case, args.margin)
    if best is None:
        print("defaults")
        return 0
    if args.apply:
        text = KERNEL.read_text()
        for name, value in flags(best).items():
            text, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", text, flags=re.M)
            if n != 1:
                raise SystemExit(f"{name} not found once in {KERNEL}")
        KERNEL.write_text(text)
    print(best)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
