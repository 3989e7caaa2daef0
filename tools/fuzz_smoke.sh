#!/usr/bin/env bash
# fuzz_smoke.sh [SECONDS] — builds the libFuzzer targets (fuzz/fuzz_*.cpp) with clang in
# $FUZZ_BUILD (default build-fuzz/) and runs each for SECONDS (default 60) on a copy of its seed
# corpus (fuzz/corpus/<name>/), one after another; fails on the first crash, leak, timeout or
# sanitizer report (libFuzzer writes the input as crash-*/leak-*/timeout-* in the work folder).
# Prints each target's executions; `make fuzz` runs it with FUZZ_SECONDS (default 300).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build=${FUZZ_BUILD:-build-fuzz}
jobs=${JOBS:-$(nproc)}
cxx=$(command -v clang++-14 || command -v clang++ || true)
[ -n "$cxx" ] || { echo "fuzz_smoke: clang++ not found (tools/setup.sh installs clang-14)"; exit 1; }
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHSTU_CUDA=OFF -DHSTU_FUZZ=ON \
    -DHSTU_WERROR=OFF -DCMAKE_CXX_COMPILER="$cxx" ${CMAKE_ARGS:-} >/dev/null
fi
ninja -C "$build" -j "$jobs" fuzz_targets
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
total=0
for bin in "$build"/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin"); name=${name#fuzz_}
  mkdir -p "$work/$name/corpus"
  cp fuzz/corpus/"$name"/* "$work/$name/corpus/" 2>/dev/null || true
  # -rss_limit_mb: the readers allocate by what they read; -timeout: a hang is a finding.
  if ! (cd "$work/$name" && ASAN_OPTIONS=detect_leaks=1 "$OLDPWD/$bin" corpus \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 >log 2>&1); then
    tail -n 60 "$work/$name/log"
    ls "$work/$name"
    echo "fuzz_smoke: $name FAILED (its input is above)"; exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$name/log" | grep -o '[0-9]*$')
  echo "fuzz_smoke: $name: $runs executions in ${seconds}s, no crash"
  total=$((total + runs))
done
echo "fuzz_smoke: $total executions in total"
