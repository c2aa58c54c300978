"""device call 6 (2026-12-02, fifth session): which apply asks the driver for a tensor map it refuses,
under compute-sanitizer (an aligned output, one 2 bytes off 16-byte alignment, an aligned one again).
    compute-sanitizer --tool memcheck python3 benchmarks/results/h200-2026-12-02-tstore/call6_which_encode.py
"""
import sys, torch, numpy as np
sys.path[:0] = ["python", "tests"]
import radiance
from test_gpu import apply_c_entry
n, k, m = 2048, 1024, 192
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
packed, scales = radiance.quantize_rows(w)
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
for off in (0, 1, 0):
    buf = torch.empty(m * n + 8, device="cuda", dtype=torch.bfloat16)
    print("offset", off, "address % 16 =", (buf.data_ptr() + 2 * off) % 16, flush=True)
    apply_c_entry(x, packed, scales, None, 128, buf[off:off + m * n].view(m, n))
    torch.cuda.synchronize()
    print("done", off, flush=True)
