#!/usr/bin/env bash
# gpu_check.sh — the one script run on the GPU machine: configure and build hstu with CUDA
# (sm_90a), run the GPU consistency suite (test_gpu), then the benchmarks, and print
# a short summary table last. Logs go to $OUT/ when set (the device runner's output folder),
# else to build-gpu/gpu-check-logs/.
#
# The one decision: every stage runs even when an earlier one fails (a broken benchmark must not
# hide test results, a failing unrelated target must not stop test_gpu from building), and the
# summary states each stage's outcome. Exit status: 0 only when the build and every test passed.
#
# Before the device call, run tools/pack_devdeps.sh here (GoogleTest sources -> .devdeps/) and
# carry .devdeps along. Environment: JOBS (default 16), ARCHS (default 90a), BENCH_TIMEOUT (s),
# SEEDS (ml-latest-small retrieval runs on the GPU, run side by side after the benchmarks, e.g.
# "42 1 2"; needs .devdeps/data/ml-latest-small), NVTX=1 (Nsight Compute filtered by the step
# phases' NVTX ranges: which kernels each range holds), DIST=0 (skip the 1-rank NCCL checks),
# BENCH_FILTER (a regex: only the benchmarks whose names match), TESTS=0 (skip test_gpu),
# TEST_SHARDS=N (test_gpu as N GoogleTest shards side by side), TEST_TIMEOUT (s, default 900: a
# hung kernel must not eat the call),
# SANITIZE=1 (compute-sanitizer memcheck of the GPU suite and racecheck of its shared-memory
# kernels; SANITIZE_FILTER, RACECHECK_FILTER, SANITIZE_TIMEOUT),
# DYN=1 (dynamic item tables on ml-latest-small: DYN_SEEDS dense vs dynamic, half-catalogue LRU
# with a resume, the host tier vs all in HBM), KUAIRAND=1 (the kuairand_1k_ranking.gin keys on a
# generated 1000-user fixture, 4 GPU steps, losses printed for comparison with the CPU run),
# FUZZ_SECONDS=N (the libFuzzer targets of build-fuzz/, built on the CPU box with clang and
# carried here, each N seconds on FUZZ_PARALLEL (default 9) of the spare CPU cores while the build
# and the GPU stages run; their grown corpora, minimised, in $LOG/fuzz-corpus.tar.gz).
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD=build-gpu
LOG="${OUT:-$PWD/$BUILD/gpu-check-logs}"
mkdir -p "$LOG"
JOBS="${JOBS:-16}"
ARCHS="${ARCHS:-90a}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-240}"
status=0
declare -a rows=()
row() { rows+=("$(printf '%-22s %s' "$1" "$2")"); }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
  nvcc --version 2>&1 | tail -1 || true
  cmake --version | head -1; } > "$LOG/device.txt"
row "device" "$(head -1 "$LOG/device.txt")"

# ---- configure -------------------------------------------------------------------------------
gtest_args=()
if [[ -d .devdeps/googletest ]]; then
  gtest_args=(-DHSTU_GTEST_SOURCE_DIR="$PWD/.devdeps/googletest")
fi
if [[ -d .devdeps/cutlass/include ]]; then  # the sm_90a attention kernels' CUTLASS headers
  gtest_args+=(-DHSTU_CUTLASS_INCLUDE="$PWD/.devdeps/cutlass/include")
fi
# CMake < 3.26 does not know nvcc's C++20 flag; naming it is harmless on newer versions.
# Warnings do not stop this build (this box checks GPU results; they are counted below).
if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHSTU_CUDA=ON \
    -DHSTU_CUDA_ARCHS="$ARCHS" -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
    -DHSTU_WERROR=OFF "${gtest_args[@]}" > "$LOG/configure.log" 2>&1; then
  row "configure" "ok"
else
  row "configure" "FAILED (configure.log)"
  status=1
fi

# ---- fuzzing (issue 17) on the spare CPU cores, in the background from the start ----------------
# nice 19: the build and the GPU stages come first.
fuzz_pid=
if [[ -n "${FUZZ_SECONDS:-}" && -x build-fuzz/fuzz_gin ]]; then
  # libomp of the clang that built them travels beside them (build-fuzz/libomp.so.5).
  LD_LIBRARY_PATH="$PWD/build-fuzz${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FUZZ_NO_BUILD=1 \
    FUZZ_PARALLEL="${FUZZ_PARALLEL:-9}" FUZZ_CORPUS_OUT="$LOG/fuzz-corpus" \
    nice -n 19 ./tools/fuzz_smoke.sh "$FUZZ_SECONDS" > "$LOG/fuzz.log" 2>&1 &
  fuzz_pid=$!
