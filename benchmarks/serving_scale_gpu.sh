#!/usr/bin/env bash
# serving_scale.py on the lent GPU, same-run before/after: this tree's defaults ("auto")
# against the settings the tree had before (prefill 8 prompts at a time, sub-block prefix
# reuse on), then copies the step traces to $OUT. The bare generator runs first (it also
# fills the machine's kernel caches); ORDER=before-first swaps the two HTTP runs,
# ORDER=auto-only leaves the "before" run out, and ORDER=folded runs the defaults and then
# `engine.decode_attention = "folded"` over HTTP (label "folded") instead of "before";
# ORDER=split: the bare generator, an untimed warm-up of omlx's kernels, the defaults
# over HTTP with the models in an engine process (label "auto"), then
# `server.engine_process = "off"` at 64 and 128 streams (label "in-process"), then the
# bare generator again. ORDER=fused: the bare generator, an untimed warm-up, the
# defaults over HTTP (label "auto": fused projections, on by default on CUDA), then
# `engine.fused_projections = "off"` (label "unfused") and fused with folded attention
# at 64 and 128 (label "fused-folded"), then the bare generator again. ORDER=quantized:
# the shape with 4-bit weights, the bare generator then the defaults over HTTP (labels
# "q4-bare", "q4"), after an untimed warm-up. ORDER=check: the bare generator, an untimed
# warm-up, the defaults over HTTP, the bare generator again. ORDER=kernel: ORDER=check
# plus `engine.decode_attention = "mlx"` over HTTP after the defaults (which on CUDA take
# omlx's attention kernel for batched decode). ORDER=lean: the warm-up, the defaults,
# then the bare generator. ORDER=gc: an untimed warm-up, the
# defaults over HTTP, `engine.freeze_gc = false` (label "gc-unfrozen"), the defaults
# again (label "auto-2"): the step traces' gc_s say what the collector took in each.
# ORDER=lean-nr: ORDER=lean, then a pass of `engine.fused_norm_rope = "on"` (label
# "norm-rope"). ORDER=pick: the attention kernel's candidates
# (VARIANTS, default first,keys4,lanes) timed, the fastest applied to this copy, then
# ORDER=lean.
# Where nvidia-smi exists, its plain report (the card, clocks,
# power, other processes) goes into the log at the start and again at the end.
#   benchmarks/serving_scale_gpu.sh TOKENIZER_DIR WORKDIR [BUDGET_S] [LEVELS]
set -euo pipefail
tok=$1 work=$2 budget=${3:-300} levels=${4:-1,32,64,128,256}
gpu_report() {
    if command -v nvidia-smi >/dev/null; then
        echo "== nvidia-smi ($1, $(date '+%Y-%m-%d %H:%M:%S')) =="
        nvidia-smi || true
    fi
}
gpu_report start
trap 'gpu_report end' EXIT  # a failed step still leaves the end report
out=${OUT:-$work/out}
mkdir -p "$out"
common=(--tokenizer "$tok" --workdir "$work" --trace --out "$out/serving_scale.jsonl")
# One pass: run_pass PATHS LABEL [LEVELS] (environment assignments before it apply);
# keep_trace LABEL copies the last HTTP pass's step trace to $out.
run_pass() {
    python3 benchmarks/serving_scale.py "${common[@]}" --levels "${3:-$levels}" \
        --paths "$1" --label "$2" --budget-s "$budget"
}
keep_trace() {
    gzip -c "$work/trace-http.jsonl" > "$out/http-trace-$1.jsonl.gz" || true
}
auto() {
    run_pass "$1" auto
    keep_trace auto
}
before() {
    OMLX_ENGINE__PREFILL_BATCH_SIZE=8 OMLX_CACHE__PARTIAL_BLOCKS=true \
        python3 benchmarks/serving_scale.py "${common[@]}" --levels 32,64,128 \
        --paths "$1" --label before --budget-s "$((budget / 2))"
    keep_trace before
}
if [ "${ORDER:-auto-first}" = before-first ]; then
    run_pass bare auto
    before omlx_http
    auto omlx_http
elif [ "${ORDER:-}" = split ]; then
    # MLX's CUDA backend compiles kernels the first time a shape is seen (seconds each,
    # cached on disk): an untimed pass of omlx's own shapes first, so neither side of the
    # A/B pays them; the bare generator before and after, its better run counts.
    run_pass bare bare-before
    run_pass omlx_http warm-up
    OMLX_SERVER__ENGINE_PROCESS=on auto omlx_http
    OMLX_SERVER__ENGINE_PROCESS=off run_pass omlx_http in-process 64,128
    keep_trace in-process
    run_pass bare bare-after
