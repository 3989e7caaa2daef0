#!/usr/bin/env bash
# multi_gpu_check.sh — the multi-GPU runs (issue 20) on one host with N GPUs, after
# tools/gpu_check.sh has built build-gpu/ on the same machine. Logs and a summary go to $OUT/
# when set (the device runner's output folder), else to build-gpu/multi-gpu-logs/.
#
# Stages (each runs even when an earlier one fails; the summary states each outcome):
#   nccl      the NCCL backend's multi-rank tests (test_gpu Nccl*) on N ranks;
#   equal     N ranks x batch B == 1 GPU x batch N*B after 20 steps (replicated and sharded item
#             table; bf16 activations, so within a tolerance), weights compared by
#             tools/compare_checkpoints.py;
#   scaling   weak scaling: `hstu bench train` of bench-ml1m-large and bench-large (batch per GPU
#             unchanged) on 1 GPU and on N: the job's tokens/s and the ratio, per-phase table of
#             rank 0 (exposed communication); SCALING_BALANCED=True splits each global batch
#             with the Karmarkar-Karp balancer (no effect on the 1-GPU run);
#   balanced  zipf lengths (bench-large's shape): equal-count slices vs the Karmarkar-Karp split;
#   quality   the ML-1M HSTU-large preset on ml-latest-small (MLS, default .devdeps/data), 1 GPU with
#             batch B vs N GPUs with B/N each (the same global batch), SEEDS;
#   kill      a rank killed mid-run ends the job with a non-zero exit within a bounded time, and
#             the run resumes from its last checkpoint on N ranks;
#   resume    a save of N ranks (sharded item table) continued on N ranks (bit for bit wanted) and
#             on one GPU with the N-times batch;
#   ranking   ranking on N ranks vs one GPU with the N-times batch, item table sharded and
#             replicated;
#   table     an item table above one GPU's TrainerArgs.table_budget_mb (bench-big-table.gin):
#             refused on one GPU, trained sharded on N (the plan, tokens/s);
#   timeline  rank 0's profiled steps (TrainerArgs.profile) of bench-ml1m-large: the phases and,
#             on a track of its own, each all-reduce bucket on the communication stream.
# NCCL's NVLink multicast is left as the environment has it (never enabled here).
# Environment: STAGES (default "nccl equal scaling balanced kill"), SEEDS (default "42 1 2"),
# BENCH_TIMEOUT (s, default 300).
set -uo pipefail
cd "$(dirname "$0")/.."
B=build-gpu
H=$B/hstu
LOG="${OUT:-$PWD/$B/multi-gpu-logs}"
mkdir -p "$LOG"
N=$(nvidia-smi -L | grep -c GPU)
STAGES="${STAGES:-nccl equal scaling balanced kill}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-300}"
declare -a rows=()
row() { rows+=("$(printf '%-28s %s' "$1" "$2")"); }
has() { [[ " $STAGES " == *" $1 "* ]]; }
L=("$H" launch --nproc-per-node "$N" --)  # N local ranks of the command that follows
first() { grep -m1 "$1" "$2" || tail -1 "$2"; }
row "GPUs" "$N x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

if has nccl; then
  timeout 300 "$H" launch --nproc-per-node "$N" -- "$B/test_gpu" --gtest_filter='Nccl*' \
    > "$LOG/nccl_tests.log" 2>&1
  row "nccl tests ($N ranks)" "rc $? ($(grep -c '\[       OK \]' "$LOG/nccl_tests.log") OK lines)"
fi

if has equal; then
  eq=(train --device cuda --quiet --set TrainerArgs.max_train_iters=20
      --set TrainerArgs.eval_interval=20 --set TrainerArgs.max_eval_iters=4
      --set NetworkArgs.hidden_dropout=0.0)
  for mode in replicated sharded; do
    tables=(); [[ $mode == replicated ]] && tables=(--set "TrainerArgs.model_parallel_tables=[]")
    timeout 300 "${L[@]}" "$H" "${eq[@]}" "${tables[@]}" --set TrainerArgs.train_batch_size=16 \
      --run-dir "runs/eq-$mode-n$N" > "$LOG/equal_${mode}_n.log" 2>&1
    rc=$?
    timeout 300 "$H" "${eq[@]}" --set TrainerArgs.train_batch_size=$((16 * N)) \
      --run-dir "runs/eq-$mode-1" > "$LOG/equal_${mode}_1.log" 2>&1
    python3 tools/compare_checkpoints.py "runs/eq-$mode-n$N" "runs/eq-$mode-1" --tol 0.05 \
      > "$LOG/equal_${mode}_compare.log" 2>&1
    row "equal $mode" "launch rc $rc, compare rc $? ($(tail -1 "$LOG/equal_${mode}_compare.log"))"
    grep -h "test (epoch\|done:" "$LOG/equal_${mode}_n.log" "$LOG/equal_${mode}_1.log" \
      >> "$LOG/equal_metrics.txt"
  done
