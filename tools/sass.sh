#!/usr/bin/env bash
# sass.sh — the SASS of CUDA sources on a machine with nvcc but without cuobjdump / nvdisasm (the
# development box: no GPU, no full toolkit). Compiles each given .cu to an sm_90a cubin with the
# project's device flags and disassembles it with cuobjdump and nvdisasm from NVIDIA's PyPI wheels
# (pinned below), fetched once into .devdeps/sass-tools (untracked, as tools/pack_devdeps.sh's
# files). What it is for: counting a kernel's instructions per loop trip before spending device
# time, seeing where ptxas put spills (STL / LDL), and checking that a refactor leaves a kernel's
# code unchanged (`tools/sass.sh -a f.cu > a.sass`, edit, again, then `tools/sass_diff.py a.sass
# b.sass`, kernel by kernel; -a drops the encodings and addresses, and the targets of branches,
# which move with any change). NOTE: ptxas's code moves with changes that look neutral: a lambda
# around a kernel's main loop, a reordered producer loop, a spin in another warp's code (session
# 27: 362 / 344 TFLOPS against 381 / 386 for the same consumer source): compare before measuring.
#
# Usage: tools/sass.sh [-a] [-k REGEX] file.cu [more.cu ...]     (SASS on stdout)
#   -a        address-free: only the instructions (for diff)
#   -k REGEX  only the functions whose mangled names match REGEX (grep -E)
# Environment: ARCH (default sm_90a), CUTLASS (headers; default .devdeps/cutlass/include).
set -euo pipefail
cd "$(dirname "$0")/.."

strip=0
keep=""
while getopts "ak:" opt; do
  case "$opt" in
    a) strip=1 ;;
    k) keep="$OPTARG" ;;
    *) echo "usage: tools/sass.sh [-a] [-k REGEX] file.cu [more.cu ...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { echo "usage: tools/sass.sh [-a] [-k REGEX] file.cu [more.cu ...]" >&2; exit 2; }

tools=.devdeps/sass-tools
if [[ ! -x "$tools/bin/cuobjdump" || ! -x "$tools/bin/nvdisasm" ]]; then
  echo "sass.sh: fetching cuobjdump and nvdisasm (PyPI) into $tools" >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" \
    nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.86
  mkdir -p "$tools/bin"
  for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
  find "$tmp/x" -type f \( -name cuobjdump -o -name nvdisasm \) -exec cp {} "$tools/bin/" \;
  chmod +x "$tools/bin/cuobjdump" "$tools/bin/nvdisasm"
fi

arch="${ARCH:-sm_90a}"
cutlass="${CUTLASS:-.devdeps/cutlass/include}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for f in "$@"; do
  [[ -f "$f" ]] || { echo "sass.sh: no such file: $f" >&2; exit 2; }
  cubin="$out/$(basename "$f" .cu).cubin"
  nvcc -std=c++20 -O3 -arch="$arch" --expt-relaxed-constexpr -DHSTU_WITH_CUDA \
    -DHSTU_SM90_KERNELS=1 -I src -I "$cutlass" -cubin -o "$cubin" "$f"
  NVDISASM_PATH="$PWD/$tools/bin" "$tools/bin/cuobjdump" -sass "$cubin" |
    awk -v keep="$keep" -v strip="$strip" '
      /Function : / { on = (keep == "" || $0 ~ keep) }
      on {
        if (strip) {
          if ($0 ~ /^[[:space:]]*\/\*[0-9a-f]+\*\//) {  # an instruction: drop address, encoding
            sub(/^[[:space:]]*\/\*[0-9a-f]+\*\/[[:space:]]*/, "")
            sub(/[[:space:]]*\/\* 0x[0-9a-f]+ \*\/[[:space:]]*$/, "")
            if ($0 ~ /(BRA|BSSY|CALL|JMP|BREAK)[.A-Z]* /) gsub(/0x[0-9a-f]+/, "<pc>")
            print
          } else if ($0 !~ /^[[:space:]]*\/\* 0x[0-9a-f]+ \*\//) {
            print
          }
        } else {
          print
        }
      }'
done
