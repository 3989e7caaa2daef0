#!/usr/bin/env bash
# embed_h100_call.sh — the device call of branch embed (issue 18, session 12): build this tree
# (hstu + test_gpu, sm_90a) and, side by side, OTHER (a tree to compare, e.g. main: hstu only);
# then the GPU table tests, bench embedding of both (all in HBM twice, interleaved; the host
# tier once) and an Nsight Compute table of the steady-state iteration (tools/ncu_kernel_table.py).
set -u
cd "$(dirname "$0")/.."
ln -sfn ../.devdeps .devdeps
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cfg() {
  cmake -S "$1" -B "$1/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHSTU_CUDA=ON \
    -DHSTU_CUDA_ARCHS=90a -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DHSTU_WERROR=OFF \
    -DHSTU_GTEST_SOURCE_DIR=$PWD/.devdeps/googletest \
    -DHSTU_CUTLASS_INCLUDE=$PWD/.devdeps/cutlass/include > "$1/cfg.log" 2>&1 || tail -20 "$1/cfg.log"
}
t0=$(date +%s)
cfg . &
[[ -n "${OTHER:-}" ]] && cfg "$OTHER" &
wait
if [[ -n "${OTHER:-}" ]]; then
  (ninja -C "$OTHER/build-gpu" -j8 hstu > "$OTHER/build.log" 2>&1 || tail -20 "$OTHER/build.log") &
fi
ninja -C build-gpu -j"$([[ -n "${OTHER:-}" ]] && echo 10 || echo 16)" hstu test_gpu > build.log 2>&1 || tail -30 build.log
wait
echo "build: $(( $(date +%s) - t0 )) s"
B=build-gpu/hstu
M="${OTHER:-}/build-gpu/hstu"
echo "=== test_gpu (table cases)"
timeout 60 build-gpu/test_gpu --gtest_filter='*Dynamic*:*Embed*:*embed*' 2>&1 | grep -E '^\[ *(OK|FAILED|PASSED) |tests ran|Failure|rror|Which is|Expected' | tail -40
for round in 1 2; do
  echo "=== bench (this tree, branch embed): all in HBM, round $round"
  timeout 40 $B bench embedding --cache-ratio 0 2>&1 | tail -2
  if [[ -n "${OTHER:-}" ]]; then
    echo "=== bench (main): all in HBM, round $round"
    timeout 40 "$M" bench embedding --cache-ratio 0 2>&1 | tail -2
  fi
  if [[ $round == 1 ]]; then
    echo "=== host tier (cache ratio 1.0), branch then main"
    timeout 30 $B bench embedding --cache-ratio 1.0 2>&1 | tail -2
    [[ -n "${OTHER:-}" ]] && timeout 30 "$M" bench embedding --cache-ratio 1.0 2>&1 | tail -2
  fi
done
echo "=== t $(( $(date +%s) - t0 )) s"
echo "=== ncu sgd (branch; steady-state iteration, streams serialised, caches kept)"
HSTU_PROFILE_LAST_ITER=1 timeout 50 ncu --profile-from-start off --cache-control none \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  --csv --page raw --print-units base $B bench embedding --cache-ratio 0 --optimizer sgd \
  --warmup 5 --iters 1 > ncu_sgd.csv 2> ncu_sgd.err
python3 tools/ncu_kernel_table.py ncu_sgd.csv || tail -5 ncu_sgd.err
echo "total: $(( $(date +%s) - t0 )) s"