fi

if has scaling; then
  for cfg in bench-ml1m-large bench-large; do
    rep=(--set "TrainerArgs.model_parallel_tables=[]"
         --set "TrainerArgs.enable_balanced_shuffler=${SCALING_BALANCED:-False}")
    timeout "$BENCH_TIMEOUT" "$H" bench train "configs/$cfg.gin" "${rep[@]}" \
      > "$LOG/scale_${cfg}_1.log" 2>&1
    timeout "$BENCH_TIMEOUT" "${L[@]}" "$H" bench train "configs/$cfg.gin" "${rep[@]}" --phases \
      > "$LOG/scale_${cfg}_n.log" 2>&1
    one=$(sed -nE 's/.* ([0-9.]+) tokens\/s, .*/\1/p' "$LOG/scale_${cfg}_1.log" | head -1)
    job=$(sed -nE 's/.*: ([0-9.]+) tokens\/s for the job.*/\1/p' "$LOG/scale_${cfg}_n.log" | head -1)
    ratio=$(python3 -c "print(f'{float(\"$job\") / float(\"$one\"):.3f}')" 2>/dev/null || echo "?")
    row "scaling $cfg${SCALING_BALANCED:+ (balanced=$SCALING_BALANCED)}" "1 GPU ${one:-?} tok/s, $N GPUs ${job:-?} tok/s: ${ratio}x"
  done
fi

if has balanced; then
  zipf=(--set "seqlen_dist/RandomDistribution.dist_type=\"zipf\""
        --set seqlen_dist/RandomDistribution.alpha=1.2 --set SyntheticArgs.min_seqlen=16
        --set "TrainerArgs.model_parallel_tables=[]" --steps 20)
  for bal in False True; do
    timeout "$BENCH_TIMEOUT" "${L[@]}" "$H" bench train configs/bench-large.gin "${zipf[@]}" \
      --set TrainerArgs.enable_balanced_shuffler=$bal > "$LOG/balanced_$bal.log" 2>&1
    row "zipf balanced=$bal" "$(first 'tokens/s for the job' "$LOG/balanced_$bal.log")"
  done
fi

MLS="${MLS:-.devdeps/data}"  # ml-latest-small's csv files (tools/pack_devdeps.sh puts them there)
if has quality && [[ -f "$MLS/ratings.csv" ]]; then
  for seed in ${SEEDS:-42 1 2}; do
    q=(train configs/ml-1m-hstu-large.gin --device cuda --quiet
       --set DatasetArgs.dataset_name=ml-latest-small
       --set DatasetArgs.dataset_path="$MLS" --set TrainerArgs.seed="$seed")
    timeout 300 "$H" "${q[@]}" --run-dir "runs/q1-$seed" > "$LOG/quality_1_$seed.log" 2>&1
    timeout 300 "${L[@]}" "$H" "${q[@]}" --set "TrainerArgs.train_batch_size=$((128 / N))" \
      --run-dir "runs/qn-$seed" > "$LOG/quality_n_$seed.log" 2>&1
    row "quality s$seed 1 GPU" "$(first 'test (epoch' "$LOG/quality_1_$seed.log")"
    row "quality s$seed $N GPUs" "$(first 'test (epoch' "$LOG/quality_n_$seed.log")"
  done
fi

