#!/usr/bin/env bash
# Nsight Compute profile of the kernels the dispatch takes on the 248320 x 5120 head (and of the
# vector kernel and the quantizer): tensor-pipe and issue utilization, warp stall reasons, memory
# throughput. One lent H200 call:
#   OUT=$OUT bash benchmarks/harness/ncu_profile.sh [m:variant,...]
# The benchmark build (gpu_kernels.py build) is made first unless build/libradiance_bench.so exists.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
mkdir -p "$OUT"
runs=${1:-1:auto,8:auto,16:auto,64:auto,256:auto,1:vector,8:vector}
export PYTHONUNBUFFERED=1
python3 benchmarks/harness/gpu_kernels.py build --log "$OUT/nvcc.log" || { tail -30 "$OUT/nvcc.log"; exit 1; }
metrics=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics=$metrics,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second
metrics=$metrics,lts__t_bytes.sum.per_second,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed
metrics=$metrics,smsp__inst_executed.sum,gpu__time_duration.sum
timeout 500 ncu --clock-control none -k 'regex:apply|quantize' \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    --metrics "$metrics" -o "$OUT/profile" \
    python3 benchmarks/harness/gpu_kernels.py profile --variants "$runs" >"$OUT/ncu_run.log" 2>&1
echo "ncu rc=$?"; tail -5 "$OUT/ncu_run.log"
ncu -i "$OUT/profile.ncu-rep" --print-units base >"$OUT/ncu_details.txt" 2>&1
ncu -i "$OUT/profile.ncu-rep" --page raw --csv --metrics "$metrics" >"$OUT/ncu_metrics.csv" 2>&1
cat "$OUT/ncu_metrics.csv" | cut -c1-600
