"""Make the fastest measured kernel variant this checkout's default, on a GPU machine.

    python benchmarks/attention_variant_apply.py CHECK.jsonl [--case 8b-decode-64]
        [--margin 0.05] [--apply]

Reads `attention_kernel_check.py --variants ...` output, picks the variant with the
lowest time on the case among those that ran without error or out-of-bounds output, and
prints it. With --apply, and when it beats "first" (the first kernel) by more than the
margin on that case and is no slower on any other case, it rewrites the candidate
constants of omlx/mlx_lm_compat/attention_kernel.py in this working tree, so a serving
run that follows in the same device call measures it. Prints the chosen name either way.
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


def pick(lines: list[dict], case: str, margin: float) -> str:
    by_case = {line["case"]: line.get("variants", {}) for line in lines}
    timed = {n: v["ms"] for n, v in by_case.get(case, {}).items() if "ms" in v}
    if "first" not in timed:
        return "first"
    bad = {
        n
        for line in lines
        for n, v in line.get("variants", {}).items()
        if "ms" not in v or not v.get("ok", True)
    }
    best = min((n for n in timed if n not in bad), key=timed.get, default="first")
    if timed[best] > (1 - margin) * timed["first"]:
        return "first"
    for variants in by_case.values():  # no case of the run may get slower
        ours, first = variants.get(best, {}), variants.get("first", {})
        if "ms" in ours and "ms" in first and ours["ms"] > first["ms"] * (1 + margin):
            return "first"
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("check")
    ap.add_argument("--case", default="8b-decode-64")
    ap.add_argument("--margin", type=float, default=0.05)
    ap.add_argument("--apply", action="store_true")
    args = ap.parse_args()
    lines = [json.loads(x) for x in Path(args.check).read_text().splitlines() if x.strip()]
    best = pick(lines, args.case, args.margin)
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
