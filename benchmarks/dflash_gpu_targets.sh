#!/usr/bin/env bash
# A trained DFlash draft against plain decoding on a GPU, the default model's target
# loaded in up to three ways, one after the other in one device call:
#
#   benchmarks/dflash_gpu_targets.sh GGUF_PART_DIR DRAFT_DIR OUT_JSONL [ARMS]
#
# ARMS (default float32,float32-fused,keep; comma-separated):
#   float32        the GGUF imported in float32, loaded as stored (runs 1-4 measured this);
#   float32-fused  the same with q/k/v and gate/up fused, as `omlx serve` loads it on CUDA;
#   float32-gemv   float32, the target's and draft's small linears computing a few rows as
#                  one batched gemv (`--row-gemv`, omlx/mlx_lm_compat/row_gemv.py): no
#                  cuBLASLt capture per matmul in a verify or a draft pass;
#   keep-gemv      keep (below) with the target's few-query attention and the draft's linears
#                  and attention as batched gemvs (`--row-gemv`, row_attention.py): what
#                  `omlx serve` runs on CUDA (engine.row_gemv auto chooses the 4-bit model);
#   float32-kernel float32-gemv with the target's attention of the verify as omlx's own CUDA
#                  kernel (`--attention-kernel`, attention_kernel.py); keep-kernel likewise;
#   keep           its Q4_1 blocks kept as MLX 4-bit with float16 activations: what
#                  `omlx serve` imports its default model as on a GPU (engine.dtype auto).
#                  On CUDA a quantized matmul of several rows is MLX's own kernel, a graph
#                  kernel node, where a float one is a cuBLASLt call captured into a child
#                  graph: the host cost that a 16-token verify paid per matmul (runs 3-4).
# Each arm: greedy, LOOPS (default sequential,pipelined), blocks of BLOCK_SIZES (default
# 16; e.g. 16,8,4: a verify of fewer rows costs less, and τ seldom reaches a block's end),
# PER_CATEGORY (5) held-out prompts per category, MAX_TOKENS (128), one profiled prompt
# per category; JSON lines appended to OUT_JSONL (the arm is in each line's model/fused_projections/model_dtype fields).
set -euo pipefail
parts=$1
draft=$2
out=$3
arms=${4:-float32,float32-fused,keep}
export PYTHONUNBUFFERED=1 OMLX_HOME=${OMLX_HOME:-/root/omlx}
first=$(ls "$parts"/*.gguf* | sort | head -1)
start=$(date +%s)
for arm in ${arms//,/ }; do
    case $arm in
        float32|float32-fused|float32-gemv|float32-kernel) dtype=float32 name=SmolLM2-135M-Instruct ;;
        keep|keep-gemv|keep-kernel) dtype=keep name=SmolLM2-135M-Instruct-q4 ;;
        *) echo "unknown arm $arm" >&2; exit 2 ;;
    esac
    if [[ ! -f $OMLX_HOME/models/$name/config.json ]]; then
        python3 -m omlx.cli.main pull "$first" --dtype "$dtype" --name "$name" >/dev/null
    fi
    flags=()
    [[ $arm == float32-fused ]] && flags=(--fused-projections)
    [[ $arm == float32-gemv || $arm == keep-gemv ]] && flags=(--row-gemv)
    [[ $arm == *-kernel ]] && flags=(--row-gemv --attention-kernel)
    echo "== $arm after $(( $(date +%s) - start )) s"
    python3 -m benchmarks.dflash_trained --model "$OMLX_HOME/models/$name" --draft "$draft" \
        --per-category "${PER_CATEGORY:-5}" --max-tokens "${MAX_TOKENS:-128}" \
        --temperatures 0 --loops "${LOOPS:-sequential,pipelined}" --profile-prompts 1 \
        --block-sizes "${BLOCK_SIZES:-16}" \
        "${flags[@]}" --out "$out" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if r.get("category") == "all":
        print(r["loop"], "block", r["draft_block_size"], "tau", round(r["acceptance_length"], 2), "speedup", round(r["speedup"], 2),
              "identical", r.get("identical"), "cycle ms", round(r["dflash_ms_per_cycle"], 2),
              "plain ms/token", round(r["plain_ms_per_token"], 2), flush=True)'
done
echo "all done after $(( $(date +%s) - start )) s"
