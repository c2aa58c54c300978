#!/usr/bin/env bash
# Nsight Compute profile of the kernels the dispatch takes on the 248320 x 5120 head (and of the
# vector kernel; `humming` is vLLM's Humming kernel on the same shape): tensor-pipe and issue
# utilization, warp stall reasons, memory throughput. One lent H200 call:
#   OUT=$OUT [KERNELS=regex] [LIB=build/B/lib.so] [NCU_LIMIT=500] \
#       bash benchmarks/harness/ncu_profile.sh [m:variant[:NxK[:group]],...]
# Only the runs' launches are profiled (gpu_kernels.py profile brackets them with cudaProfilerStart
# and Stop; ncu runs at most NCU_LIMIT seconds). The benchmark build (gpu_kernels.py build) is made
# first unless LIB names one.
. "$(dirname "$0")/call_preamble.sh"
runs=${1:-1:auto,8:auto,16:auto,64:auto,256:auto,1:vector,8:vector}
if [ -z "${LIB:-}" ]; then
    python3 benchmarks/harness/gpu_kernels.py build --log "$OUT/nvcc.log" || { tail -30 "$OUT/nvcc.log"; exit 1; }
fi
metrics=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics=$metrics,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second
metrics=$metrics,lts__t_bytes.sum.per_second,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed
metrics=$metrics,smsp__inst_executed.sum,gpu__time_duration.sum
# the epilogue's stores: instructions, the L1 requests and sectors they make, DRAM writes
metrics=$metrics,smsp__inst_executed_op_global_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum
metrics=$metrics,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,dram__bytes_write.sum.per_second
# why warps wait: every stall reason, in warps per issued instruction
metrics=$metrics,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio
timeout "${NCU_LIMIT:-500}" ncu --clock-control none --profile-from-start off -k "regex:${KERNELS:-.}" \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    --metrics "$metrics" -o "$OUT/profile" \
    python3 benchmarks/harness/gpu_kernels.py profile ${LIB:+--lib "$LIB"} --variants "$runs" >"$OUT/ncu_run.log" 2>&1
echo "ncu rc=$?"; tail -5 "$OUT/ncu_run.log"
ncu -i "$OUT/profile.ncu-rep" --print-units base >"$OUT/ncu_details.txt" 2>&1
ncu -i "$OUT/profile.ncu-rep" --page raw --csv --metrics "$metrics" >"$OUT/ncu_metrics.csv" 2>&1
# one block per kernel: its name, time, tensor pipe, issue, and the stall reasons above 0.05
python3 - "$OUT/ncu_metrics.csv" <<'PY' | tee "$OUT/ncu_summary.txt"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, rows = rows[0], rows[2:]
for r in rows:
    d = dict(zip(head, r))
    print(d["Kernel Name"][:110])
    for key in ("gpu__time_duration.sum", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                "smsp__issue_active.avg.pct_of_peak_sustained_active", "dram__bytes_read.sum.per_second",
                "dram__bytes_write.sum.per_second", "lts__t_bytes.sum.per_second",
                "smsp__inst_executed_op_global_st.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
                "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"):
        print(f"    {key:75s} {d.get(key, '')}")
    stalls = sorted(((float(v.replace(',', '')), k) for k, v in d.items()
                     if k.startswith("smsp__average_warps_issue_stalled") and v not in ("", "n/a")), reverse=True)
    print("    stalls per issue: " + ", ".join(f"{k[34:-23]} {v:.2f}" for v, k in stalls if v >= 0.05))
PY
