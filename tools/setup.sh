#!/usr/bin/env bash
# setup.sh — installs what building and testing hstu needs on a fresh Debian/Ubuntu machine
# (compiler, CMake, Ninja, OpenBLAS, GoogleTest, clang-format for the style test; Python's
# safetensors for one interop test, tensorboard and matplotlib for looking at runs and their
# tests).
# Does nothing for packages already present. CUDA is optional: with nvcc on PATH (or in
# /usr/local/cuda) the CUDA backend is built too.
set -euo pipefail
need=()
for pkg in build-essential cmake ninja-build libopenblas-dev libgtest-dev googletest python3 python3-pip \
    clang-format; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
python3 -c "import safetensors, numpy" 2>/dev/null ||
  python3 -m pip install -q safetensors numpy 2>/dev/null ||
  python3 -m pip install -q --break-system-packages safetensors numpy 2>/dev/null ||
  echo "setup: could not pip install safetensors numpy; the Python interop test will skip"
python3 -c "import tensorboard, matplotlib" 2>/dev/null ||
  python3 -m pip install -q tensorboard matplotlib 2>/dev/null ||
  python3 -m pip install -q --break-system-packages tensorboard matplotlib 2>/dev/null ||
  echo "setup: could not pip install tensorboard matplotlib; their tests will skip"
