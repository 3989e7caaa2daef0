#!/bin/bash
# Session 15 call 3: lnfast (LayerNorm short rows in registers): tests, ML-1M step, ncu at real clocks.
cd "$(dirname "$0")"
L=/tmp/c3; mkdir -p $L
F="-G Ninja -DCMAKE_BUILD_TYPE=Release -DHSTU_CUDA=ON -DHSTU_CUDA_ARCHS=90a -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DHSTU_WERROR=OFF -DHSTU_CUTLASS_INCLUDE=$PWD/.devdeps/cutlass/include -DHSTU_GTEST_SOURCE_DIR=$PWD/.devdeps/googletest"
t0=$(date +%s)
cmake -S . -B build-gpu $F > $L/cfg.log 2>&1 && ninja -C build-gpu -j16 hstu test_gpu > $L/build.log 2>&1
echo "build rc $? in $(( $(date +%s) - t0 )) s"
B=build-gpu/hstu
timeout 200 build-gpu/test_gpu --gtest_filter='*ayer*orm*:*ln_*:*LayerNorm*:*Layer*:*Graph*:*Retrieval*:*Ranking*' > $L/t.log 2>&1
echo "tests rc $?: $(grep -E '^\[  (PASSED|FAILED) ' $L/t.log | tr '\n' ' ')"; grep -B2 -A10 ': Failure$' $L/t.log | head -60
for i in 1 2 3; do echo "graph: $(timeout 100 $B bench train configs/bench-ml1m-large.gin | grep '^bench train' | cut -c1-110)"; done
echo "nondet: $(timeout 100 $B bench train configs/bench-ml1m-large.gin --set TrainerArgs.deterministic=False | grep '^bench train' | cut -c1-110)"
timeout 100 $B bench train configs/bench-ml1m-large.gin --phases --set TrainerArgs.cuda_graph=False | grep -A30 '^phase'
echo "== ncu one step, real clocks, no cache flush"
timeout 200 ncu --csv --page raw --print-units base --cache-control none --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    $B bench train configs/bench-ml1m-large.gin --steps 1 --warmup 0 --set TrainerArgs.cuda_graph=False > $L/ncu.csv 2>&1
python3 tools/ncu_kernel_table.py $L/ncu.csv | head -45
echo "== layer bench (bench-large layer shapes)"
timeout 100 $B bench layer | tail -6
echo "bench-large: $(timeout 150 $B bench train configs/bench-large.gin --steps 6 --warmup 2 | grep -A1 "^bench train" | tr "\n" " " | cut -c1-300)"
cp $L/ncu.csv $OUT/ 2>/dev/null