elif [ "${ORDER:-}" = fused ]; then
    run_pass bare bare-before
    run_pass omlx_http warm-up 1,64
    auto omlx_http
    OMLX_ENGINE__FUSED_PROJECTIONS=off run_pass omlx_http unfused
    keep_trace unfused
    OMLX_ENGINE__FUSED_PROJECTIONS=on OMLX_ENGINE__DECODE_ATTENTION=folded \
        run_pass omlx_http fused-folded 64,128
    keep_trace fused-folded
    run_pass bare bare-after
elif [ "${ORDER:-}" = quantized ]; then
    # The same shape with 4-bit weights (groups of 64, bf16 scales): a quantized matmul of
    # many rows is MLX's own kernel on CUDA, not a cuBLASLt call captured per step.
    q4=(--quantize 4)
    python3 benchmarks/serving_scale.py "${common[@]}" "${q4[@]}" --levels "$levels" \
        --paths bare --label q4-bare --budget-s "$budget"
    python3 benchmarks/serving_scale.py "${common[@]}" "${q4[@]}" --levels 1,64 \
        --paths omlx_http --label q4-warm-up --budget-s "$budget"
    python3 benchmarks/serving_scale.py "${common[@]}" "${q4[@]}" --levels "$levels" \
        --paths omlx_http --label q4 --budget-s "$budget"
    keep_trace q4
elif [ "${ORDER:-}" = check ] || [ "${ORDER:-}" = kernel ]; then
    # The done-when in one run: the bare generator, an untimed warm-up of omlx's kernels
    # at every level (the first run's warm-up covered 1 and 64 streams, and its 32-stream
    # level then held a 2.6 s step when its rows left: a kernel compiled on first use),
    # the defaults over HTTP, the bare generator again (its better run counts).
    # ORDER=kernel adds, after the defaults (omlx's CUDA attention kernel for batched
    # decode), MLX's own attention over HTTP (label "mlx-attention").
    run_pass bare bare-before
    run_pass omlx_http warm-up
    auto omlx_http
    if [ "${ORDER}" = kernel ]; then
        OMLX_ENGINE__DECODE_ATTENTION=mlx run_pass omlx_http mlx-attention
        keep_trace mlx-attention
    fi
    run_pass bare bare-after
elif [ "${ORDER:-}" = lean ]; then
    # Three passes where device time is short: the untimed warm-up, the defaults over
    # HTTP, then the bare generator (label "bare-after").
    run_pass omlx_http warm-up
    auto omlx_http
    run_pass bare bare-after
elif [ "${ORDER:-}" = pick ]; then
    # The attention kernel's candidates ($VARIANTS) timed on the 8B shape's decode, the
    # fastest made this working copy's default (attention_variant_apply.py: only past a
    # 5% gain and no case slower), then ORDER=lean with it.
    python3 benchmarks/attention_kernel_check.py --repeats 5 \
        --variants "${VARIANTS:-first,keys4,lanes}" --out "$out/attention_check.jsonl" \
        --cases 8b-decode-1,8b-decode-64,8b-decode-128,8b-decode-256,8b-decode-64-long || true
    echo "attention variant: $(python3 benchmarks/attention_variant_apply.py \
        "$out/attention_check.jsonl" --apply)"
    run_pass omlx_http warm-up
    auto omlx_http
    run_pass bare bare-after
elif [ "${ORDER:-}" = lean-nr ]; then
    # ORDER=lean, then `engine.fused_norm_rope = "on"` over HTTP (label "norm-rope") at
    # 1, 32, 64 and 128 streams: last, so a call that runs out of time loses only it.
    run_pass omlx_http warm-up
    auto omlx_http
    run_pass bare bare-after
    OMLX_ENGINE__FUSED_NORM_ROPE=on run_pass omlx_http norm-rope 1,32,64,128
    keep_trace norm-rope
elif [ "${ORDER:-}" = gc ]; then
    run_pass omlx_http warm-up
    auto omlx_http
    OMLX_ENGINE__FREEZE_GC=false run_pass omlx_http gc-unfrozen
    keep_trace gc-unfrozen
    run_pass omlx_http auto-2
    keep_trace auto-2
elif [ "${ORDER:-}" = folded ]; then
    auto bare,omlx_http
    OMLX_ENGINE__DECODE_ATTENTION=folded run_pass omlx_http folded
    keep_trace folded
else
    auto bare,omlx_http
    [ "${ORDER:-}" = auto-only ] || before omlx_http
fi