if has kill; then
  k=(train configs/bench-ml1m-large.gin --device cuda --quiet
     --set TrainerArgs.ckpt_save_interval=200 --set TrainerArgs.eval_interval=1000000
     --set "TrainerArgs.model_parallel_tables=[]" --run-dir runs/kill)
  start=$(date +%s)
  "${L[@]}" "$H" "${k[@]}" --set TrainerArgs.max_train_iters=1000000 > "$LOG/kill.log" 2>&1 &
  lpid=$!
  sleep 20
  victim=$(pgrep -f "^$H train configs/bench-ml1m-large.gin" | tail -1)
  kill -9 "$victim" 2> /dev/null
  killed=$(date +%s)
  wait "$lpid"
  rc=$?
  row "kill a rank" "job exit $rc, $(( $(date +%s) - killed )) s after the kill (pid $victim)"
  saved=$(sed -nE 's/step-0*([0-9]+)/\1/p' runs/kill/checkpoints/latest 2> /dev/null)
  timeout 300 "${L[@]}" "$H" "${k[@]}" --resume runs/kill \
    --set TrainerArgs.max_train_iters=$(( ${saved:-0} + 200 )) > "$LOG/kill_resume.log" 2>&1
  row "resume after the kill" "rc $? from step ${saved:-?}: $(first 'done:' "$LOG/kill_resume.log")"
fi

if has resume; then
  # A save of N GPU ranks (sharded item table) continued on N ranks and on one GPU.
  rs=(train --device cuda --quiet --set TrainerArgs.eval_interval=100000
      --set TrainerArgs.max_eval_iters=4 --set NetworkArgs.hidden_dropout=0.0
      --set TrainerArgs.max_train_iters=40 --set TrainerArgs.ckpt_save_interval=20
      --set TrainerArgs.ckpt_keep=3)
  timeout 300 "${L[@]}" "$H" "${rs[@]}" --set TrainerArgs.train_batch_size=16 \
    --run-dir runs/rs-full > "$LOG/resume_full.log" 2>&1
  at20=runs/rs-full/checkpoints/step-000000020
  timeout 300 "${L[@]}" "$H" "${rs[@]}" --set TrainerArgs.train_batch_size=16 --resume "$at20" \
    --run-dir runs/rs-again > "$LOG/resume_again.log" 2>&1
  python3 tools/compare_checkpoints.py runs/rs-again runs/rs-full > "$LOG/resume_again_cmp.log" 2>&1
  row "resume on $N ranks" "compare rc $? ($(tail -1 "$LOG/resume_again_cmp.log"))"
  timeout 300 "$H" "${rs[@]}" --set TrainerArgs.train_batch_size=$((16 * N)) --resume "$at20" \
    --allow-config-change --run-dir runs/rs-one > "$LOG/resume_one.log" 2>&1
  python3 tools/compare_checkpoints.py runs/rs-one runs/rs-full --tol 0.05 \
    > "$LOG/resume_one_cmp.log" 2>&1
  row "resume on 1 GPU" "compare rc $? ($(tail -1 "$LOG/resume_one_cmp.log"))"
fi

if has ranking; then
  # Ranking on N ranks vs one GPU with the N-times batch (synthetic preset, no dropout), the item
  # table sharded row-wise (the default) and replicated.
  rk=(train configs/synthetic-ranking.gin --device cuda --quiet --set TrainerArgs.max_train_iters=20
      --set TrainerArgs.eval_interval=20 --set NetworkArgs.hidden_dropout=0.0
      --set NetworkArgs.input_dropout=0.0)
  bs=$(sed -nE 's/^TrainerArgs.train_batch_size *= *([0-9]+).*/\1/p' configs/synthetic-ranking.gin)
  bs=${bs:-128}
  for mode in sharded replicated; do
    tables=(); [[ $mode == replicated ]] && tables=(--set "TrainerArgs.model_parallel_tables=[]")
    timeout 300 "${L[@]}" "$H" "${rk[@]}" "${tables[@]}" \
      --set TrainerArgs.train_batch_size=$((bs / N)) --run-dir "runs/rk-$mode-n" \
      > "$LOG/ranking_${mode}_n.log" 2>&1
    timeout 300 "$H" "${rk[@]}" --set TrainerArgs.train_batch_size=$(( (bs / N) * N )) \
      --run-dir "runs/rk-$mode-1" > "$LOG/ranking_${mode}_1.log" 2>&1
    python3 tools/compare_checkpoints.py "runs/rk-$mode-n" "runs/rk-$mode-1" --tol 0.05 \
      > "$LOG/ranking_${mode}_cmp.log" 2>&1
    row "ranking $mode $N = 1 GPU" "compare rc $? ($(tail -1 "$LOG/ranking_${mode}_cmp.log")); $(first 'eval (step' "$LOG/ranking_${mode}_n.log") vs $(first 'eval (step' "$LOG/ranking_${mode}_1.log")"
  done
