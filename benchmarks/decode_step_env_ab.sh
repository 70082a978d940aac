#!/usr/bin/env bash
# The decode step of the 8B shape (bf16) under MLX's CUDA knobs, each variant in fresh
# processes, round-robin, REPEATS rounds: the 64-row step was 13 ms in some processes and
# 22 ms in others, so one process per variant says nothing. Variants: MLX's defaults;
# CUDA graphs off (MLX_USE_CUDA_GRAPHS=0); 400 ops per graph (MLX_MAX_OPS_PER_BUFFER);
# the host sleeping in its waits instead of spinning (--cuda-sync blocking). Each process
# runs omlx's generator and the bare loop at 1 and 64 rows, weights as loaded and with
# fused projections, with device kernel time and CUDA API calls (--kernels; PyTorch's
# profiler) and the thread's CPU time per step.
#   benchmarks/decode_step_env_ab.sh OUT_FILE [REPEATS] [EXTRA decode_step_anatomy ARGS]
set -uo pipefail
out=$1 repeats=${2:-2}
shift $(( $# < 2 ? $# : 2 ))
variants=("default" "no-graphs" "ops-400" "blocking-sync")
for round in $(seq 1 "$repeats"); do
    for v in "${variants[@]}"; do
        env_args=() flags=()
        case $v in
            no-graphs) env_args=(MLX_USE_CUDA_GRAPHS=0) ;;
            ops-400) env_args=(MLX_MAX_OPS_PER_BUFFER=400) ;;
            blocking-sync) flags=(--cuda-sync blocking) ;;
        esac
        echo "== round $round: $v ($(date '+%H:%M:%S'))"
        env "${env_args[@]}" python3 benchmarks/decode_step_anatomy.py --shape qwen3-8b \
            --dtype bfloat16 --paths fused_sampled,loop --batches 1,64 --steps 32 --kernels \
            --layouts mlx,fused --label "$v-r$round" --out "$out" "${flags[@]}" "$@" \
            | cut -c1-240 || echo "variant $v failed"
    done
done
