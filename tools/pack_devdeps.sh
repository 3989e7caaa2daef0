#!/usr/bin/env bash
# pack_devdeps.sh — copies what the GPU machine lacks (GoogleTest sources; the CUTLASS/CuTe headers
# of the nvidia-cutlass wheel, which tools/setup.sh installs, for the sm_90a kernels) into .devdeps/, an untracked folder carried to the device machine with the
# working tree. Run here before a device call; tools/gpu_check.sh uses it there.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude="$(git rev-parse --git-path info/exclude)"  # also right in a git worktree
mkdir -p "$(dirname "$exclude")"
grep -qx '/.devdeps/' "$exclude" 2>/dev/null || echo '/.devdeps/' >> "$exclude"
rm -rf .devdeps && mkdir -p .devdeps
cp -r /usr/src/googletest .devdeps/googletest
cutlass="$(python3 -c 'import cutlass_library,os;print(os.path.dirname(cutlass_library.__file__))' \
  2>/dev/null)/source/include"
if [[ -f "$cutlass/cute/tensor.hpp" ]]; then  # ~27 MB of the 64 MiB a device call carries
  mkdir -p .devdeps/cutlass && cp -r "$cutlass" .devdeps/cutlass/include
else
  echo "pack_devdeps: no nvidia-cutlass headers (tools/setup.sh); the GPU build keeps sm80 kernels" >&2
fi
du -sh .devdeps
