#!/usr/bin/env bash
# dyn_device_call1.sh — session 12's device call 1 for the dynamic item table on the device
# window (docs/BENCHMARKS.md, "Session 12"), run from the repository root on the GPU machine
# with .devdeps linked: build hstu (+ test_gpu when TESTS is a gtest filter), run those GPU tests, the
# ML-1M-large step dense / dense with sparse Adam / dynamic / dynamic on the host window
# (HSTU_HOST_WINDOW=1), then tools/dyn_seeds.sh for SEEDS (PAR at a time).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHSTU_CUDA=ON -DHSTU_CUDA_ARCHS=90a \
  -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DHSTU_WERROR=OFF \
  -DHSTU_GTEST_SOURCE_DIR=$PWD/.devdeps/googletest -DHSTU_CUTLASS_INCLUDE=$PWD/.devdeps/cutlass/include > cfg.log 2>&1 || tail -5 cfg.log
timeout ${BUILD_T:-220} ninja -C build-gpu -j16 hstu ${TESTS:+test_gpu} > build.log 2>&1; echo "build rc $? at $(el) s"
grep -E "error|FAILED" build.log | head -20
if [[ -n "${TESTS:-}" ]]; then
  timeout 100 build-gpu/test_gpu --gtest_filter="$TESTS" > tests.log 2>&1; echo "tests rc $? at $(el) s"
  grep -E "^\[  |Failure|Expected|Which|actual|differ|Value of" tests.log | grep -v "^\[ RUN" | head -70
fi
B=(bench train configs/bench-ml1m-large.gin --device cuda)
D=(--set 'DynamicTableArgs.tables=["item"]')
A=(--set 'OptimizerArgs.sparse_optimizer_str="adam"')
for v in "dense-preset" "dense-adam" "dynamic-adam" "dynamic-adam-hostwindow"; do
  case $v in
    dense-preset) args=() ;;
    dense-adam) args=("${A[@]}") ;;
    dynamic-adam) args=("${A[@]}" "${D[@]}") ;;
    dynamic-adam-hostwindow) args=("${A[@]}" "${D[@]}" --steps 5 --warmup 1) ;;
  esac
  if [[ $v == *hostwindow ]]; then export HSTU_HOST_WINDOW=1; else unset HSTU_HOST_WINDOW; fi
  echo "== $v: hstu ${B[*]} ${args[*]}"
  timeout 60 build-gpu/hstu "${B[@]}" "${args[@]}" 2>&1 | grep -E "bench train|CUDA graph|error|Error" | head -4
done
unset HSTU_HOST_WINDOW
echo "bench done at $(el) s"
if [[ -n "${SEEDS:-}" ]]; then
  SEEDS="$SEEDS" PAR=${PAR:-6} TIMEOUT=${TIMEOUT:-150} bash tools/dyn_seeds.sh 2>&1 | tail -30
  echo "seeds done at $(el) s"
fi
