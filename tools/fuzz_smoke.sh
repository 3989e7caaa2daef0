#!/usr/bin/env bash
# fuzz_smoke.sh [SECONDS] — builds the libFuzzer targets (fuzz/fuzz_*.cpp) with clang in
# $FUZZ_BUILD (default build-fuzz/) and runs each for SECONDS (default 60) on a copy of its seed
# corpus (fuzz/corpus/<name>/); fails on any crash, leak, timeout or sanitizer report (libFuzzer
# writes the input as crash-*/leak-*/timeout-* in the work folder, and its log is printed).
# Prints each target's executions and the total; `make fuzz` runs it with FUZZ_SECONDS (default
# 300).
# Environment: FUZZ_PARALLEL (default 1) targets at once, for machines with cores to spare;
# FUZZ_NO_BUILD=1 runs the binaries already in $FUZZ_BUILD (built elsewhere, e.g. carried to a
# machine without libFuzzer); FUZZ_CORPUS_OUT=DIR keeps each target's grown corpus, minimised
# with -merge=1, in DIR/<name>/ (to refresh fuzz/corpus/ after a long run).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build=${FUZZ_BUILD:-build-fuzz}
jobs=${JOBS:-$(nproc)}
parallel=${FUZZ_PARALLEL:-1}
if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
  cxx=$(command -v clang++-14 || command -v clang++ || true)
  [ -n "$cxx" ] || { echo "fuzz_smoke: clang++ not found (tools/setup.sh installs clang-14)"; exit 1; }
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHSTU_CUDA=OFF -DHSTU_FUZZ=ON \
      -DHSTU_WERROR=OFF -DCMAKE_CXX_COMPILER="$cxx" ${CMAKE_ARGS:-} >/dev/null
  fi
  ninja -C "$build" -j "$jobs" fuzz_targets
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$PWD

# run_target NAME: fuzzes $build/fuzz_NAME in $work/NAME; its outcome in $work/NAME/result.
run_target() {
  local name=$1 dir="$work/$1"
  mkdir -p "$dir/corpus"
  cp fuzz/corpus/"$name"/* "$dir/corpus/" 2>/dev/null || true
  # -rss_limit_mb: the readers allocate by what they read; -timeout: a hang is a finding.
  if (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 "$root/$build/fuzz_$name" corpus \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 >log 2>&1); then
    grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$' > "$dir/result"
  else
    echo FAILED > "$dir/result"
  fi
  if [ -n "${FUZZ_CORPUS_OUT:-}" ]; then
    mkdir -p "$FUZZ_CORPUS_OUT/$name"
    (cd "$dir" && "$root/$build/fuzz_$name" -merge=1 "$FUZZ_CORPUS_OUT/$name" corpus \
       -rss_limit_mb=2048 -max_len=65536 >merge.log 2>&1) || true
  fi
}

names=()
for bin in "$build"/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin"); names+=("${name#fuzz_}")
done
[ ${#names[@]} -gt 0 ] || { echo "fuzz_smoke: no fuzz_* binaries in $build"; exit 1; }
running=0
for name in "${names[@]}"; do
  run_target "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

total=0
failed=0
for name in "${names[@]}"; do
  result=$(cat "$work/$name/result" 2>/dev/null || echo FAILED)
  if [ "$result" = FAILED ]; then
    tail -n 60 "$work/$name/log"
    ls "$work/$name"
    echo "fuzz_smoke: $name FAILED (its input is above)"
    failed=1
    continue
  fi
  echo "fuzz_smoke: $name: $result executions in ${seconds}s, no crash"
  total=$((total + result))
done
echo "fuzz_smoke: $total executions in total"
exit $failed