fi

# ---- build (keep going past failing targets) -----------------------------------------------
start=$(date +%s)
if ninja -C "$BUILD" -j "$JOBS" -k 0 > "$LOG/build.log" 2>&1; then
  warnings=$(grep -c -E 'warning[: #]' "$LOG/build.log")
  # ptxas's "Potential Performance Loss" notes (C7510-C7519: wgmma serialised, e.g. for want of
  # registers) are infos, not warnings, and cost a Hopper kernel most of its speed: count them.
  serial=$(grep -c -E '\(C751[0-9]\)' "$LOG/build.log")
  row "build" "ok ($(( $(date +%s) - start )) s, ${warnings} warning lines, ${serial} ptxas C751x performance notes in build.log)"
else
  row "build" "FAILED: $(grep -c '^FAILED' "$LOG/build.log") target(s) (build.log)"
  status=1
fi

# ---- GPU consistency tests ---------------------------------------------------------------------
if [[ "${TESTS:-1}" == 0 ]]; then
  row "test_gpu" "not run (TESTS=0)"
elif [[ -x "$BUILD/test_gpu" ]]; then
  # TEST_SHARDS=N runs the suite as N GoogleTest shards side by side on the one GPU: the cases'
  # host references are the slow part, and the shards share the CPU cores.
  shards="${TEST_SHARDS:-1}"
  rc=0
  pids=()
  for ((k = 0; k < shards; k++)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$k timeout "${TEST_TIMEOUT:-900}" "$BUILD/test_gpu" \
      --gtest_output="xml:$LOG/test_gpu.$k.xml" > "$LOG/test_gpu.$k.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  cat "$LOG"/test_gpu.[0-9]*.log > "$LOG/test_gpu.log"
  count() {  # the sum of the shards' "[  PASSED  ] N tests" lines (empty when a shard has none)
    local n
    n=$(sed -nE "s/^\[  $1 *\] ([0-9]+) tests?.*/\1/p" "$LOG"/test_gpu.[0-9]*.log | paste -sd+)
    [[ -n "$n" ]] && echo $((n))
  }
  passed=$(count PASSED)
  failed=$(count FAILED)
  skipped=$(count SKIPPED)
  finished=$(grep -c '^\[==========\] .* ran\.' "$LOG/test_gpu.log")
  [[ "$finished" -lt "$shards" ]] && passed=
  if [[ -z "$passed" ]]; then
    row "test_gpu" "CRASHED or did not finish (rc $rc, test_gpu.log)"
  else
    row "test_gpu" "passed ${passed}, failed ${failed:-0}, skipped ${skipped:-0} (rc $rc)"
  fi
  [[ $rc -eq 0 ]] || status=1
  sed -nE 's/^\[  FAILED  \] ([A-Za-z][^ ,]*).*/    \1/p' "$LOG/test_gpu.log" | sort -u \
    > "$LOG/failed_cases.txt"
  # The assertions' messages too (the shards' logs may not all come back from the device).
  if [[ -s "$LOG/failed_cases.txt" ]]; then
    grep -A6 -E ': Failure$' "$LOG/test_gpu.log" | head -120 >> "$LOG/failed_cases.txt"
  fi
  # The shards' own logs and XML reports in one archive: the device runner returns a limited
  # number of files from $OUT, and 2 x N of them crowded out a call's own results (session 28).
  (cd "$LOG" && tar -czf test_gpu_shards.tar.gz test_gpu.[0-9]*.log test_gpu.[0-9]*.xml 2> /dev/null &&
    rm -f test_gpu.[0-9]*.log test_gpu.[0-9]*.xml)
else
  row "test_gpu" "NOT BUILT (build.log)"
  status=1
fi

# ---- benchmarks --------------------------------------------------------------------------------
# name | hstu arguments. The ML-1M HSTU-large step (the CUDA issue's 6 ms target) runs as a CUDA
# graph (the default), and once launched kernel by kernel, cut into phases.
benches=(
  "attention|bench attention"
  "attention sm90 vs sm80|bench attention --fwd-only --kernel both --shape 32,4096,4,64 --shape 32,4096,4,128 --shape 32,4096,4,256 --shape 128,200,2,64"
  "attention bwd sm90 vs sm80|bench attention --kernel both --no-validate --shape 32,4096,4,64 --shape 32,4096,4,128 --shape 32,2048,4,128 --shape 32,1024,4,128 --shape 128,512,4,128 --shape 32,4096,4,256 --shape 32,1024,4,256 --shape 128,512,4,256"
  "attention small-d|bench attention --full --no-validate --shape 128,200,2,25 --shape 128,200,2,32 --shape 128,200,2,16 --shape 128,200,1,64 --shape 128,200,2,50 --shape 128,200,2,64"
  "attention jagged uniform|bench attention --no-validate --lengths uniform --shape 32,4096,4,64 --shape 32,4096,4,128 --shape 32,4096,4,256"
  "attention rab|bench attention --full --no-validate --rab --shape 128,200,2,25 --shape 128,200,2,50 --shape 32,1024,4,128"
  "layer|bench layer"
  "layer phases|bench layer --shape 32,1024,1024,4,256 --shape 32,4096,1024,4,256 --reps 5 --phases"
  "train|bench train"
  "embedding|bench embedding"
  "train ml1m-large|bench train configs/bench-ml1m-large.gin"
  "train ml1m-large nondet|bench train configs/bench-ml1m-large.gin --set TrainerArgs.deterministic=False"
  "train ml1m-large direct|bench train configs/bench-ml1m-large.gin --phases --set TrainerArgs.cuda_graph=False"
)
bench_names=()
for entry in "${benches[@]}"; do
  name="${entry%%|*}"
  args="${entry#*|}"
  [[ -n "${BENCH_FILTER:-}" && ! "$name" =~ ${BENCH_FILTER} ]] && continue
  file="bench_${name// /_}.log"
  bench_names+=("$name|$file")
  if [[ ! -x "$BUILD/hstu" ]]; then
    row "bench $name" "hstu NOT BUILT"
    continue
  fi
  # shellcheck disable=SC2086  # args is a word list by design
  timeout "$BENCH_TIMEOUT" "$BUILD/hstu" $args > "$LOG/$file" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]]; then
    summary_line=$(grep -m1 '^bench train' "$LOG/$file" || grep -v '^\s*$' "$LOG/$file" | tail -1)
    row "bench $name" "$summary_line"
  elif [[ $rc -eq 124 ]]; then
    row "bench $name" "TIMEOUT after ${BENCH_TIMEOUT} s ($file)"
  else
    row "bench $name" "FAILED rc $rc: $(grep -v '^\s*$' "$LOG/$file" | tail -1)"
  fi
