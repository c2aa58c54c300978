# Sourced first by a script that one lent-GPU call runs (device_run.sh, multi_gpu_run.sh,
# ncu_profile.sh, and the run_call*.sh under benchmarks/results/ written from the ninth session of
# 2026-12-03 on): strict mode but for -e (a failed step is reported and the next one runs), the
# repository root as the working directory, radiance's python/ and tests/ on the path (before
# what the caller put there: ncu_profile.sh's Humming, for one), $OUT made
# (the device tool empties it before a call and returns what is under it), and, at exit, every
# file of $OUT packed so that it comes back (out_files.sh).
#
#   . "$(dirname "$0")/../../harness/call_preamble.sh"     # from benchmarks/results/<run>/
#   logged NAME SECONDS COMMAND...    # COMMAND under `timeout SECONDS`, its output in $OUT/NAME.log,
#                                     # then one line: NAME, its exit status, seconds since the start
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-out}
mkdir -p "$OUT"
. benchmarks/harness/out_files.sh
trap bundle_out EXIT
call_started=$SECONDS

logged() {
    local name=$1 limit=$2 rc
    shift 2
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc ($((SECONDS - call_started)) s)"
    return $rc
}
