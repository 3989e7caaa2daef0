#!/usr/bin/env bash
# dyn_check.sh — dynamic item tables (issue 18) on ml-latest-small with the paper's ML-1M preset,
# on the GPU machine after tools/gpu_check.sh built $BUILD (default build-gpu); gpu_check.sh runs
# it with DYN=1 and folds its lines into its summary. Prints one summary line per run to stdout;
# logs go to $LOG (default $BUILD/dyn-check-logs).
#   - DYN_SEEDS (default "42 1 2"): the dense item table and the dynamic one (capacity = the
#     catalogue, so nothing is evicted), both with the sparse Adam a dynamic table implements
#     (the preset's dense_adam updates every row every step), side by side per seed;
#   - raw ids with a table of about half the catalogue (capacity_ratio 0.25 of 9125 keys rounds
#     up to 4096 slots: a power of two of 32-slot buckets), LRU eviction and in-batch negatives
#     (uniform negatives touch nearly the whole catalogue every step, and a key of the current
#     step is never evicted), a save every 20 epochs, and a resume from the second save;
#   - the host tier (a quarter of the rows in HBM) against every row in HBM, in-batch negatives
#     (a step's keys must fit the HBM cache): tokens/s.
# Each line: mean HR@10 / NDCG@10 of the last 10 evaluations, tokens/s, the table's counters.
# HALF_EPOCHS (60), SAVE_EVERY (steps, 20) and TIER_EPOCHS (30) shorten the last runs.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build-gpu}"
LOG="${LOG:-$BUILD/dyn-check-logs}"
mkdir -p "$LOG"
H="$BUILD/hstu"
line() { printf '%-24s %s\n' "$1" "$2"; }
summary() {
  python3 - "$1" << 'PY'
import json, sys
evs, summ, tab = [], None, None
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("event") == "eval": evs.append(r.get("test", {}))
    if r.get("event") == "summary": summ = r
    if r.get("event") == "item_table": tab = r
last = evs[-10:] or [{}]
mean = lambda k: sum(e.get(k, float("nan")) for e in last) / len(last)
print("last %d evals: HR@10 %.4f NDCG@10 %.4f" % (len(last), mean("HR@10"), mean("NDCG@10")),
      "| %.0f tokens/s" % (summ or {}).get("tokens_per_s", 0),
      "| table", {k: v for k, v in (tab or {}).items() if k != "event"})
PY
}
mls=(train configs/ml-1m-hstu.gin --device cuda --quiet --set DatasetArgs.dataset_name=ml-latest-small
     --set DatasetArgs.dataset_path=.devdeps/data/ml-latest-small
     --set OptimizerArgs.sparse_optimizer_str=\"adam\")
dyn=(--set 'DynamicTableArgs.tables=["item"]')
T="${QUALITY_TIMEOUT:-240}"
for seed in ${DYN_SEEDS:-42 1 2}; do
  timeout "$T" "$H" "${mls[@]}" "${dyn[@]}" --set TrainerArgs.seed="$seed" \
    --run-dir "runs/mls-dyn-$seed" > "$LOG/mls_dyn_seed$seed.log" 2>&1 &
  timeout "$T" "$H" "${mls[@]}" --set TrainerArgs.seed="$seed" \
    --run-dir "runs/mls-dense-$seed" > "$LOG/mls_dense_seed$seed.log" 2>&1 &
  wait
  line "mls adam dense s$seed" "$(summary runs/mls-dense-$seed/metrics.jsonl 2>&1 | tail -1)"
  line "mls adam dynamic s$seed" "$(summary runs/mls-dyn-$seed/metrics.jsonl 2>&1 | tail -1)"
done
half=("${mls[@]}" "${dyn[@]}" --set DatasetArgs.raw_ids=True --set DynamicTableArgs.capacity_ratio=0.25
      --set DynamicTableArgs.eviction=\"lru\" --set RetrievalArgs.negative_sampler=\"in_batch\"
      --set TrainerArgs.num_epochs="${HALF_EPOCHS:-60}")
timeout 300 "$H" "${half[@]}" --set TrainerArgs.ckpt_save_interval="${SAVE_EVERY:-20}" --set TrainerArgs.ckpt_keep=5 \
  --run-dir runs/mls-half > "$LOG/mls_half.log" 2>&1
line "raw ids, ~half, LRU" "rc $? $(summary runs/mls-half/metrics.jsonl 2>&1 | tail -1)"
second=$(ls -d runs/mls-half/checkpoints/step-* 2> /dev/null | sed -n 2p)
timeout 300 "$H" "${half[@]}" --resume "$second" --run-dir runs/mls-half-resumed \
  > "$LOG/mls_half_resume.log" 2>&1
line "  resumed $(basename "$second")" "rc $? $(summary runs/mls-half-resumed/metrics.jsonl 2>&1 | tail -1)"
for tier in hbm host; do
  extra=()
  [[ $tier == host ]] && extra=(--set DynamicTableArgs.host_tier=True --set DynamicTableArgs.hbm_ratio=0.25)
  timeout 300 "$H" "${mls[@]}" "${dyn[@]}" "${extra[@]}" --set TrainerArgs.num_epochs="${TIER_EPOCHS:-30}" \
    --set RetrievalArgs.negative_sampler=\"in_batch\" \
    --run-dir "runs/mls-tier-$tier" > "$LOG/mls_tier_$tier.log" 2>&1
  line "dynamic, $tier" "rc $? $(summary runs/mls-tier-$tier/metrics.jsonl 2>&1 | tail -1)"
done
