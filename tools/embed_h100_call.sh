#!/usr/bin/env bash
# embed_h100_call.sh — one device call of branch embed (issue 18, session 12): build hstu (sm_90a),
# optionally test_gpu and a second tree (A/B), run bench embedding and Nsight profiles of its
# steady-state iteration. Env: TESTS=1, OTHER=<dir of another source tree to build + bench>,
# NCU=1, NSYS=1, EXTRA="bench args;bench args" (more bench runs of this tree).
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
targets=hstu
[[ "${TESTS:-0}" == 1 ]] && targets="hstu test_gpu"
cfg .
if [[ -n "${OTHER:-}" ]]; then
  cfg "$OTHER"
  ninja -C "$OTHER/build-gpu" -j8 hstu > "$OTHER/build.log" 2>&1 || tail -30 "$OTHER/build.log" &
  other_pid=$!
  ninja -C build-gpu -j8 $targets > build.log 2>&1 || tail -30 build.log
  wait $other_pid
else
  ninja -C build-gpu -j16 $targets > build.log 2>&1 || tail -30 build.log
fi
echo "build: $(( $(date +%s) - t0 )) s"
B=build-gpu/hstu
if [[ "${TESTS:-0}" == 1 ]]; then
  timeout 60 build-gpu/test_gpu --gtest_filter='*Dynamic*:*Embed*:*embed*' 2>&1 | grep -E '^\[ *(OK|FAILED|PASSED|  FAILED) |tests ran|Failure|error' | tail -40
fi
echo "=== bench (this tree): all in HBM"
timeout 80 $B bench embedding --cache-ratio 0 2>&1 | tail -3
if [[ -n "${OTHER:-}" ]]; then
  echo "=== bench (other tree $OTHER): all in HBM"
  timeout 80 "$OTHER/build-gpu/hstu" bench embedding --cache-ratio 0 2>&1 | tail -3
fi
IFS=';' read -ra extra <<< "${EXTRA:-}"
for e in "${extra[@]}"; do
  [[ -z "$e" ]] && continue
  echo "=== bench $e"
  timeout 60 $B bench embedding $e 2>&1 | tail -2
done
if [[ "${NCU:-0}" == 1 ]]; then
  for opt in sgd adam; do
    echo "=== ncu $opt (steady-state iteration, 4 streams serialised, caches kept)"
    HSTU_PROFILE_LAST_ITER=1 timeout 70 ncu --profile-from-start off --cache-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      --csv --page raw --print-units base $B bench embedding --cache-ratio 0 --optimizer $opt \
      --warmup 5 --iters 1 > ncu_$opt.csv 2> ncu_$opt.err
    python3 tools/ncu_kernel_table.py ncu_$opt.csv || tail -5 ncu_$opt.err
  done
fi
if [[ "${NSYS:-0}" == 1 ]] && command -v nsys > /dev/null; then
  for opt in sgd adam; do
    echo "=== nsys $opt: kernel busy time vs iteration span (steady-state iteration)"
    HSTU_PROFILE_LAST_ITER=1 timeout 90 nsys profile -q --capture-range=cudaProfilerApi \
      -o nsys_$opt -f true $B bench embedding --cache-ratio 0 --optimizer $opt --warmup 5 \
      --iters 1 > /dev/null 2>&1
    nsys stats -q -r cuda_gpu_trace -f csv -o nsys_$opt nsys_$opt.nsys-rep > /dev/null 2>&1
    python3 - nsys_${opt}_cuda_gpu_trace.csv <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
iv = []
for r in rows:
    s = float(r["Start (ns)"]); d = float(r["Duration (ns)"] or 0)
    iv.append((s, s + d, r["Name"][:40]))
iv.sort()
span = iv[-1][1] - iv[0][0]
busy, cur_s, cur_e = 0.0, None, None
gaps = []
for s, e, n in iv:
    if cur_e is None or s > cur_e:
        if cur_e is not None:
            busy += cur_e - cur_s; gaps.append((s - cur_e, n))
        cur_s, cur_e = s, e
    else:
        cur_e = max(cur_e, e)
busy += cur_e - cur_s
gaps.sort(reverse=True)
print(f"ops {len(iv)}  span {span/1e3:.1f} us  GPU busy (any stream) {busy/1e3:.1f} us  idle {(span-busy)/1e3:.1f} us")
print("largest idle gaps (us, next op):", ", ".join(f"{g/1e3:.1f} {n}" for g, n in gaps[:8]))
PY
  done
fi
echo "total: $(( $(date +%s) - t0 )) s"
