// model.cpp — HSTU model assembly, memory plan and the retrieval forward/backward.
#include "model/model.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/phase_timer.h"
#include "core/philox.h"
#include "ops/cast.h"
#include "ops/embedding.h"
#include "ops/l2norm.h"
#include "ops/layernorm.h"
#include "ops/sampled_softmax.h"

namespace hstu {
namespace {

std::string mib(size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return s;
}

}  // namespace

HstuLayerConfig layer_config(const Config& cfg) {
  const NetworkArgs& n = cfg.network;
  HstuLayerConfig c;
  c.hidden = n.hidden_size;
  c.heads = n.num_attention_heads;
  c.head_dim = n.kv_channels;
  c.alpha =
      static_cast<float>(n.attention_alpha < 0 ? 1.0 / std::sqrt(static_cast<double>(n.kv_channels))
                                               : n.attention_alpha);
  const int64_t divisor = n.scaling_seqlen > 0 ? n.scaling_seqlen : cfg.dataset.max_history_seqlen;
  c.scale = 1.0f / static_cast<float>(divisor);
  c.eps = static_cast<float>(n.norm_epsilon);
  c.ln_in_affine = n.learnable_input_layernorm;
  c.ln_out_affine = n.learnable_output_layernorm;
  c.uvqk_bias = n.uvqk_bias;
  c.out_bias = n.output_bias;
  c.rab = n.relative_attention_bias;
  c.rab_positions = n.num_position_buckets;
  c.rab_time_buckets = n.rab_num_time_buckets;
  c.dropout = static_cast<float>(n.hidden_dropout);
  c.causal = n.is_causal;
  c.contextual_mask = !n.disable_contextual_mask;
  c.target_group_size = static_cast<int32_t>(n.target_group_size);
  c.max_attn_len = static_cast<int32_t>(n.max_attn_len);
  c.recompute_ln = n.recompute_input_layernorm;
  c.recompute_silu = n.recompute_input_silu;
  c.init = n.init;
  return c;
}

HstuModel::HstuModel(const Config& cfg, const ModelShape& shape, Device device, DType act)
    : cfg_(cfg), shape_(shape), device_(device), act_(act) {
  const HstuLayerConfig lc = layer_config(cfg);
  for (int64_t l = 0; l < cfg.network.num_layers; ++l)
    layers_.emplace_back(lc, static_cast<int>(l));
  cap_.max_batch = shape.max_batch;
  cap_.max_tokens = shape.max_tokens;
  cap_.num_negatives = shape.num_negatives;
  cap_.num_positions = cfg.network.num_position_buckets;
}

void HstuModel::plan(uint64_t seed) {
  const NetworkArgs& n = cfg_.network;
  const int64_t d = n.hidden_size;
  const bool meta = n.init == "meta";
  // Meta's research init: positions xavier_normal; recsys-examples: U(+-sqrt(1/buckets)).
  pos_table_ = dense_.add(
      "position_embedding", {n.num_position_buckets, d}, false,
      meta ? Init::xavier_normal()
           : Init::uniform(std::sqrt(1.0 / static_cast<double>(n.num_position_buckets))));
  for (auto& layer : layers_) layer.register_params(dense_);
  if (n.final_layernorm) {
    final_ln_w_ = dense_.add("final_layernorm.weight", {d}, false, Init::ones());
    final_ln_b_ = dense_.add("final_layernorm.bias", {d}, false, Init::zeros());
  }
  const DType param_dtype = act_ == DType::kF64 ? DType::kF64 : DType::kF32;
  const DType compute_dtype = act_ == DType::kF64 ? DType::kF64 : act_;
  dense_.finalize(device_, seed, param_dtype, compute_dtype);

  if (shape_.window_rows == 0) {
    own_items_.allocate("item_embedding", shape_.num_items, d, device_,
                        cfg_.optimizer.sparse_optimizer_str, param_dtype);
    Arena host(Device::kCPU, own_items_.weight.nbytes() + Arena::kAlign, "init");
    Tensor h = host.alloc(param_dtype, {shape_.num_items, d});
    init_tensor(h, Init::trunc_normal(0.02), seed, "item_embedding");
    copy_tensor(own_items_.weight, h);
  }

  lowp_rows_ = lowp_loss_rows(cfg_, shape_, act_);
  arena_ = Arena::planned(device_, "activations", [this](Arena& a) { allocate(a); });
}

int64_t step_table_rows(const ModelShape& shape) {
  return shape.window_rows > 0 ? shape.window_rows : shape.num_items;
}

bool lowp_loss_rows(const Config& cfg, const ModelShape& shape, DType act) {
  const int64_t rows = step_table_rows(shape);
  return (act == DType::kBF16 || act == DType::kF16) && cfg.retrieval.loss_rows_dtype == "auto" &&
         rows > 0 && shape.max_tokens * (shape.num_negatives + 1) >= 3 * rows;
}

void HstuModel::allocate(Arena& a) {
  const int64_t t = std::max<int64_t>(shape_.max_tokens, 1), d = cfg_.network.hidden_size;
  const DType st = stats_dtype(act_);
  buf_ = Buffers{};
  batch_ = allocate_batch_tensors(a, cap_);
  for (size_t l = 0; l <= layers_.size(); ++l) buf_.xs.push_back(a.alloc(act_, {t, d}));
  for (auto& layer : layers_) buf_.acts.push_back(layer.allocate_acts(a, t, act_));
  if (!layers_.empty()) buf_.scratch = layers_[0].allocate_scratch(a, t, act_);
  buf_.emb = a.alloc(act_, {t, d});
  if (cfg_.network.final_layernorm) {
    buf_.out = a.alloc(act_, {t, d});
    buf_.out_ln_mean = a.alloc(st, {t});
    buf_.out_ln_rstd = a.alloc(st, {t});
  }
  buf_.out_norm = a.alloc(act_, {t, d});
  buf_.norms = a.alloc(st, {t});
  buf_.d_x = a.alloc(act_, {t, d});
  buf_.d_out = a.alloc(act_, {t, d});
  buf_.loss = a.alloc(DType::kF64, {1});
  if (lowp_rows_) buf_.items_lowp = a.alloc(act_, {step_table_rows(shape_), d});
  // A sharded table is evaluated shard by shard: no full-catalogue buffers.
  if (shape_.window_rows > 0 && !shape_.full_eval_buffers) return;
  const DType pd = act_ == DType::kF64 ? DType::kF64 : DType::kF32;
  buf_.items_norm = a.alloc(pd, {shape_.num_items, d});
  buf_.item_norms = a.alloc(pd, {shape_.num_items});
}

void HstuModel::set_item_table(EmbeddingTable* window) {
  HSTU_CHECK(shape_.window_rows > 0, "set_item_table: the model owns its item table");
  HSTU_CHECK(
      window && window->rows >= shape_.window_rows && window->dim == cfg_.network.hidden_size,
      "set_item_table: a window of at least [", shape_.window_rows, ", ", cfg_.network.hidden_size,
      "] is needed");
  items_ = window;
}

int64_t HstuModel::num_params() const {
  int64_t n = shape_.num_items * cfg_.network.hidden_size;
  for (const auto& p : dense_.table()) n += p.numel;
  return n;
}

std::string HstuModel::describe_plan() const {
  std::ostringstream os;
  os << "memory plan (" << device_name(device_) << ", activations " << dtype_name(act_) << "):\n"
     << "  dense parameters  " << dense_.table().size() << " tensors, " << dense_.size()
     << " floats x4 (param, grad, m, v) = " << mib(dense_.flat_params().nbytes() * 4) << "\n"
     << "  item embedding    [" << shape_.num_items << ", " << cfg_.network.hidden_size << "] "
     << (shape_.full_eval_buffers
             ? "a dynamic table (its window of " + std::to_string(shape_.window_rows) +
                   " rows here; the table itself is planned by `hstu plan`)"
         : shape_.window_rows > 0
             ? "sharded over the ranks (its shard and window below)"
             : "+ grad + optimizer = " + mib(own_items_.arena ? own_items_.arena->capacity() : 0))
     << "\n"
     << "  activations       " << layers_.size() << " layers, " << shape_.max_tokens
     << " tokens max = " << mib(arena_ ? arena_->capacity() : 0) << "\n";
  return os.str();
}

void HstuModel::embed(Ctx& ctx, const BatchTensors& b, bool training, uint64_t seed) {
  const int64_t t = b.num_tokens;
  const double p =
      cfg_.network.input_dropout < 0 ? cfg_.network.hidden_dropout : cfg_.network.input_dropout;
  const Tensor emb = first_rows(buf_.emb, t);
  phase(ctx, "fwd.embed");
  embedding_fwd(ctx, items_->weight, b.item_ids.rows(0, t),
                static_cast<float>(std::sqrt(static_cast<double>(cfg_.network.hidden_size))),
                dense_.param(pos_table_), b.positions.rows(0, t), emb);
  dropout_fwd(ctx, emb,
              DropoutSpec{training ? static_cast<float>(p) : 0.0f, derive_seed(seed, 1000),
                          b.dropout_offset(cfg_.network.hidden_size)},
              first_rows(buf_.xs[0], t));
}

void HstuModel::run_layers(Ctx& ctx, const BatchTensors& b, bool training, uint64_t seed) {
  const int64_t t = b.num_tokens;
  for (size_t l = 0; l < layers_.size(); ++l)
    layers_[l].forward(ctx, dense_, b, first_rows(buf_.xs[l], t), first_rows(buf_.xs[l + 1], t),
                       buf_.acts[l], buf_.scratch, training, derive_seed(seed, l));
  const Tensor last = first_rows(buf_.xs[layers_.size()], t);
  phase(ctx, "fwd.output_norm");
  Tensor out = last;
  if (cfg_.network.final_layernorm) {
    out = first_rows(buf_.out, t);
    layernorm_fwd(ctx, last, dense_.param(final_ln_w_), dense_.param(final_ln_b_),
                  static_cast<float>(cfg_.network.norm_epsilon), out,
                  first_rows(buf_.out_ln_mean, t), first_rows(buf_.out_ln_rstd, t));
  }
  l2norm_fwd(ctx, out, static_cast<float>(cfg_.retrieval.l2_norm_eps), first_rows(buf_.out_norm, t),
             first_rows(buf_.norms, t));
}

Tensor HstuModel::encode(Ctx& ctx, const BatchTensors& b) {
  embed(ctx, b, false, 0);
  const StepAttention step_attn(ctx, layers_, dense_, b, buf_.acts, buf_.scratch);
  run_layers(ctx, b, false, 0);
  return first_rows(buf_.out_norm, b.num_tokens);
}

double HstuModel::train_step(Ctx& ctx, const BatchTensors& b, uint64_t seed, double loss_scale) {
  forward_backward(ctx, b, seed, loss_scale);
  double loss = 0;
  copy_bytes(&loss, Device::kCPU, buf_.loss.data, buf_.loss.device, sizeof(double));
  return loss;
}

void HstuModel::forward_backward(Ctx& ctx, const BatchTensors& b, uint64_t seed, double loss_scale,
                                 GradHook* hook) {
  const int64_t t = b.num_tokens;
  const float eps = static_cast<float>(cfg_.retrieval.l2_norm_eps);
  embed(ctx, b, true, seed);
  const StepAttention step_attn(ctx, layers_, dense_, b, buf_.acts, buf_.scratch);  // to the end
  run_layers(ctx, b, true, seed);
  // Retrieval head: sampled softmax on the L2-normalised outputs.
  SampledSoftmaxSpec spec;
  spec.temperature = static_cast<float>(cfg_.retrieval.temperature);
  spec.eps = eps;
  spec.loss_scale = loss_scale;
  const Tensor d_out = first_rows(buf_.d_out, t), d_x = first_rows(buf_.d_x, t);
  const int64_t v = step_table_rows(shape_);
  Tensor rows = items_->weight.rows(0, v);
  if (lowp_rows_) {
    phase(ctx, "loss.rows_cast");
    cast(ctx, rows, buf_.items_lowp);
    rows = buf_.items_lowp;
  }
  phase(ctx, "loss.sampled_softmax");
  sampled_softmax(ctx, spec, first_rows(buf_.out_norm, t), b.target_ids.rows(0, t),
                  negatives_view(b), rows, buf_.loss, d_out, items_->grad.rows(0, v),
                  items_->touched.rows(0, v));
  // Back through the output normalisation(s).
  phase(ctx, "bwd.output_norm");
  if (cfg_.network.final_layernorm) {
    const Tensor d_ln = first_rows(buf_.scratch.d_xn, t);
    l2norm_bwd(ctx, first_rows(buf_.out_norm, t), first_rows(buf_.norms, t), eps, d_out, d_ln,
               false);
    layernorm_bwd(ctx, first_rows(buf_.xs[layers_.size()], t), dense_.param(final_ln_w_),
                  first_rows(buf_.out_ln_mean, t), first_rows(buf_.out_ln_rstd, t), d_ln, d_x,
                  false, dense_.grad(final_ln_w_), dense_.grad(final_ln_b_));
  } else {
    l2norm_bwd(ctx, first_rows(buf_.out_norm, t), first_rows(buf_.norms, t), eps, d_out, d_x,
               false);
  }
  if (hook) hook->stage_done(ctx, 0);
  for (size_t l = layers_.size(); l-- > 0;) {
    layers_[l].backward(ctx, dense_, b, first_rows(buf_.xs[l], t), buf_.acts[l], buf_.scratch, d_x,
                        true, derive_seed(seed, l));
    if (hook) hook->stage_done(ctx, static_cast<int>(layers_.size() - l));
  }
  // Input: dropout, then embedding rows and positions.
  const double p =
      cfg_.network.input_dropout < 0 ? cfg_.network.hidden_dropout : cfg_.network.input_dropout;
  phase(ctx, "bwd.embed");
  dropout_bwd(ctx, d_x,
              DropoutSpec{static_cast<float>(p), derive_seed(seed, 1000),
                          b.dropout_offset(cfg_.network.hidden_size)},
              d_x);
  embedding_bwd(ctx, d_x, b.item_ids.rows(0, t),
                static_cast<float>(std::sqrt(static_cast<double>(cfg_.network.hidden_size))),
                items_->grad, items_->touched, b.positions.rows(0, t), dense_.grad(pos_table_));
  if (hook) hook->stage_done(ctx, static_cast<int>(layers_.size()) + 1);
}

Tensor HstuModel::normalized_items(Ctx& ctx) {
  HSTU_CHECK(
      (shape_.window_rows == 0 || shape_.full_eval_buffers) && items_->rows >= shape_.num_items,
      "normalized_items: the item table is a window, not the catalogue");
  l2norm_fwd(ctx, items_->weight.rows(0, shape_.num_items),
             static_cast<float>(cfg_.retrieval.l2_norm_eps), buf_.items_norm, buf_.item_norms);
  return buf_.items_norm;
}

}  // namespace hstu
