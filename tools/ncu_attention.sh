#!/usr/bin/env bash
# ncu_attention.sh — profile the HSTU attention kernels of one shape with Nsight Compute and print
# the lines that decide where time goes: duration, SM / memory throughput, occupancy, registers,
# issue-slot use, tensor-pipe use and the warp stall reasons per issued instruction.
#
# Usage (on the GPU machine, after tools/gpu_check.sh built build-gpu/hstu):
#   tools/ncu_attention.sh B,L,H,d [kernel regex] [extra bench args...]
# e.g. tools/ncu_attention.sh 32,4096,4,128 'hstu_attn_fwd_kernel' --fwd-only
# The full report goes to $OUT/ncu_<regex>.txt (or /tmp) for reading later. SASS=1 adds the
# per-instruction view of one launch (skipping SASS_SKIP launches, default 1: the warm-up):
# stall samples and executed instructions per SASS region (tools/ncu_sass_profile.py; the CSV
# kept as $OUT/ncu_sass_<regex>.csv.gz) — where the instructions of a latency-bound kernel go.
set -uo pipefail
cd "$(dirname "$0")/.."
shape="$1"
regex="${2:-hstu_attn}"
shift $(($# >= 2 ? 2 : 1))
NCU="${NCU:-/usr/local/cuda/bin/ncu}"
report="${OUT:-/tmp}/ncu_${regex//[^A-Za-z0-9_]/_}.txt"
"$NCU" --kernel-name "regex:$regex" --launch-count "${LAUNCHES:-4}" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section ComputeWorkloadAnalysis --section SchedulerStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_tensor_op_hmma_cycles_active\.avg\.pct_of_peak_sustained_active,regex:l1tex__data_pipe_lsu_wavefronts_mem_shared\.sum\.pct_of_peak_sustained_elapsed" \
  build-gpu/hstu bench attention --no-validate --full --warmup 0 --reps 1 --shape "$shape" "$@" \
  > "$report" 2>&1
echo "== ncu $regex at $shape ($report)"
grep -E '^  [a-z_]+.*\(|Duration|Throughput|Registers Per|Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc Active|issue_stalled_|pipe_tensor|wavefronts_mem_shared|utilized pipeline|highest-utilized' \
  "$report" | awk '!/issue_stalled_/ || $NF + 0 >= 0.05' | sed -E 's/  +/ /g' | head -"${LINES_MAX:-80}"
if [[ "${SASS:-0}" == 1 ]]; then
  rep="/tmp/ncu_sass_$$"
  csv="${OUT:-/tmp}/ncu_sass_${regex//[^A-Za-z0-9_]/_}.csv.gz"
  "$NCU" -f --kernel-name "regex:$regex" --launch-skip "${SASS_SKIP:-1}" --launch-count 1 \
    --section SourceCounters --section WarpStateStats -o "$rep" \
    build-gpu/hstu bench attention --no-validate --full --warmup 1 --reps 1 --shape "$shape" "$@" \
    > "$rep.log" 2>&1
  "$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$csv"
  echo "== SASS regions of $regex at $shape ($csv)"
  python3 tools/ncu_sass_profile.py "$csv" --top "${SASS_TOP:-15}" || tail -3 "$rep.log"
fi
