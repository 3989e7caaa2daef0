#!/usr/bin/env bash
# embed2_call.sh — one device call of branch embed2 (issue 18, session 13): build this tree
# (hstu + test_gpu, sm_90a) and OTHER (main's code: hstu only) side by side, run the GPU table
# tests, `hstu bench embedding` all in HBM (SGD, Adam) with both binaries interleaved, this
# binary with HSTU_DEDUPE_SORT=1 (the radix-sort dedupe), and NCU=1 an Nsight Compute table of
# the steady-state SGD iteration. Run from this tree's root; prints everything to stdout.
set -u
cd "$(dirname "$0")/.."
ln -sfn ../.devdeps .devdeps
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
BD="${BUILD_DIR:-build-gpu}"  # this tree's build folder (outside the carried tree keeps it warm)
cfg() {
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHSTU_CUDA=ON \
    -DHSTU_CUDA_ARCHS=90a -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DHSTU_WERROR=OFF \
    -DHSTU_GTEST_SOURCE_DIR=$PWD/.devdeps/googletest \
    -DHSTU_CUTLASS_INCLUDE=$PWD/.devdeps/cutlass/include > "$2.cfg.log" 2>&1 || tail -20 "$2.cfg.log"
}
t0=$(date +%s)
cfg . "$BD" &
[[ -n "${OTHER:-}" && ! -x "$OTHER/build-gpu/hstu" ]] && cfg "$OTHER" "$OTHER/build-gpu" &
wait
if [[ -n "${OTHER:-}" && ! -x "$OTHER/build-gpu/hstu" ]]; then
  (ninja -C "$OTHER/build-gpu" -j7 hstu > "$OTHER/build.log" 2>&1 || tail -20 "$OTHER/build.log") &
fi
ninja -C "$BD" -j"${JOBS:-9}" hstu test_gpu > build.log 2>&1 || tail -30 build.log
wait
echo "build: $(( $(date +%s) - t0 )) s"
B="$BD/hstu"
M="${OTHER:-}/build-gpu/hstu"
echo "=== test_gpu (table cases)"
timeout 90 "$BD/test_gpu" --gtest_filter="${FILTER:-*Dynamic*:*Table*:*Hash*}" 2>&1 |
  grep -E '^\[ *(OK|FAILED|PASSED|SKIPPED) |tests ran|Failure|rror|Which is|Expected|job|Value of' | head -60
for round in $(seq 1 "${ROUNDS:-2}"); do
  echo "=== bench (embed2): all in HBM, round $round"
  timeout 40 $B bench embedding --cache-ratio 0 2>&1 | tail -2
  if [[ -n "${OTHER:-}" ]]; then
    echo "=== bench (main): all in HBM, round $round"
    timeout 40 "$M" bench embedding --cache-ratio 0 2>&1 | tail -2
  fi
done
echo "=== bench (embed2, HSTU_DEDUPE_SORT=1: the radix-sort dedupe)"
HSTU_DEDUPE_SORT=1 timeout 40 $B bench embedding --cache-ratio 0 2>&1 | tail -2
for extra in ${EXTRA:-}; do
  echo "=== bench (embed2) ${extra//,/ }"
  timeout 40 $B bench embedding --cache-ratio 0 ${extra//,/ } 2>&1 | tail -2
done
echo "=== t $(( $(date +%s) - t0 )) s"
if [[ "${NCU:-0}" == 1 ]]; then
  echo "=== ncu sgd (embed2; steady-state iteration, kernels serialised, caches kept)"
  HSTU_PROFILE_LAST_ITER=1 timeout "${NCU_TIMEOUT:-60}" ncu --profile-from-start off \
    --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    --csv --page raw --print-units base $B bench embedding --cache-ratio 0 --optimizer sgd \
    --warmup 5 --iters 1 > ncu_sgd.csv 2> ncu_sgd.err
  python3 tools/ncu_kernel_table.py ncu_sgd.csv || tail -5 ncu_sgd.err
fi
echo "total: $(( $(date +%s) - t0 )) s"
