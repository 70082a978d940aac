#!/usr/bin/env bash
# `omlx bench` over HTTP, plain against DFlash with a draft, interleaved repeats.
#
#   benchmarks/dflash_http_ab.sh DRAFT_DIR [BLOCK_SIZE=4] [REPEATS=3] > results.jsonl
#
# Both servers are started by `omlx bench` on the default model; the prompts are the
# held-out DFlash prompts (categories interleaved), one request at a time, greedy.
# One JSON line per run: {"rep", "path": "plain"|"dflash", "result": <bench --json>}.
# ATTENTION (e.g. "auto kernel"): a DFlash run per rep for each engine.decode_attention
# value, its line carrying "attention"; unset, one DFlash run with the server's default.
# PYTHON names the interpreter (default python).
set -euo pipefail
draft=$1
block=${2:-4}
repeats=${3:-3}
common=(--prompts heldout --concurrency 1 --requests 8 --max-tokens 96 --json)
py=${PYTHON:-python}
for rep in $(seq 1 "$repeats"); do
    out=$($py -m omlx.cli.main bench "${common[@]}" 2>/dev/null)
    echo "{\"rep\": $rep, \"path\": \"plain\", \"result\": $out}"
    for attention in ${ATTENTION:-default}; do
        env=(OMLX_DRAFT__BLOCK_SIZE=$block)
        [[ $attention != default ]] && env+=(OMLX_ENGINE__DECODE_ATTENTION=$attention)
        out=$(env "${env[@]}" $py -m omlx.cli.main bench --dflash --draft "$draft" \
            "${common[@]}" 2>/dev/null)
        echo "{\"rep\": $rep, \"path\": \"dflash\", \"attention\": \"$attention\", \"block_size\": $block, \"result\": $out}"
    done
done
