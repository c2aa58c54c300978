#!/usr/bin/env bash
# Run 85, prepared in the twenty-second session (2026-12-05; docs/PERF_LOG.md, twenty-seventh
# round): the SM clock, the board's power and the energy of a call while one kernel runs on and on
# (benchmarks/harness/sustained_clocks.py), radiance beside bf16 and Humming on the four big heads
# at 192-2048 tokens, and radiance with one launch per token chunk beside its one launch of all
# chunks: whether the int4 head's loss from 384 tokens on is the power limit (a lower clock, the
# same cycles per call) or the kernel's work (more cycles per call).
# The library built by setup.py from this tree (carry python/radiance/_C.abi3.so) and, for
# Humming, its wheel (carry .carry/whl; without it the table has no Humming rows). About 150 s.
. "$(dirname "$0")/../../harness/call_preamble.sh"
ls python/radiance/_C*.so || exit 1
site=$(mktemp -d)
ls .carry/whl/humming_kernels-*.whl >/dev/null 2>&1 &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/whl/humming_kernels-*.whl
nvidia-smi -q -d POWER,CLOCK,PERFORMANCE >"$OUT/clocks_smi.txt" 2>&1
PYTHONPATH="$PYTHONPATH:$site" logged clocks 300 python3 benchmarks/harness/sustained_clocks.py --out "$OUT"
cat "$OUT/clocks.log"