done

# ---- NCCL on one GPU (issue 15) -----------------------------------------------------------------
# A 1-rank NCCL communicator (HSTU_DIST_FORCE_NCCL=1) runs the data-parallel paths (the bucketed
# gradient all-reduce on its communication stream, the loss and table all-reduces) with one rank:
# (1) its weights must equal the single-process run's bit for bit; (2) its step time beside the
# plain step's (the train ml1m-large bench above), with the per-phase table; (3) the sharded item
# table's window path (dedup, all-to-all fetch, gradient push) on one rank, timed.
if [[ "${DIST:-1}" == 1 && -x "$BUILD/hstu" ]]; then
  small=(train --device cuda --quiet --set TrainerArgs.max_train_iters=30
         --set TrainerArgs.eval_interval=30 --set TrainerArgs.max_eval_iters=2
         --set "TrainerArgs.model_parallel_tables=[]")
  "$BUILD/hstu" "${small[@]}" --run-dir runs/nccl-local > "$LOG/dist_local.log" 2>&1
  HSTU_DIST_FORCE_NCCL=1 "$BUILD/hstu" "${small[@]}" --run-dir runs/nccl-one \
    > "$LOG/dist_nccl1.log" 2>&1
  if python3 tools/compare_checkpoints.py runs/nccl-local runs/nccl-one > "$LOG/dist_compare.log" 2>&1; then
    row "nccl 1 rank = local" "bit-identical weights after 30 steps"
  else
    row "nccl 1 rank = local" "DIFFERENT: $(tail -1 "$LOG/dist_compare.log")"
    status=1
  fi
  for cfgname in bench-ml1m-large bench-large; do
    HSTU_DIST_FORCE_NCCL=1 timeout "$BENCH_TIMEOUT" "$BUILD/hstu" bench train "configs/$cfgname.gin" \
      --set "TrainerArgs.model_parallel_tables=[]" > "$LOG/bench_nccl1_$cfgname.log" 2>&1
    row "bench nccl1 $cfgname" "$(grep -m1 '^bench train' "$LOG/bench_nccl1_$cfgname.log" || tail -1 "$LOG/bench_nccl1_$cfgname.log")"
  done
  timeout "$BENCH_TIMEOUT" "$BUILD/hstu" bench train configs/bench-large.gin > "$LOG/bench_large_local.log" 2>&1
  row "bench local bench-large" "$(grep -m1 '^bench train' "$LOG/bench_large_local.log" || tail -1 "$LOG/bench_large_local.log")"
  HSTU_DIST_FORCE_NCCL=1 timeout "$BENCH_TIMEOUT" "$BUILD/hstu" bench train configs/bench-ml1m-large.gin \
    --phases --set "TrainerArgs.model_parallel_tables=[]" --set TrainerArgs.cuda_graph=False \
    > "$LOG/bench_nccl1_phases.log" 2>&1
  HSTU_DIST_FORCE_NCCL=1 timeout "$BENCH_TIMEOUT" "$BUILD/hstu" bench train configs/bench-ml1m-large.gin \
    --phases --set RetrievalArgs.negative_sampler=in_batch > "$LOG/bench_nccl1_sharded.log" 2>&1
  row "bench nccl1 sharded" "$(grep -m1 '^bench train' "$LOG/bench_nccl1_sharded.log" || tail -1 "$LOG/bench_nccl1_sharded.log")"
