#!/usr/bin/env bash
# Where a DFlash cycle's time goes on the lent GPU, in one call: the attention kernel
# against MLX's on SmolLM2's verify and draft shapes (layers chained, as in a model), one
# forward pass of 1 and 16 rows in each layout (row_gemv_probe.py), then greedy DFlash
# cycles with DRAFT in the two CUDA layouts (row-gemv linears with row attention, the
# DFlash default on CUDA; and with omlx's attention kernel for the target's verify and the
# draft's block). An untrained draft of the trained one's shape times the cycle as well
# as the trained one: what it costs does not depend on what it drafts. KERNEL_BLOCKS: the
# kernel's query vectors a block for the kernel arms (0: the module's default), and
# VARIANTS the kernel check's candidates; PROBE_LAYOUTS the probe's layouts (default
# row_gemv,kernel,device,compiled: the last two over device-length caches, the last one
# mx.compile'd); NO_PROBE=1 leaves the probe out, NO_CHECK=1 the kernel check; LOOPS the
# DFlash loops timed (default async,pipelined). OPS_PER_BUFFER (e.g. 25,50): the kernel
# arm again with MLX_MAX_OPS_PER_BUFFER at each value, for plain and DFlash passes alike
# (MLX's CUDA backend launches a pass's recorded graph every that many operations, 100 by
# default on an H100: fewer let the device start a host-bound pass sooner). The lines
# carry the MLX_* environment they ran with (`mlx_env`). FRESH_VIEWS=1: the kernel arm
# again with the row-gemv views built in every call (`--fresh-views`, as before the
# twentieth session), beside the default that keeps them.
#   benchmarks/dflash_verify_gpu.sh MODEL_DIR DRAFT_DIR OUT_DIR
set -euo pipefail
model=$1 draft=$2 out=$3
mkdir -p "$out"
if [[ -z ${NO_CHECK:-} ]]; then
    python3 benchmarks/attention_kernel_check.py --variants "${VARIANTS:-keys4}" \
        --cases smollm2-verify-causal,smollm2-verify-array,smollm2-draft-block,smollm2-decode-64 \
        --out "$out/attention_chained.jsonl" > "$out/attention_chained.log" 2>&1 || true
fi
if [[ -z ${NO_PROBE:-} ]]; then
    python3 -m benchmarks.row_gemv_probe --rows 1,16 --dtypes float32 --kernels --reps 20 \
        --layouts "${PROBE_LAYOUTS:-row_gemv,kernel,device,compiled}" --out "$out/probe.jsonl" > "$out/probe.log" 2>&1 || true
fi
arms=(row_gemv ${KERNEL_BLOCKS:-0})
for ops in ${OPS_PER_BUFFER//,/ }; do arms+=("0@$ops"); done
[[ -n ${FRESH_VIEWS:-} ]] && arms+=(fresh)
for arm in "${arms[@]}"; do
    flags=(--row-gemv)
    ops=${arm#*@}
    [[ $ops == "$arm" ]] && ops=
    arm=${arm%@*}
    if [[ $arm == fresh ]]; then
        flags+=(--attention-kernel --fresh-views)
        arm=kernel-fresh-views
    elif [[ $arm != row_gemv ]]; then
        flags+=(--attention-kernel --kernel-block "$arm")
        arm=kernel$arm${ops:+-ops$ops}
    fi
    ${ops:+env MLX_MAX_OPS_PER_BUFFER=$ops} python3 -m benchmarks.dflash_trained --model "$model" --draft "$draft" --per-category 3 \
        --max-tokens 96 --temperatures 0 --block-sizes 16 --profile-prompts 1 "${flags[@]}" \
        --loops "${LOOPS:-async,pipelined}" \
        --out "$out/cycles.jsonl" > "$out/cycles-$arm.log" 2>&1 || true
done
python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for name in ("attention_chained", "probe", "cycles"):
    path = out / f"{name}.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        d = json.loads(line)
        if name == "cycles" and d.get("category") != "all":
            continue
        if name == "cycles":
            d["cycle_per_plain"] = round(d["dflash_ms_per_cycle"] / d["plain_ms_per_token"], 3)
        keep = {k: v for k, v in d.items() if not isinstance(v, (list, dict)) and k not in
                ("command", "device", "machine", "git", "date", "draft", "model")}
        keep.update({k: v for k, v in d.items() if k in ("profile_ms_per_cycle", "mlx_env")})
        print(name, json.dumps(keep))
PY