fi

if has table; then
  # An item table above one GPU's table budget (configs/bench-big-table.gin): one GPU refuses to
  # start, naming the budget; N GPUs train it sharded (the plan shows the split and the
  # all-to-all bytes per step).
  "$H" plan configs/bench-big-table.gin --device cuda --world-size "1,$N" > "$LOG/table_plan.log" 2>&1
  timeout 300 "$H" train configs/bench-big-table.gin --device cuda --quiet \
    --set TrainerArgs.max_train_iters=1 --run-dir runs/tb-1 > "$LOG/table_1.log" 2>&1
  row "big table on 1 GPU" "rc $? ($(grep -m1 -o 'need [0-9.]* MiB, more than TrainerArgs.table_budget_mb = [0-9.]* MiB' "$LOG/table_1.log"))"
  timeout "$BENCH_TIMEOUT" "${L[@]}" "$H" bench train configs/bench-big-table.gin --device cuda \
    --steps 30 --warmup 5 > "$LOG/table_n.log" 2>&1
  row "big table on $N GPUs" "rc $? ($(first 'bench train' "$LOG/table_n.log"))"
fi

if has timeline; then
  timeout 200 "${L[@]}" "$H" train configs/bench-ml1m-large.gin --device cuda --quiet \
    --set TrainerArgs.max_train_iters=60 --set TrainerArgs.eval_interval=100000 \
    --set TrainerArgs.profile=True --set TrainerArgs.profile_step_start=50 \
    --set TrainerArgs.profile_step_end=53 --set "TrainerArgs.model_parallel_tables=[]" \
    --set TrainerArgs.grad_bucket_mb=4 --run-dir runs/timeline > "$LOG/timeline.log" 2>&1
  cp runs/timeline/trace.json "$LOG/trace_rank0.json" 2> /dev/null
  python3 - runs/timeline/trace.json > "$LOG/timeline_summary.txt" 2>&1 << 'PY'
import collections, json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
names = {(e.get("pid"), e.get("tid")): e["args"]["name"] for e in ev
         if e.get("ph") == "M" and e.get("name") == "thread_name"}
by = collections.defaultdict(list)
for e in ev:
    if e.get("ph") == "X":
        by[names.get((e.get("pid"), e.get("tid")), str(e.get("tid")))].append(e)
for track, es in by.items():
    print(track, len(es), "events", dict(collections.Counter(x["name"] for x in es).most_common(3)))
gpu = sorted(by.get("GPU phases", []), key=lambda e: e["ts"])
comm = sorted(by.get("GPU communication stream", []), key=lambda e: e["ts"])
if gpu and comm:
    t0 = gpu[0]["ts"]
    bwd = [e for e in gpu if e["name"].startswith("bwd.") and e["ts"] < comm[0]["ts"] + 5000]
    if bwd:
        print("first step's backward: %.0f..%.0f us" % (bwd[0]["ts"] - t0, bwd[-1]["ts"] + bwd[-1]["dur"] - t0))
    for e in comm[:8]:
        print("  all-reduce bucket at %.0f us, %.0f us long" % (e["ts"] - t0, e["dur"]))
PY
  row "timeline (rank 0)" "$(grep -c . "$LOG/timeline_summary.txt") lines: $(grep -m1 'communication' "$LOG/timeline_summary.txt")"
fi

{
  echo "=== multi_gpu_check summary (logs: $LOG) ==="
  printf '%s\n' "${rows[@]}"
  [[ -s "$LOG/timeline_summary.txt" ]] && { echo "--- timeline ---"; cat "$LOG/timeline_summary.txt"; }
  [[ -s "$LOG/equal_metrics.txt" ]] && { echo "--- equal: metrics (N ranks, then 1 GPU) ---"; cat "$LOG/equal_metrics.txt"; }
  for f in scale_bench-ml1m-large_n scale_bench-large_n; do
    [[ -s "$LOG/$f.log" ]] && { echo "--- $f (last lines) ---"; tail -30 "$LOG/$f.log"; }
  done
} | tee "$LOG/summary.txt"
