#!/usr/bin/env bash
# dyn_device_call2.sh — session 12's device call 2 for the dynamic item table on the device
# window (docs/BENCHMARKS.md, "Session 12"), run from the repository root on the GPU machine
# with .devdeps linked: build hstu + test_gpu, the whole test_gpu (170 s cap), two raw-id ml-latest-small
# runs (negatives from the table vs in-batch, capacity 0.5, LRU) and tools/dyn_check.sh's
# raw-id / resume / host-tier runs.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
BD=build-gpu
cmake -S . -B $BD -G Ninja -DCMAKE_BUILD_TYPE=Release -DHSTU_CUDA=ON -DHSTU_CUDA_ARCHS=90a \
  -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DHSTU_WERROR=OFF \
  -DHSTU_GTEST_SOURCE_DIR=$PWD/.devdeps/googletest -DHSTU_CUTLASS_INCLUDE=$PWD/.devdeps/cutlass/include > cfg.log 2>&1 || tail -5 cfg.log
timeout 220 ninja -C $BD -j16 hstu test_gpu > build.log 2>&1; echo "build rc $? at $(el) s"
grep -E "error|FAILED" build.log | head -20
timeout 170 $BD/test_gpu > tests.log 2>&1; echo "test_gpu rc $? at $(el) s"
grep -E "^\[  PASSED|^\[  FAILED|^\[==========\]|Failure|exception|Expected|Which|actual|differ|Value of" tests.log | head -40
grep -E "^\[       OK \] GpuWindow" tests.log
S=(train configs/ml-1m-hstu.gin --device cuda --quiet --set DatasetArgs.dataset_name=ml-latest-small
   --set DatasetArgs.dataset_path=.devdeps/data/ml-latest-small --set OptimizerArgs.sparse_optimizer_str=\"adam\"
   --set 'DynamicTableArgs.tables=["item"]' --set DatasetArgs.raw_ids=True --set TrainerArgs.num_epochs=20)
summ() { python3 - "$1" << 'PY'
import json, sys
evs, summ, tab = [], {}, {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("event") == "eval": evs.append(r.get("test", {}))
    if r.get("event") == "summary": summ = r
    if r.get("event") == "item_table": tab = r
last = evs[-5:] or [{}]
m = lambda k: sum(e.get(k, float("nan")) for e in last) / len(last)
print("last %d evals HR@10 %.4f NDCG@10 %.4f | %.0f tokens/s | loss %s | %s" % (len(last), m("HR@10"), m("NDCG@10"),
      summ.get("tokens_per_s", 0), summ.get("final_loss", summ.get("loss")), {k: v for k, v in tab.items() if k != "event"}))
PY
}
for v in table-negs catalogue-negs-inbatch; do
  extra=(--set DynamicTableArgs.capacity_ratio=0.5)
  [[ $v == catalogue-negs-inbatch ]] && extra+=(--set RetrievalArgs.negative_sampler=\"in_batch\")
  echo "== raw ids, capacity 0.5, LRU, $v: ${extra[*]}"
  timeout 60 $BD/hstu "${S[@]}" "${extra[@]}" --run-dir runs/raw-$v > raw-$v.log 2>&1; echo "rc $?"
  summ runs/raw-$v/metrics.jsonl 2>&1 | tail -1
done
echo "raw runs done at $(el) s"
BUILD=$BD DYN_SEEDS=" " HALF_EPOCHS=10 SAVE_EVERY=20 TIER_EPOCHS=5 timeout 120 bash tools/dyn_check.sh 2>&1 | tail -8
echo "dyn_check done at $(el) s"
