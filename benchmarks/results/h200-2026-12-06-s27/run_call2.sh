#!/usr/bin/env bash
# Twenty-seventh session, call 2. Run 89 (the twenty-fifth session) sped up the folding kernel's
# tiles of one block per SM by 4-8 % at 192-384 tokens and left the tiles of two blocks per SM as
# they were, but the rules that choose between them at 33-128 tokens (hip/dispatch.h,
# fold_tile_two_per_sm: runs 56, 57, 69 and 71) were measured before it. So: every folding tile of
# 48-160 tokens against the plan (auto), at 40-160 tokens on the big heads and two small ones, one
# timing loop, twice (fold_1.log, fold_2.log). On an H200 first the twenty-sixth session's
# run_h200.sh (run 90 against the kernel it replaced; gpu.py for the README's table). Carry
# python/radiance/_C.abi3.so, .carry/whl, .carry/o_lib.tar.xz (main's benchmark build: its folding
# kernels are main's) and .carry/n_lib.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
if grep -q H200 "$OUT/gpu.txt"; then
    OUT=$OUT/h200 bash benchmarks/results/h200-2026-12-06-s26/run_h200.sh
fi
tar -xJf .carry/o_lib.tar.xz || exit 1
variants=auto,fold3x48t,fold2x48b2t,fold3x64,fold2x64b2t,fold3x96,fold3x96t,fold2x96b2t,fold3x128,fold2x128t
variants=$variants,fold1x128b2t,fold3x160,fold2x160t
for pass in 1 2; do
    logged fold_$pass 200 python3 benchmarks/harness/gpu_kernels.py time --lib build/B/lib.so --no-peers \
        --heads 262144x5376,128256x4096,248320x5120,151936x5120,151936x1024,262144x640 \
        --ms 40,48,64,80,96,112,128,160 --variants $variants
    grep -c "ours\[" "$OUT/fold_$pass.log"
done