fi

# ---- quality runs (optional) ------------------------------------------------------------------
if [[ -n "${SEEDS:-}" && -x "$BUILD/hstu" && -d .devdeps/data/ml-latest-small ]]; then
  for seed in $SEEDS; do
    timeout "${QUALITY_TIMEOUT:-240}" "$BUILD/hstu" train configs/ml-1m-hstu.gin --device cuda --quiet \
      --set DatasetArgs.dataset_name=ml-latest-small \
      --set DatasetArgs.dataset_path=.devdeps/data/ml-latest-small \
      --set TrainerArgs.seed="$seed" --run-dir "runs/mls-$seed" > "$LOG/mls_seed$seed.log" 2>&1 &
  done
  wait
  for seed in $SEEDS; do
    row "ml-latest-small s$seed" "$(grep -E 'last 10|HR@10' "$LOG/mls_seed$seed.log" | tail -1)"
  done
fi
# ---- dynamic item tables on ml-latest-small (optional: DYN=1; tools/dyn_check.sh) ----------
if [[ "${DYN:-0}" == 1 && -x "$BUILD/hstu" && -d .devdeps/data/ml-latest-small ]]; then
  while IFS= read -r line; do rows+=("$line"); done < <(BUILD="$BUILD" LOG="$LOG" bash tools/dyn_check.sh)
fi
# ---- NVTX ranges under Nsight Compute (optional) ----------------------------------------------
# `ncu --nvtx --nvtx-include "<phase>/"` must profile exactly the kernels of that step phase of
# `hstu bench train` (direct launches: NVTX ranges attach to kernels when they are launched, so
# a CUDA graph's replay would carry the range open at cudaGraphLaunch instead).
if [[ "${NVTX:-0}" == 1 && -x "$BUILD/hstu" ]] && command -v ncu > /dev/null; then
  for range in ${NVTX_RANGES:-fwd.attn opt.dense bwd.gemm_out}; do
    f="$LOG/ncu_nvtx_${range}.csv"
    timeout 240 ncu --nvtx --nvtx-include "${range}/" --metrics gpu__time_duration.sum --csv \
      "$BUILD/hstu" bench train --steps 1 --warmup 0 --set TrainerArgs.cuda_graph=False \
      > "$f" 2>&1
    row "ncu nvtx ${range}/" "$(python3 - "$f" << 'PY'
import collections, csv, sys
rows = list(csv.reader(open(sys.argv[1])))
heads = [i for i, r in enumerate(rows) if "Kernel Name" in r]
if not heads:
    print("no kernels profiled"); sys.exit()
rows = rows[heads[0]:]
k = rows[0].index("Kernel Name")
ids = collections.OrderedDict()
for r in rows[1:]:
    ids.setdefault(r[0], r[k].split("(")[0].split("<")[0][:48])
print(len(ids), "kernels:", dict(collections.Counter(ids.values())))
PY
)"
  done
