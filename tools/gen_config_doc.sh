#!/usr/bin/env bash
# gen_config_doc.sh — regenerates the tables of docs/CONFIG.md from the schema
# (src/config/schema_fields.cpp) by running the ConfigDoc test with HSTU_REGEN_DOCS=1.
# Usage: tools/gen_config_doc.sh [build-dir]   (default: build-config, a CPU-only build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-config}
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DHSTU_CUDA=OFF
fi
ninja -C "$build" test_config
HSTU_REGEN_DOCS=1 "$build/test_config" --gtest_filter='ConfigDoc.*'
