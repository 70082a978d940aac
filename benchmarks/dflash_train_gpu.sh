#!/usr/bin/env bash
# Train the default model's DFlash draft on a GPU machine, within a wall-clock deadline.
#
#   benchmarks/dflash_train_gpu.sh GGUF_PART_DIR DRAFT_DIR [DEADLINE_S]
#
# GGUF_PART_DIR holds SmolLM2-135M-Instruct.Q4_1.gguf (or its .partNN pieces, which
# `omlx pull` joins); the model is imported once, in bfloat16. The target then writes its
# replies (`--data-only`, at most DATA_MAX_S seconds, default 180; replies not written
# by then are left for a later run), and training gets whatever the deadline leaves (at
# most TRAIN_MAX_S, default 300 s), so the script ends inside DEADLINE_S (default 560).
# DTYPE (default bfloat16) is the dtype the target is imported in.
# SAMPLED (default 1) is the number of sampled replies per prompt besides the greedy one;
# a run with more finds the finished data of fewer in DRAFT_DIR/data and adds only the
# missing passes, so data can grow across device sessions (carry the data file along).
# Training keeps each sequence's target states after its first epoch (--cache-context:
# ~22 GB of GPU memory for the default model's 9,600 replies in float32; on an 80 GB
# card with more data, add --cache-dtype bfloat16 to TRAIN_FLAGS to halve it).
# GEN_BATCH (default 256, the carried data's) is the number of replies written at once;
# it is part of the data's name (batched sampling draws depend on it), so another value
# starts a new data file (1,024 rows wrote ~2x the tokens a second of 256 on an H100).
# GEN_JOIN (default 1, the carried data's) lets new prompts join the generating batch
# only once that many rows are free, in one prefill (`--gen-join`; each freed row was
# refilled at once, a forward pass of its own beside each ~31 ms decode step, and data
# generation ran at ~100 ms a step); like GEN_BATCH it names new data when not 1.
# INIT_FROM (a trained draft's folder, e.g. the last session's, carried along) starts
# training from its weights (`--init-from`) instead of random ones.
# EXTRA_DATA (space-separated data files of the same target, finished or not, each with the
# .meta.json record that writing or reusing data leaves beside it) adds their training
# replies (`--extra-data`): e.g. the carried replies, while GEN_BATCH / GEN_JOIN write
# new ones faster into a file of their own.
# MORE_DATA_S (default unset: none) then writes greedy replies to the more-prompts set
# (`--prompts more`: 7,200 new training prompts) for at most that many seconds (0: none
# new, only what DRAFT_DIR/data holds, e.g. in a RESUME call), at
# MORE_GEN_BATCH rows and MORE_GEN_JOIN (defaults 256 and 1, the carried CPU data's;
# both name the data, so keep them to continue a carried partial file), and
# trains on them as extra data, finished or not (a partial file carries its record); a
# later call, or another machine, with the same file in DRAFT_DIR/data goes on with it.
# SCHEDULE_S fixes the training schedule's length (`--time-budget`, seconds of steps)
# instead of taking what the deadline leaves, for a run longer than one device call:
# each call still ends inside DEADLINE_S (`--wall-budget` saves a checkpoint), and the
# next call with RESUME=1 (`--resume`) goes on with the same schedule from there.
# SMOKE_FLAGS (e.g. "--max-prompts 8 --max-new-tokens 8 --batch-size 2") are appended
# to both commands, for a rehearsal on a CPU; TRAIN_FLAGS to the training command only. The GPU must be free: another process
# holding its memory makes CUDA graph instantiation fail with out of memory.
set -euo pipefail
parts=$1
draft=$2
deadline=${3:-560}
start=$(date +%s)
export PYTHONUNBUFFERED=1 OMLX_HOME=${OMLX_HOME:-/root/omlx}
omlx() { python3 -m omlx.cli.main "$@"; }

if [[ ! -f $OMLX_HOME/models/SmolLM2-135M-Instruct/config.json ]]; then
    first=$(ls "$parts"/*.gguf* | sort | head -1)
    omlx pull "$first" --dtype "${DTYPE:-bfloat16}" --name SmolLM2-135M-Instruct >/dev/null
fi
echo "import done after $(( $(date +%s) - start )) s"

common=(--target SmolLM2-135M-Instruct --out "$draft"
        --max-new-tokens 256 --sampled "${SAMPLED:-1}" --sample-temperature 0.7
        --gen-batch "${GEN_BATCH:-256}" --gen-join "${GEN_JOIN:-1}")
read -r -a smoke <<< "${SMOKE_FLAGS:-}"
omlx draft train "${common[@]}" --data-only --data-budget "${DATA_MAX_S:-180}" --json \
    "${smoke[@]}" | grep -v '"kind": "data"' || true

extra=()
for f in ${EXTRA_DATA:-}; do extra+=(--extra-data "$f"); done
if [[ -n ${MORE_DATA_S:-} ]]; then
    more=$(omlx draft train --target SmolLM2-135M-Instruct --out "$draft" --prompts more \
        --max-new-tokens 256 --sampled 0 --gen-batch "${MORE_GEN_BATCH:-256}" \
        --gen-join "${MORE_GEN_JOIN:-1}" --data-only --data-budget "$MORE_DATA_S" --json \
        "${smoke[@]}" | tail -1)
    echo "$more"
    more_file=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["data"]["file"])' "$more")
    extra+=(--extra-data "$more_file")
    echo "more data: $more_file"
fi
elapsed=$(( $(date +%s) - start ))
budget=$(( deadline - elapsed - 60 ))
(( budget > ${TRAIN_MAX_S:-300} )) && budget=${TRAIN_MAX_S:-300}
[[ -n ${SCHEDULE_S:-} ]] && budget=$SCHEDULE_S
echo "data done after $elapsed s; training for $budget s"
# --wall-budget is the hard stop: the time budget counts training steps only, and run 5's
# evaluations and loading took ~140 s beyond it, past the device call's limit.
wall=$(( deadline - $(date +%s) + start - 20 ))
omlx draft train "${common[@]}" --data-budget 0 --time-budget "$budget" --steps 1000000 \
    --wall-budget "$wall" \
    --batch-size 32 --anchors 32 --lr 8e-4 --warmup 0.04 --block-size 16 \
    --eval-every 200 --checkpoint-every 2000 --save-dtype bfloat16 --shard-mb 15 --json \
    --cache-context ${INIT_FROM:+--init-from "$INIT_FROM"} ${RESUME:+--resume} "${extra[@]}" \
    "${smoke[@]}" ${TRAIN_FLAGS:-}
echo "all done after $(( $(date +%s) - start )) s"