fi
if [[ "${KUAIRAND:-0}" == 1 && -x "$BUILD/hstu" ]]; then
  kr=/tmp/hstu-kr1k
  python3 tools/make_kuairand_fixture.py --out "$kr" --variant 1k --users 1000 --mean-events 2000 \
    --seed 7 > "$LOG/kuairand_fixture.log" 2>&1
  timeout "${QUALITY_TIMEOUT:-240}" "$BUILD/hstu" train configs/kuairand-1k-ranking.gin --quiet \
    --set DatasetArgs.dataset_path="$kr" --set TrainerArgs.device=cuda \
    --set TrainerArgs.max_train_iters=4 --set TrainerArgs.eval_interval=4 \
    --set TrainerArgs.max_eval_iters=2 --set TrainerArgs.log_interval=1 \
    --run-dir runs/kr1k-gpu > "$LOG/kuairand_gpu.log" 2>&1
  losses=$(grep -o '"loss": *[0-9.e+-]*' runs/kr1k-gpu/metrics.jsonl 2>/dev/null | sed 's/.*: *//' | tr '\n' ' ')
  row "kuairand-1k 4 steps" "losses ${losses:-none} (CPU: 5.5571 5.3469 5.0548 4.6528)"
fi

# ---- compute-sanitizer (optional: SANITIZE=1) ---------------------------------------------------
# memcheck over every GPU test case (SANITIZE_FILTER narrows it), racecheck over the kernels that
# share memory between threads (attention, the sorted scatters, the rank counts): 0 errors wanted.
if [[ "${SANITIZE:-0}" == 1 && -x "$BUILD/test_gpu" ]] && command -v compute-sanitizer > /dev/null; then
  # API errors are left out: NCCL's initialisation probes kernels with cudaFuncGetAttributes and
  # handles cudaErrorNoKernelImageForDevice itself (16 such reports, all inside libnccl); hstu's
  # own API calls are checked by HSTU_CUDA_CHECK.
  timeout "${SANITIZE_TIMEOUT:-420}" compute-sanitizer --tool memcheck --report-api-errors no \
    --error-exitcode 3 \
    "$BUILD/test_gpu" --gtest_filter="${SANITIZE_FILTER:-*}" > "$LOG/memcheck.log" 2>&1
  rc=$?
  row "memcheck" "rc $rc, $(grep -m1 'ERROR SUMMARY' "$LOG/memcheck.log" || echo 'no summary (timeout?)')"
  [[ $rc -eq 0 ]] || status=1
  timeout "${SANITIZE_TIMEOUT:-420}" compute-sanitizer --tool racecheck --error-exitcode 3 \
    "$BUILD/test_gpu" --gtest_filter="${RACECHECK_FILTER:-*Attention*:*retrieval_rank*:*embedding*:*softmax*}" \
    > "$LOG/racecheck.log" 2>&1
  rc=$?
  row "racecheck" "rc $rc, $(grep -m1 'RACECHECK SUMMARY\|ERROR SUMMARY' "$LOG/racecheck.log" || echo 'no summary (timeout?)')"
  [[ $rc -eq 0 ]] || status=1
fi

if [[ -n "$fuzz_pid" ]]; then
  wait "$fuzz_pid"
  rc=$?
  row "fuzz (${FUZZ_SECONDS} s x target)" "rc $rc, $(tail -1 "$LOG/fuzz.log")"
  [[ $rc -eq 0 ]] || status=1
  tar -czf "$LOG/fuzz-corpus.tar.gz" -C "$LOG" fuzz-corpus 2> /dev/null && rm -rf "$LOG/fuzz-corpus"
fi

# ---- summary ---------------------------------------------------------------------------------
{
  echo "=== gpu_check summary (logs: $LOG) ==="
  printf '%s\n' "${rows[@]}"
  if [[ -s "$LOG/failed_cases.txt" ]]; then
    echo "failed test cases:"
    cat "$LOG/failed_cases.txt"
  fi
  for entry in "${bench_names[@]}"; do
    name="${entry%%|*}"
    file="${entry#*|}"
    if [[ -s "$LOG/$file" ]]; then
      echo "--- bench $name (last lines) ---"
      tail -"$([[ $name == *direct* ]] && echo 40 || echo 8)" "$LOG/$file"
    fi
  done
  for f in bench_nccl1_phases bench_nccl1_sharded; do
    if [[ -s "$LOG/$f.log" ]]; then
      echo "--- $f (last lines) ---"
      tail -40 "$LOG/$f.log"
    fi
  done
  [[ -s "$LOG/fuzz.log" ]] && grep '^fuzz_smoke' "$LOG/fuzz.log"
  if [[ -s "$LOG/kuairand_gpu.log" ]]; then
    echo "--- kuairand-1k on the GPU (last lines) ---"
    tail -4 "$LOG/kuairand_gpu.log"
  fi
} | tee "$LOG/summary.txt"
exit $status
