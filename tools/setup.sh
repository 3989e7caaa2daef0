#!/usr/bin/env bash
# setup.sh — installs what building and testing hstu needs on a fresh Debian/Ubuntu machine
# (compiler, CMake, Ninja, OpenBLAS, nlohmann/json, CLI11, GoogleTest, OpenMPI for CPU ranks,
# clang-format 14 for the style test; the nvidia-cutlass headers for the sm_90a kernels; clang 14 with libFuzzer and LLVM's OpenMP for the fuzz targets; Python's safetensors, tensorboard and matplotlib for the interop, TensorBoard and
# plot tests, which skip without them).
# Does nothing for packages already present. CUDA is optional: with nvcc installed and a GPU
# present the CUDA backend is built too (CMakeLists.txt: HSTU_CUDA).
set -euo pipefail
need=()
for pkg in build-essential cmake ninja-build libopenblas-dev nlohmann-json3-dev libcli11-dev \
    libgtest-dev googletest python3 python3-pip clang-format-14 libopenmpi-dev openmpi-bin \
    clang-14 libclang-rt-14-dev libomp-14-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# pip_need "<modules>" "<packages>" "<what skips without them>"
pip_need() {
  python3 -c "import $1" 2>/dev/null ||
    python3 -m pip install -q $2 2>/dev/null ||
    python3 -m pip install -q --break-system-packages $2 2>/dev/null ||
    echo "setup: could not pip install $2; $3 will skip"
}
pip_need "safetensors, numpy" "safetensors numpy" "the Python interop test"
pip_need "tensorboard, matplotlib" "tensorboard matplotlib" "the TensorBoard and plot tests"
# CUTLASS/CuTe headers for the sm_90a attention kernels (pinned; only CUDA builds use them).
pip_need "cutlass_library" "nvidia-cutlass==4.2.0.0" "the sm_90a attention kernels (sm80 ones run)"
