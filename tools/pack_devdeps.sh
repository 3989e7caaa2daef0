#!/usr/bin/env bash
# pack_devdeps.sh — copies what the GPU machine lacks (GoogleTest sources) into .devdeps/, an untracked folder carried to the device machine with the
# working tree. Run here before a device call; tools/gpu_check.sh uses it there.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude="$(git rev-parse --git-path info/exclude)"  # also right in a git worktree
mkdir -p "$(dirname "$exclude")"
grep -qx '/.devdeps/' "$exclude" 2>/dev/null || echo '/.devdeps/' >> "$exclude"
rm -rf .devdeps && mkdir -p .devdeps
cp -r /usr/src/googletest .devdeps/googletest
du -sh .devdeps
