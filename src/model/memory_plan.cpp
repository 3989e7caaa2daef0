// memory_plan.cpp — the models' memory plans measured without allocating (memory_plan.h). Each
// function below follows one step of HstuModel::plan / allocate or RankingModel::plan / allocate
// in the same order; tests/model/test_memory_plan.cpp holds them equal to the real models.
#include "model/memory_plan.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "config/dynamic_table.h"
#include "core/arena.h"
#include "core/checked.h"
#include "data/negatives.h"
#include "model/batch_tensors.h"
#include "model/hstu_layer.h"
#include "model/params.h"

namespace hstu {
namespace {

std::vector<HstuLayer> make_layers(const Config& cfg) {
  const HstuLayerConfig lc = layer_config(cfg);
  std::vector<HstuLayer> layers;
  for (int64_t l = 0; l < cfg.network.num_layers; ++l) layers.emplace_back(lc, static_cast<int>(l));
  return layers;
}

// The dense parameters both models register first (HstuModel::plan, RankingModel::plan):
// positions, the layers, the optional final LayerNorm. Init values do not change the layout.
void add_common_params(const Config& cfg, std::vector<HstuLayer>& layers, DenseParams& dense) {
  const NetworkArgs& n = cfg.network;
  dense.add("position_embedding", {n.num_position_buckets, n.hidden_size}, false, Init::zeros());
  for (auto& layer : layers) layer.register_params(dense);
  if (n.final_layernorm) {
    dense.add("final_layernorm.weight", {n.hidden_size}, false, Init::ones());
    dense.add("final_layernorm.bias", {n.hidden_size}, false, Init::zeros());
  }
}

// Fills the dense fields of `m` from a registered (not finalised) parameter table.
void set_dense(DenseParams& dense, ModelMemory& m) {
  const int64_t floats = dense.layout();
  m.dense_tensors = static_cast<int64_t>(dense.table().size());
  m.dense_floats = floats;
  m.dense_bytes =
      checked_mul(checked_mul(floats, m.param_elem_bytes, "dense bytes"), 4, "dense bytes x4");
  // DenseParams::finalize adds a compute copy when the activation dtype differs from the
  // masters' (bf16 / f16 on CUDA).
  const DType param = m.act == DType::kF64 ? DType::kF64 : DType::kF32;
  m.compute_copy_bytes =
      m.act == param ? 0
                     : checked_mul(floats, static_cast<int64_t>(dtype_size(m.act)), "compute copy");
}

// "min(<what> + 1 = N, R rows)": what = the ids of one step, + 1 for the padding id 0.
PlannedTable table(const std::string& name, int64_t rows, int64_t ids_per_step,
                   const std::string& what) {
  PlannedTable t;
  t.name = name;
  t.rows = rows;
  const int64_t with_pad = checked_add(ids_per_step, 1, "ids per step");
  t.max_unique = std::min(with_pad, rows);
  t.max_unique_formula =
      "min(" + what + " + 1 = " + std::to_string(with_pad) + ", " + std::to_string(rows) + " rows)";
  return t;
}

// RankingModel::upload_capacity: the packed batch fields, each Arena::kAlign-aligned.
int64_t ranking_upload_capacity(const RankingShape& s, int64_t num_ctx, bool interleave) {
  constexpr int64_t kFieldAlign = static_cast<int64_t>(Arena::kAlign / sizeof(int32_t));
  auto aligned = [](int64_t n) { return (n + kFieldAlign - 1) / kFieldAlign * kFieldAlign; };
  const int64_t b = std::max<int64_t>(s.max_batch, 1);
  const int64_t e = s.max_events, bc = b * num_ctx;
  int64_t n = aligned(b + 1) + 2 * aligned(b) + 2 * aligned(b + 1) + aligned(s.max_candidates) +
              2 * aligned(e);
  if (interleave) n += 2 * aligned(e);
  if (num_ctx > 0) n += 2 * aligned(bc);
  return std::max<int64_t>(n, 1);
}

int64_t ranking_token_capacity(const RankingShape& s) {
  const int64_t num_ctx = static_cast<int64_t>(s.contextual_cardinalities.size());
  const int64_t k = s.num_actions > 0 ? 2 : 1;
  return s.max_batch * num_ctx + k * s.max_events;
}

// The most item ids one step of a windowed item table holds: a training step's inputs, targets
// and negatives, or an evaluation batch's inputs (evaluator.cpp), whichever is more.
struct WindowIds {
  int64_t ids;
  std::string formula;
};
WindowIds window_ids(const Config& cfg) {
  const int64_t l = cfg.dataset.max_history_seqlen;
  const int64_t tokens = checked_mul(cfg.trainer.train_batch_size, l, "tokens per step");
  // -1: one negative per query of the batch, at most one per token.
  const int64_t r = negatives_per_query(cfg.retrieval.num_negatives, tokens);
  const int64_t train = checked_mul(tokens, 2 + r, "item ids per step");
  const int64_t eval = checked_mul(cfg.trainer.eval_batch_size, l, "tokens per evaluation batch");
  if (eval > train) return {eval, std::to_string(eval) + " evaluation tokens"};
  return {train, std::to_string(tokens) + " tokens x (2 + " + std::to_string(r) + " negatives)"};
}

// The device bytes of a dynamic item table: its slots on the device (all of them, or the HBM
// cache of a host tier) as a power of two of buckets, each slot a row (embedding + optimiser
// state) with an 8-byte key and score; the step's window (f32 rows + gradient); the catalogue
// materialised for evaluation (f32 rows + gradient buffer); on CUDA the device window's arrays
// (dynamic_window_bytes). Sharded by key over data-parallel ranks (train/dynamic_shard.h) when
// TrainerArgs.model_parallel_tables names it.
void plan_dynamic_items(const Config& cfg, int64_t num_items, Device device, PlannedTable& t) {
  const DynamicTableConfig c = dynamic_table_config(cfg, "item", num_items - 1);
  DynamicTablePlan& d = t.dynamic;
  d.max_rows = c.max_capacity_rows;
  d.cache_rows = c.gpu_cache_rows;
  d.bucket = c.bucket_size;
  // Per slot: the row, then the key, score and last-use step (i64 each, embed/hash_table.cpp);
  // per bucket its list head (i32).
  d.row_bytes = dynamic_row_bytes(c.dim, c.optimizer, c.value_dtype) + 24;
  d.bucket_bytes = 4;
  const int64_t window = checked_mul(t.max_unique, c.dim * 8, "dynamic window bytes");
  const int64_t catalogue = checked_mul(num_items, c.dim * 8, "dynamic catalogue bytes");
  d.fixed_bytes = checked_add(window, catalogue, "dynamic bytes");
  if (device == Device::kCUDA) {
    d.fixed_bytes = checked_add(d.fixed_bytes,
                                dynamic_window_bytes(t.max_unique, num_items, cfg.dataset.raw_ids),
                                "dynamic bytes");
    if (cfg.dataset.raw_ids)
      d.unsharded_bytes = dynamic_pool_bytes(num_items - 1);  // id 0: padding
  }
  t.dynamic_bytes = dynamic_table_bytes(d, 1);
  const int64_t slots = dynamic_table_slots(d, 1);
  t.dynamic_formula = "dynamic: " + std::to_string(slots) + " slots x " +
                      std::to_string(d.row_bytes) + " B" +
                      (c.gpu_cache_rows > 0 ? " in HBM (host tier)" : "") + " + window " +
                      std::to_string(t.max_unique) + " rows + catalogue " +
                      std::to_string(num_items) + " rows for evaluation";
}

}  // namespace

int64_t item_window_rows(const Config& cfg, int64_t num_items) {
  return table("item", num_items, window_ids(cfg).ids, "").max_unique;
}

ModelShape retrieval_model_shape(const Config& cfg, int64_t num_items) {
  ModelShape shape;
  shape.num_items = num_items;
  shape.max_batch = std::max(cfg.trainer.train_batch_size, cfg.trainer.eval_batch_size);
  shape.max_tokens = shape.max_batch * cfg.dataset.max_history_seqlen;
  // -1: one negative per query of the batch; a batch has at most max_tokens queries.
  shape.num_negatives = negatives_per_query(cfg.retrieval.num_negatives, shape.max_tokens);
  return shape;
}

int64_t retrieval_activation_bytes(const Config& cfg, const ModelShape& shape, DType act,
                                   bool owns_item_table) {
  // HstuModel::allocate, step by step.
  const std::vector<HstuLayer> layers = make_layers(cfg);
  Arena a = Arena::measuring(Device::kCPU, "activations");
  const int64_t t = std::max<int64_t>(shape.max_tokens, 1), d = cfg.network.hidden_size;
  const DType st = stats_dtype(act);
  BatchCapacity cap;
  cap.max_batch = shape.max_batch;
  cap.max_tokens = shape.max_tokens;
  cap.num_negatives = shape.num_negatives;
  cap.num_positions = cfg.network.num_position_buckets;
  allocate_batch_tensors(a, cap);
  for (size_t l = 0; l <= layers.size(); ++l) a.alloc(act, {t, d});  // residual states
  for (const auto& layer : layers) layer.allocate_acts(a, t, act);
  if (!layers.empty()) layers[0].allocate_scratch(a, t, act);
  a.alloc(act, {t, d});  // embeddings before dropout
  if (cfg.network.final_layernorm) {
    a.alloc(act, {t, d});
    a.alloc(st, {t});
    a.alloc(st, {t});
  }
  a.alloc(act, {t, d});  // L2-normalised output
  a.alloc(st, {t});      // its norms
  a.alloc(act, {t, d});  // d_x
  a.alloc(act, {t, d});  // d_out
  a.alloc(DType::kF64, {1});
  if (lowp_loss_rows(cfg, shape, act)) a.alloc(act, {step_table_rows(shape), d});  // loss rows
  if (owns_item_table) {  // the evaluation's normalised item table and norms
    const DType pd = act == DType::kF64 ? DType::kF64 : DType::kF32;
    a.alloc(pd, {shape.num_items, d});
    a.alloc(pd, {shape.num_items});
  }
  return static_cast<int64_t>(a.peak());
}

int64_t ranking_activation_bytes(const Config& cfg, const RankingShape& shape, DType act) {
  // RankingModel::allocate, step by step.
  const std::vector<HstuLayer> layers = make_layers(cfg);
  Arena a = Arena::measuring(Device::kCPU, "activations");
  const int64_t num_ctx = static_cast<int64_t>(shape.contextual_cardinalities.size());
  const bool interleave = shape.num_actions > 0;
  const int64_t d = cfg.network.hidden_size, b = std::max<int64_t>(shape.max_batch, 1);
  const int64_t t = std::max<int64_t>(ranking_token_capacity(shape), 1);
  const int64_t e = std::max<int64_t>(shape.max_events, 1);
  const int64_t nc = std::max<int64_t>(shape.max_candidates, 1);
  const int64_t bc = std::max<int64_t>(b * num_ctx, 1);
  const DType st = stats_dtype(act);
  a.alloc(DType::kI32, {ranking_upload_capacity(shape, num_ctx, interleave)});
  if (interleave) a.alloc(act, {e, d});
  if (num_ctx > 0) a.alloc(act, {bc, d});
  a.alloc(act, {e, d});  // item embeddings
  a.alloc(act, {t, d});  // interleaved tokens
  for (size_t l = 0; l <= layers.size(); ++l) a.alloc(act, {t, d});
  for (const auto& layer : layers) layer.allocate_acts(a, t, act);
  if (!layers.empty()) layers[0].allocate_scratch(a, t, act);
  a.alloc(act, {t, d});   // d_x
  a.alloc(act, {nc, d});  // candidate rows
  if (cfg.network.final_layernorm) {
    a.alloc(act, {nc, d});
    a.alloc(st, {nc});
    a.alloc(st, {nc});
    a.alloc(act, {nc, d});
  }
  a.alloc(act, {nc, d});  // normalised candidates
  a.alloc(st, {nc});
  a.alloc(act, {nc, d});  // d_cand
  for (int64_t w : cfg.ranking.prediction_head_arch)
    for (int i = 0; i < 3; ++i) a.alloc(act, {nc, w});  // pre-activation, activation, gradient
  const int64_t k_out = cfg.ranking.prediction_head_arch.back();
  a.alloc(act, {nc, k_out});  // d_logits
  if (act != DType::kF32 && act != DType::kF64) a.alloc(DType::kF32, {nc, k_out});
  a.alloc(DType::kF64, {1});
  return static_cast<int64_t>(a.peak());
}

ModelMemory retrieval_memory(const Config& cfg, int64_t num_items, Device device, DType act) {
  ModelMemory m;
  m.task = "retrieval";
  m.device = device;
  m.act = act;
  m.layers = cfg.network.num_layers;
  m.dim = cfg.network.hidden_size;
  m.param_elem_bytes = act == DType::kF64 ? 8 : 4;
  const ModelShape shape = retrieval_model_shape(cfg, num_items);
  m.max_tokens = shape.max_tokens;
  std::vector<HstuLayer> layers = make_layers(cfg);
  DenseParams dense;
  add_common_params(cfg, layers, dense);
  set_dense(dense, m);
  const WindowIds w = window_ids(cfg);
  m.tables.push_back(table("item", num_items, w.ids, w.formula));
  if (is_dynamic_table(cfg, "item")) plan_dynamic_items(cfg, num_items, device, m.tables.back());
  m.step_activation_bytes = retrieval_activation_bytes(cfg, shape, act, false);
  m.activation_bytes = retrieval_activation_bytes(cfg, shape, act, true);
  return m;
}

ModelMemory ranking_memory(const Config& cfg, const RankingShape& shape, Device device, DType act) {
  ModelMemory m;
  m.task = "ranking";
  m.device = device;
  m.act = act;
  m.layers = cfg.network.num_layers;
  m.dim = cfg.network.hidden_size;
  m.param_elem_bytes = act == DType::kF64 ? 8 : 4;
  m.max_tokens = ranking_token_capacity(shape);
  m.max_candidates = shape.max_candidates;
  std::vector<HstuLayer> layers = make_layers(cfg);
  DenseParams dense;
  add_common_params(cfg, layers, dense);
  int64_t in = cfg.network.hidden_size;
  const auto& arch = cfg.ranking.prediction_head_arch;
  for (size_t i = 0; i < arch.size(); ++i) {  // the MLP head
    const std::string pre = "head." + std::to_string(i) + ".";
    dense.add_linear(pre + "weight", in, arch[i], Init::zeros());
    if (cfg.ranking.prediction_head_bias) dense.add(pre + "bias", {arch[i]}, false, Init::zeros());
    in = arch[i];
  }
  set_dense(dense, m);
  // shape.max_events: the events of max(train_batch_size, eval_batch_size) samples, as the
  // ranking task sizes the item window (an evaluation batch passes through it too).
  const int64_t samples = shape.max_batch;
  const int64_t events = shape.max_events;
  const std::string ev =
      std::to_string(samples) + " samples x " +
      std::to_string(cfg.dataset.max_history_seqlen + cfg.dataset.max_num_candidates) + " events";
  m.tables.push_back(table("item", shape.num_items, events, ev));
  // Only the item table is sharded in ranking (ranking_task.cpp); these stay replicated.
  if (shape.num_actions > 0) {
    m.tables.push_back(table("action", shape.num_actions, events, ev));
    m.tables.back().shardable = false;
  }
  const int64_t num_ctx = static_cast<int64_t>(shape.contextual_cardinalities.size());
  if (num_ctx > 0) {
    int64_t rows = 0;
    for (int32_t c : shape.contextual_cardinalities) rows += c;
    m.tables.push_back(
        table("contextual", std::max<int64_t>(rows, 1),
              checked_mul(samples, num_ctx, "contextual ids per step"),
              std::to_string(samples) + " samples x " + std::to_string(num_ctx) + " features"));
    m.tables.back().shardable = false;
  }
  m.step_activation_bytes = m.activation_bytes = ranking_activation_bytes(cfg, shape, act);
  return m;
}

int64_t dynamic_window_bytes(int64_t window_rows, int64_t num_ids, bool raw_ids) {
  // The dedupe (ops/cuda/window_gpu.cu): the window's unique ids (i32) and a key + index (i32
  // each) per catalogue id when the flag scan runs (catalogue <= window), else per window row;
  // the rows' keys, counts and table refs (i64, i32, i64). With raw ids, the catalogue's keys
  // (i64) per id.
  const int64_t scanned = num_ids <= window_rows ? num_ids : window_rows;
  int64_t b = checked_add(checked_mul(window_rows, 4 + 8 + 4 + 8, "device window bytes"),
                          checked_mul(scanned, 8, "device window bytes"), "device window bytes");
  if (raw_ids)
    b = checked_add(b, checked_mul(num_ids, 8, "device window bytes"), "device window bytes");
  return b;
}

int64_t dynamic_pool_bytes(int64_t num_ids) {
  return checked_mul(num_ids, 8 + 3 * 4, "present-key pool bytes");
}

int64_t dynamic_table_slots(const DynamicTablePlan& d, int world) {
  const int64_t rows = dynamic_rows_per_rank(d.max_rows, world, d.bucket);
  const int64_t cache = dynamic_rows_per_rank(d.cache_rows, world, d.bucket);
  const int64_t wanted = cache > 0 && cache < rows ? cache : rows;
  const int64_t buckets = static_cast<int64_t>(
      std::bit_ceil(static_cast<uint64_t>((wanted + d.bucket - 1) / d.bucket)));
  return checked_mul(buckets, d.bucket, "dynamic table slots");
}

int64_t dynamic_table_bytes(const DynamicTablePlan& d, int world) {
  const int64_t slots = dynamic_table_slots(d, world);
  const int64_t table = checked_add(
      checked_mul(slots, d.row_bytes, "dynamic table bytes"),
      checked_mul(slots / d.bucket, d.bucket_bytes, "dynamic table bytes"), "dynamic table bytes");
  const int64_t fixed =
      checked_add(d.fixed_bytes, world == 1 ? d.unsharded_bytes : 0, "dynamic bytes");
  return checked_add(table, fixed, "dynamic bytes");
}

}  // namespace hstu
