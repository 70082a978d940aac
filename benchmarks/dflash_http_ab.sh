#!/usr/bin/env bash
# `omlx bench` over HTTP, plain against DFlash with a draft, interleaved repeats.
#
#   benchmarks/dflash_http_ab.sh DRAFT_DIR [BLOCK_SIZE=4] [REPEATS=3] > results.jsonl
#
# Both servers are started by `omlx bench` on the default model; the prompts are the
# held-out DFlash prompts (categories interleaved), one request at a time, greedy.
# One JSON line per run: {"rep", "path": "plain"|"dflash", "result": <bench --json>}.
set -euo pipefail
draft=$1
block=${2:-4}
repeats=${3:-3}
common=(--prompts heldout --concurrency 1 --requests 8 --max-tokens 96 --json)
for rep in $(seq 1 "$repeats"); do
    out=$(python -m omlx.cli.main bench "${common[@]}" 2>/dev/null)
    echo "{\"rep\": $rep, \"path\": \"plain\", \"result\": $out}"
    out=$(OMLX_DRAFT__BLOCK_SIZE=$block python -m omlx.cli.main bench --dflash --draft "$draft" \
        "${common[@]}" 2>/dev/null)
    echo "{\"rep\": $rep, \"path\": \"dflash\", \"block_size\": $block, \"result\": $out}"
done
