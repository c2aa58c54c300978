#!/usr/bin/env bash
# Run 66 (2026-12-04, thirteenth session): the folding kernel with a token chunk's activations
# resident in shared memory (apply_wgmma_resident_kernel, hip/apply_wgmma_fold.hip; benchmark
# build's foldres* variants), against float64 first, then in one timing loop against the
# library's plan and bf16 on the three heads of k <= 1024 at 128-2048 tokens.
#   python3 benchmarks/harness/gpu_kernels.py build --lib $PWD/build/B/lib.so
#   tar -cf - build/B/lib.so | xz -T2 -3 > .carry/b_lib.tar.xz
#   device: OUT=... bash benchmarks/results/h200-2026-12-04-resident/run_call1.sh  (carry .carry/b_lib.tar.xz)
. "$(dirname "$0")/../../harness/call_preamble.sh"
tar -xJf .carry/b_lib.tar.xz || exit 1
RES=foldres2x64o,foldres2x96o,foldres2x128o,foldres2x160o,foldres3x96o,foldres3x128o,foldres2x128
logged smoke 40 python3 - <<'PY'
import sys, torch
sys.path.insert(0, "benchmarks/harness")
from gpu_kernels import VARIANTS, Lib
L = Lib("build/B/lib.so")
n, k, m = 4099, 640, 300
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
pk = torch.randint(-2**31, 2**31 - 1, (n, k // 8), dtype=torch.int32, device="cuda")
sc = (torch.rand(n, k // 128, device="cuda") * 0.02 + 0.001).to(torch.bfloat16)
ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
s = torch.cuda.current_stream().cuda_stream
L.apply(x.view(torch.int16), pk, sc.view(torch.int16), None, 128, ref.view(torch.int16), s, 0)
for v in "foldres2x128o,foldres2x128,foldres3x128o".split(","):
    out = torch.empty_like(ref)
    L.apply(x.view(torch.int16), pk, sc.view(torch.int16), None, 128, out.view(torch.int16), s, VARIANTS[v])
    torch.cuda.synchronize()
    print(v, "max |diff| against auto:", (out.float() - ref.float()).abs().max().item(), flush=True)
PY
cat "$OUT/smoke.log"
logged check 200 python3 benchmarks/harness/gpu_kernels.py check --lib build/B/lib.so --variants auto,$RES
grep -E "ALL CHECKS|FAILED" "$OUT/check.log"; grep -A 8 FAILED "$OUT/check.log" | head -12
AB=(python3 benchmarks/harness/ab_time.py --a build/B/lib.so --b build/B/lib.so --fastest --b-variants $RES)
logged ab_res_1 170 "${AB[@]}" --m 128,192,256,384,512,768,1024,2048 --heads 262144x640,49152x576,151936x1024
logged ab_res_2 110 "${AB[@]}" --m 256,384,768,2048 --heads 262144x640,49152x576,151936x1024
for f in ab_res_1 ab_res_2; do echo "== $f"; grep -vE "^# |^$" "$OUT/$f.log" | sed -E 's/ {2,}/ /g'; done
