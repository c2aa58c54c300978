#!/usr/bin/env bash
# Twenty-seventh session, call 1: how many clusters of 2 and 4 blocks of one block per SM the GPU
# runs at once (cluster_probe.cu: what a split of k over four blocks would leave idle), then on an
# H200 only the twenty-sixth session's run_h200.sh (run 90 against the kernel it replaced at 9-16
# tokens, and gpu.py on the library of main for the README's table). Carry
# python/radiance/_C.abi3.so, .carry/whl, .carry/o_lib.tar.xz and .carry/n_lib.tar.xz.
. "$(dirname "$0")/../../harness/call_preamble.sh"
here=benchmarks/results/h200-2026-12-06-s27
nvcc -arch=sm_90a -o /tmp/cluster_probe $here/cluster_probe.cu && /tmp/cluster_probe | tee "$OUT/probe.txt"
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || exit 3
OUT=$OUT bash benchmarks/results/h200-2026-12-06-s26/run_h200.sh
