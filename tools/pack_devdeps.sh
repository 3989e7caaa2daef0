#!/usr/bin/env bash
# pack_devdeps.sh — copies what the GPU machine lacks (GoogleTest sources) into .devdeps/, an untracked folder carried to the device machine with the
# working tree. Run here before a device call; tools/gpu_check.sh uses it there.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.devdeps/' .git/info/exclude 2>/dev/null || echo '/.devdeps/' >> .git/info/exclude
rm -rf .devdeps && mkdir -p .devdeps
cp -r /usr/src/googletest .devdeps/googletest
du -sh .devdeps
