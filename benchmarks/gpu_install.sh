#!/usr/bin/env bash
# On the GPU machine, after the calls benchmarks/gpu_carry.py prints (everything copied
# into /root/gpu): join the split pieces, put the --extra paths back under
# /root/gpu/extra, install the wheels into /root/site and check that MLX sees the GPU.
# Then `export PYTHONPATH=/root/site:$PWD` and run from the checkout. GPU_DIR and SITE
# override the two folders and PYTHON the interpreter (a rehearsal elsewhere).
set -euo pipefail
site=${SITE:-/root/site}
python=${PYTHON:-python3}
cd "${GPU_DIR:-/root/gpu}"
for first in *.part00; do
    [[ -e $first ]] || continue
    name=${first%.part00}
    cat "$name".part[0-9][0-9] > "$name"
    rm "$name".part[0-9][0-9]
done
if [[ -f extra-manifest.tsv ]]; then
    while IFS=$'\t' read -r name rel; do
        mkdir -p "extra/$(dirname "$rel")"
        mv "$name" "extra/$rel"
    done < extra-manifest.tsv
    rm extra-manifest.tsv
fi
"$python" -m pip install -q --no-index --no-deps --target "$site" ./*.whl
# libmlx.so finds cuBLAS/cuDNN/NCCL through ../../nvidia relative to itself; the machine's
# PyTorch brought them.
if nvidia=$("$python" -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))'); then
    ln -sfn "$nvidia/nvidia" "$site/nvidia"
else
    echo "no nvidia package here: MLX will not find cuBLAS/cuDNN" >&2
fi
PYTHONPATH=$site "$python" -c 'import mlx.core as mx; print("MLX on", mx.default_device())'
