// ranking_model.cpp — the generative ranking model: assembly, memory plan, forward and the
// explicit backward (see ranking_model.h).
#include "model/ranking_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/phase_timer.h"
#include "core/philox.h"
#include "model/model.h"
#include "ops/cast.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/l2norm.h"
#include "ops/layernorm.h"
#include "ops/losses.h"

namespace hstu {
namespace {

std::string mib(size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return s;
}

// The uploaded batch fields start Arena::kAlign-aligned in the upload block, as separately
// allocated buffers would.
constexpr int64_t kFieldAlign = static_cast<int64_t>(Arena::kAlign / sizeof(int32_t));
int64_t aligned(int64_t n) {
  return (n + kFieldAlign - 1) / kFieldAlign * kFieldAlign;
}

// Packs i32 batch fields one after the other into `host`, laid out as the device block they
// are copied into, and hands out each field's view of the block.
class FieldPacker {
 public:
  FieldPacker(int32_t* host, const Tensor& block) : host_(host), block_(block) {}

  // The first n values of src.
  Tensor put(const std::vector<int32_t>& src, int64_t n, const char* what) {
    HSTU_CHECK(n <= static_cast<int64_t>(src.size()), "ranking batch field ", what, " has ",
               src.size(), " values, expected ", n);
    HSTU_CHECK(at_ + n <= block_.dim(0), "ranking batch field ", what,
               " overflows the upload block of ", block_.dim(0), " values");
    std::copy_n(src.data(), n, host_ + at_);
    const Tensor view = block_.rows(at_, at_ + n);
    end_ = at_ + n;
    at_ += aligned(n);
    return view;
  }
  Tensor put(const std::vector<int32_t>& src, const char* what) {
    return put(src, static_cast<int64_t>(src.size()), what);
  }
  // The bytes to copy: up to the end of the last field.
  size_t bytes() const { return static_cast<size_t>(end_) * sizeof(int32_t); }

 private:
  int32_t* host_;
  const Tensor& block_;
  int64_t at_ = 0, end_ = 0;
};

}  // namespace

RankingModel::RankingModel(const Config& cfg, const RankingShape& shape, Device device, DType act)
    : cfg_(cfg), shape_(shape), device_(device), act_(act) {
  const RankingArgs& r = cfg.ranking;
  HSTU_CHECK(!r.prediction_head_arch.empty() && r.prediction_head_arch.back() >= 1,
             "RankingArgs.prediction_head_arch must end with the number of outputs (>= 1)");
  HSTU_CHECK(r.num_tasks >= 1, "RankingArgs.num_tasks must be >= 1");
  const int64_t k_out = r.prediction_head_arch.back();
  binary_ = r.num_tasks > 1 || k_out == 1;
  HSTU_CHECK(r.num_tasks == 1 || k_out == r.num_tasks, "RankingArgs.num_tasks = ", r.num_tasks,
             " needs prediction_head_arch to end with ", r.num_tasks, " (one logit per task), not ",
             k_out);
  HSTU_CHECK(r.prediction_head_act_type == "relu" || r.prediction_head_act_type == "gelu",
             "RankingArgs.prediction_head_act_type must be relu or gelu, not '",
             r.prediction_head_act_type, "'");
  HSTU_CHECK(!cfg.network.relative_attention_bias,
             "ranking does not support relative_attention_bias yet");
  HSTU_CHECK(shape.num_actions > 0, "ranking needs a dataset with actions (the labels)");
  const bool lowp = act == DType::kBF16 || act == DType::kF16;
  HSTU_CHECK(device == Device::kCPU ? act == DType::kF32 || act == DType::kF64 : lowp,
             "RankingModel on ", device_name(device), " takes ",
             device == Device::kCPU ? "f32 or f64" : "bf16 or f16 (the CUDA attention's inputs)",
             " activations, not ", dtype_name(act));
  num_ctx_ = static_cast<int32_t>(shape.contextual_cardinalities.size());
  interleave_ = shape.num_actions > 0;
  score_all_ = cfg.dataset.max_num_candidates == 0;
  const int64_t k = interleave_ ? 2 : 1;
  max_tokens_ = shape.max_batch * num_ctx_ + k * shape.max_events;
  HstuLayerConfig lc = layer_config(cfg);
  if (cfg.network.scaling_seqlen <= 0)
    lc.scale = 1.0f / static_cast<float>(num_ctx_ + k * (cfg.dataset.max_history_seqlen +
                                                         cfg.dataset.max_num_candidates));
  for (int64_t l = 0; l < cfg.network.num_layers; ++l)
    layers_.emplace_back(lc, static_cast<int>(l));
  int32_t off = 0;
  for (int32_t c : shape.contextual_cardinalities) {
    ctx_row_offset_.push_back(off);
    off += c;
  }
}

Activation RankingModel::head_act() const {
  return cfg_.ranking.prediction_head_act_type == "gelu" ? Activation::kGelu : Activation::kRelu;
}

RankingShape ranking_shape(const Config& cfg, const SequenceDataset& ds) {
  const int64_t batch = std::max(cfg.trainer.train_batch_size, cfg.trainer.eval_batch_size);
  RankingShape shape;
  shape.num_items = ds.num_items;
  shape.num_actions = ds.num_actions;
  shape.contextual_cardinalities = ds.contextual_cardinalities;
  shape.max_batch = batch;
  shape.max_events = batch * (cfg.dataset.max_history_seqlen + cfg.dataset.max_num_candidates);
  // max_num_candidates = 0: every event is scored.
  shape.max_candidates = cfg.dataset.max_num_candidates > 0 ? batch * cfg.dataset.max_num_candidates
                                                            : shape.max_events;
  shape.movielens_ratings = ds.name.rfind("ml-", 0) == 0;
  return shape;
}

std::vector<EmbeddingTable*> RankingModel::tables() {
  std::vector<EmbeddingTable*> t{item_table_};
  if (interleave_) t.push_back(&actions_);
  if (num_ctx_ > 0) t.push_back(&contextual_);
  return t;
}

void RankingModel::plan(uint64_t seed) {
  const NetworkArgs& n = cfg_.network;
  const int64_t d = n.hidden_size;
  pos_table_ =
      dense_.add("position_embedding", {n.num_position_buckets, d}, false,
                 Init::uniform(std::sqrt(1.0 / static_cast<double>(n.num_position_buckets))));
  for (auto& layer : layers_) layer.register_params(dense_);
  if (n.final_layernorm) {
    final_ln_w_ = dense_.add("final_layernorm.weight", {d}, false, Init::ones());
    final_ln_b_ = dense_.add("final_layernorm.bias", {d}, false, Init::zeros());
  }
  int64_t in = d;
  const auto& arch = cfg_.ranking.prediction_head_arch;
  for (size_t i = 0; i < arch.size(); ++i) {
    const std::string pre = "head." + std::to_string(i) + ".";
    head_w_.push_back(dense_.add_linear(pre + "weight", in, arch[i], Init::xavier_uniform()));
    head_b_.push_back(cfg_.ranking.prediction_head_bias
                          ? dense_.add(pre + "bias", {arch[i]}, false, Init::zeros())
                          : -1);
    in = arch[i];
  }
  // fp32 masters (f64 for the f64 reference); the GEMMs read a compute copy in the activation
  // dtype (bf16 on CUDA), filled by finalize and refreshed by optimizer_step after every update.
  const DType param_dtype = act_ == DType::kF64 ? DType::kF64 : DType::kF32;
  dense_.finalize(device_, seed, param_dtype, act_);

  auto make_table = [&](EmbeddingTable& t, const std::string& name, int64_t rows) {
    t.allocate(name, rows, d, device_, cfg_.optimizer.sparse_optimizer_str, param_dtype);
    Arena host(Device::kCPU, t.weight.nbytes() + Arena::kAlign, "init");
    Tensor h = host.alloc(param_dtype, {rows, d});
    init_tensor(h, Init::trunc_normal(0.02), seed, name);
    copy_tensor(t.weight, h);
  };
  if (shape_.item_window_rows == 0) make_table(items_, "item_embedding", shape_.num_items);
  if (interleave_) make_table(actions_, "action_embedding", shape_.num_actions);
  if (num_ctx_ > 0) {
    int64_t rows = 0;
    for (int32_t c : shape_.contextual_cardinalities) rows += c;
    make_table(contextual_, "contextual_embedding", std::max<int64_t>(rows, 1));
  }

  arena_ = Arena::planned(device_, "activations", [this](Arena& a) { allocate(a); });
}

void RankingModel::allocate(Arena& a) {
  const int64_t d = cfg_.network.hidden_size, b = std::max<int64_t>(shape_.max_batch, 1);
  const int64_t t = std::max<int64_t>(max_tokens_, 1), e = std::max<int64_t>(shape_.max_events, 1);
  const int64_t nc = std::max<int64_t>(shape_.max_candidates, 1);
  const int64_t bc = std::max<int64_t>(b * num_ctx_, 1);
  const DType st = stats_dtype(act_);
  buf_ = Buffers{};
  batch_ = BatchTensors{};
  buf_.upload = a.alloc(DType::kI32, {upload_capacity()});
  if (interleave_) buf_.action_emb = a.alloc(act_, {e, d});
  if (num_ctx_ > 0) buf_.ctx_emb = a.alloc(act_, {bc, d});
  buf_.item_emb = a.alloc(act_, {e, d});
  buf_.emb = a.alloc(act_, {t, d});
  for (size_t l = 0; l <= layers_.size(); ++l) buf_.xs.push_back(a.alloc(act_, {t, d}));
  for (auto& layer : layers_) buf_.acts.push_back(layer.allocate_acts(a, t, act_));
  if (!layers_.empty()) buf_.scratch = layers_[0].allocate_scratch(a, t, act_);
  buf_.d_x = a.alloc(act_, {t, d});
  buf_.cand = a.alloc(act_, {nc, d});
  if (cfg_.network.final_layernorm) {
    buf_.cand_ln = a.alloc(act_, {nc, d});
    buf_.ln_mean = a.alloc(st, {nc});
    buf_.ln_rstd = a.alloc(st, {nc});
    buf_.d_cand2 = a.alloc(act_, {nc, d});
  }
  buf_.cand_norm = a.alloc(act_, {nc, d});
  buf_.norms = a.alloc(st, {nc});
  buf_.d_cand = a.alloc(act_, {nc, d});
  for (int64_t w : cfg_.ranking.prediction_head_arch) {
    buf_.head_h.push_back(a.alloc(act_, {nc, w}));
    buf_.head_a.push_back(a.alloc(act_, {nc, w}));
    buf_.head_d.push_back(a.alloc(act_, {nc, w}));
  }
  buf_.d_logits = a.alloc(act_, {nc, num_outputs()});
  if (act_ != DType::kF32 && act_ != DType::kF64)
    buf_.logits = a.alloc(DType::kF32, {nc, num_outputs()});
  buf_.loss = a.alloc(DType::kF64, {1});
}

// The most values upload() packs: its fields, each at its capacity, in the same order.
int64_t RankingModel::upload_capacity() const {
  const int64_t b = std::max<int64_t>(shape_.max_batch, 1);
  const int64_t e = shape_.max_events, bc = b * num_ctx_;
  int64_t n = aligned(b + 1) + 2 * aligned(b)   // token offsets, contexts, targets
              + 2 * aligned(b + 1)              // event and candidate offsets
              + aligned(shape_.max_candidates)  // labels
              + 2 * aligned(e);                 // item ids and positions
  if (interleave_) n += 2 * aligned(e);         // action ids and positions
  if (num_ctx_ > 0) n += 2 * aligned(bc);       // contextual ids and positions
  return std::max<int64_t>(n, 1);
}

size_t RankingModel::upload_staging_bytes() const {
  return static_cast<size_t>(upload_capacity()) * sizeof(int32_t);
}

void RankingModel::set_item_table(EmbeddingTable* window) {
  HSTU_CHECK(shape_.item_window_rows > 0, "set_item_table: the ranking model owns its item table");
  HSTU_CHECK(
      window && window->rows >= shape_.item_window_rows && window->dim == cfg_.network.hidden_size,
      "set_item_table: a window of at least [", shape_.item_window_rows, ", ",
      cfg_.network.hidden_size, "] rows is needed");
  item_table_ = window;
}

ModelShape RankingModel::runtime_shape() const {
  int64_t ctx_rows = 0;
  for (int32_t c : shape_.contextual_cardinalities) ctx_rows += c;
  ModelShape s;
  s.num_items = std::max({shape_.num_items, shape_.num_actions, ctx_rows});
  s.max_batch = 0;
  s.max_tokens = max_tokens_;
  s.num_negatives = 0;
  return s;
}

int64_t RankingModel::num_params() const {
  const int64_t d = cfg_.network.hidden_size;
  int64_t n =
      shape_.num_items * d + actions_.rows * actions_.dim + contextual_.rows * contextual_.dim;
  for (const auto& p : dense_.table()) n += p.numel;
  return n;
}

std::string RankingModel::describe_plan() const {
  std::ostringstream os;
  auto table_bytes = [](const EmbeddingTable& t) { return t.arena ? t.arena->capacity() : 0; };
  os << "memory plan (" << device_name(device_) << ", activations " << dtype_name(act_) << "):\n"
     << "  dense parameters  " << dense_.table().size() << " tensors, " << dense_.size()
     << " floats x4 (param, grad, m, v) = " << mib(dense_.flat_params().nbytes() * 4) << "\n"
     << "  embedding tables  item ["
     << (shape_.item_window_rows > 0
             ? "window of " + std::to_string(shape_.item_window_rows) + " rows, sharded"
             : std::to_string(items_.rows))
     << "], action [" << actions_.rows << "], contextual [" << contextual_.rows << "] x "
     << cfg_.network.hidden_size << " + grad + optimizer = "
     << mib(table_bytes(items_) + table_bytes(actions_) + table_bytes(contextual_)) << "\n"
     << "  activations       " << layers_.size() << " layers, " << max_tokens_ << " tokens / "
     << shape_.max_candidates << " candidates max = " << mib(arena_ ? arena_->capacity() : 0)
     << "\n";
  return os.str();
}

void RankingModel::upload(const SequenceBatch& b, HostStaging* staging, void* stream) {
  const int64_t events = b.num_tokens();
  HSTU_CHECK(b.batch_size <= shape_.max_batch && events <= shape_.max_events, "ranking batch of ",
             b.batch_size, " samples / ", events, " events exceeds the planned ", shape_.max_batch,
             " / ", shape_.max_events);
  HSTU_CHECK(static_cast<int64_t>(b.actions.size()) >= events, "ranking batch has no actions");
  HSTU_CHECK(static_cast<int64_t>(b.contextual.size()) == int64_t{b.batch_size} * num_ctx_,
             "ranking batch has ", b.contextual.size(), " contextual values, expected ",
             int64_t{b.batch_size} * num_ctx_);
  if (score_all_) {
    // Every event scored: no targets in the attention or the positions; the candidate rows
    // (gather_candidate_rows) are the last num_candidates[b] = n_b events of each sample.
    for (int32_t s = 0; s < b.batch_size; ++s)
      HSTU_CHECK(b.num_candidates[s] == b.offsets[s + 1] - b.offsets[s], "sample ", s, " scores ",
                 b.num_candidates[s], " of its ", b.offsets[s + 1] - b.offsets[s],
                 " events; with DatasetArgs.max_num_candidates = 0 every event is scored");
    no_targets_.assign(static_cast<size_t>(b.batch_size), 0);
    ranking_layout(b.offsets, no_targets_, num_ctx_, interleave_, cfg_.network.num_position_buckets,
                   layout_);
    for (int32_t s = 0; s < b.batch_size; ++s)
      layout_.candidate_offsets[s + 1] = layout_.candidate_offsets[s] + b.num_candidates[s];
  } else {
    ranking_layout(b.offsets, b.num_candidates, num_ctx_, interleave_,
                   cfg_.network.num_position_buckets, layout_);
  }
  num_events_ = events;
  num_cand_ = layout_.candidate_offsets.back();
  HSTU_CHECK(num_cand_ <= shape_.max_candidates, "ranking batch has ", num_cand_,
             " candidates, planned ", shape_.max_candidates);
  // Labels: the candidates' actions as bitmasks (BCE) or classes (cross-entropy).
  labels_.clear();
  for (int32_t s = 0; s < b.batch_size; ++s)
    for (int32_t i = b.offsets[s + 1] - b.num_candidates[s]; i < b.offsets[s + 1]; ++i)
      labels_.push_back(b.labels.empty() ? b.actions[static_cast<size_t>(i)]
                                         : b.labels[static_cast<size_t>(i)]);
  if (!binary_) {
    const int32_t k = static_cast<int32_t>(num_outputs());
    for (int32_t& l : labels_) {
      if (shape_.movielens_ratings) --l;
      HSTU_CHECK(l >= 0 && l < k, "ranking label ", l + (shape_.movielens_ratings ? 1 : 0),
                 " is outside the ", k, " classes of prediction_head_arch");
    }
  }
  ctx_ids_h_.resize(b.contextual.size());
  for (size_t i = 0; i < b.contextual.size(); ++i)
    ctx_ids_h_[i] = b.contextual[i] + ctx_row_offset_[i % static_cast<size_t>(num_ctx_)];

  batch_.batch_size = b.batch_size;
  batch_.num_tokens = layout_.token_offsets.back();
  batch_.max_seqlen = layout_.max_seqlen;
  batch_.host = &b;
  HSTU_CHECK(batch_.num_tokens <= max_tokens_, "ranking batch has ", batch_.num_tokens,
             " tokens, planned ", max_tokens_);
  // Pack the fields in the block's layout: into the block itself on the CPU, else into the
  // staging buffer (once its previous copy has read it) or a host buffer; then one copy.
  int32_t* host = buf_.upload.as<int32_t>();
  if (staging) {
    HSTU_CHECK(staging->size() >= upload_staging_bytes(), "ranking upload staging of ",
               staging->size(), " bytes, needs ", upload_staging_bytes());
    staging->wait();
    host = reinterpret_cast<int32_t*>(staging->data());
  } else if (device_ != Device::kCPU) {
    upload_host_.resize(static_cast<size_t>(buf_.upload.numel()));  // once: no allocation later
    host = upload_host_.data();
  }
  FieldPacker pack(host, buf_.upload);
  batch_.offsets = pack.put(layout_.token_offsets, "token_offsets");
  batch_.num_contexts = pack.put(layout_.num_contexts, "num_contexts");
  batch_.num_targets = pack.put(layout_.num_targets, "num_targets");
  buf_.ev_offsets = pack.put(b.offsets, "offsets");
  buf_.cand_offsets = pack.put(layout_.candidate_offsets, "candidate_offsets");
  buf_.labels = pack.put(labels_, "labels");
  buf_.item_ids = pack.put(b.item_ids, events, "item_ids");
  buf_.item_pos = pack.put(layout_.item_positions, "item_positions");
  if (interleave_) {
    buf_.action_ids = pack.put(b.actions, events, "actions");
    buf_.action_pos = pack.put(layout_.action_positions, "action_positions");
  }
  if (num_ctx_ > 0) {
    buf_.ctx_ids = pack.put(ctx_ids_h_, "contextual");
    buf_.ctx_pos = pack.put(layout_.context_positions, "context_positions");
  }
  if (staging) {
    copy_bytes_async(buf_.upload.data, device_, host, Device::kCPU, pack.bytes(), stream);
    staging->record(stream);
  } else if (host != buf_.upload.data) {
    copy_bytes(buf_.upload.data, device_, host, Device::kCPU, pack.bytes());
  }
}

void RankingModel::forward(Ctx& ctx, bool training, uint64_t seed) {
  const int64_t t = batch_.num_tokens, e = num_events_, nc = num_cand_;
  const int64_t bc = int64_t{batch_.batch_size} * num_ctx_;
  const float sq = static_cast<float>(std::sqrt(static_cast<double>(cfg_.network.hidden_size)));
  const Tensor pos = dense_.param(pos_table_);
  phase(ctx, "fwd.embed");
  embedding_fwd(ctx, item_table_->weight, buf_.item_ids.rows(0, e), sq, pos,
                buf_.item_pos.rows(0, e), buf_.item_emb.rows(0, e));
  if (interleave_)
    embedding_fwd(ctx, actions_.weight, buf_.action_ids.rows(0, e), sq, pos,
                  buf_.action_pos.rows(0, e), buf_.action_emb.rows(0, e));
  if (num_ctx_ > 0)
    embedding_fwd(ctx, contextual_.weight, buf_.ctx_ids.rows(0, bc), sq, pos,
                  buf_.ctx_pos.rows(0, bc), buf_.ctx_emb.rows(0, bc));
  const Tensor emb = first_rows(buf_.emb, t);
  ranking_tokens_fwd(ctx, num_ctx_ > 0 ? buf_.ctx_emb.rows(0, bc) : Tensor(),
                     buf_.item_emb.rows(0, e), interleave_ ? buf_.action_emb.rows(0, e) : Tensor(),
                     buf_.ev_offsets.rows(0, batch_.batch_size + 1), num_ctx_, emb,
                     batch_.offsets.rows(0, batch_.batch_size + 1));
  const double p =
      cfg_.network.input_dropout < 0 ? cfg_.network.hidden_dropout : cfg_.network.input_dropout;
  dropout_fwd(ctx, emb,
              DropoutSpec{training ? static_cast<float>(p) : 0.0f, derive_seed(seed, 1000),
                          batch_.dropout_offset(cfg_.network.hidden_size)},
              first_rows(buf_.xs[0], t));
  for (size_t l = 0; l < layers_.size(); ++l)
    layers_[l].forward(ctx, dense_, batch_, first_rows(buf_.xs[l], t),
                       first_rows(buf_.xs[l + 1], t), buf_.acts[l], buf_.scratch, training,
                       derive_seed(seed, l));
  // Candidates' item rows -> (final LN) -> L2 norm -> MLP head.
  phase(ctx, "fwd.head");
  const int32_t stride = interleave_ ? 2 : 1;
  const Tensor cand = buf_.cand.rows(0, nc);
  gather_candidate_rows(ctx, first_rows(buf_.xs[layers_.size()], t),
                        batch_.offsets.rows(0, batch_.batch_size + 1),
                        buf_.cand_offsets.rows(0, batch_.batch_size + 1), stride, cand);
  Tensor normed_in = cand;
  if (cfg_.network.final_layernorm) {
    normed_in = buf_.cand_ln.rows(0, nc);
    layernorm_fwd(ctx, cand, dense_.param(final_ln_w_), dense_.param(final_ln_b_),
                  static_cast<float>(cfg_.network.norm_epsilon), normed_in,
                  buf_.ln_mean.rows(0, nc), buf_.ln_rstd.rows(0, nc));
  }
  l2norm_fwd(ctx, normed_in, static_cast<float>(cfg_.retrieval.l2_norm_eps),
             buf_.cand_norm.rows(0, nc), buf_.norms.rows(0, nc));
  Tensor in = buf_.cand_norm.rows(0, nc);
  const size_t nh = head_w_.size();
  for (size_t i = 0; i < nh; ++i) {
    const Tensor h = buf_.head_h[i].rows(0, nc);
    gemm(ctx, GemmDesc{}, in, dense_.compute(head_w_[i]), h,
         head_b_[i] >= 0 ? dense_.compute(head_b_[i]) : Tensor());
    if (i + 1 < nh) {
      activation_fwd(ctx, head_act(), h, buf_.head_a[i].rows(0, nc));
      in = buf_.head_a[i].rows(0, nc);
    }
  }
}

Tensor RankingModel::predict(Ctx& ctx) {
  const StepAttention step_attn(ctx, layers_, dense_, batch_, buf_.acts, buf_.scratch);
  forward(ctx, false, 0);
  const Tensor logits = buf_.head_h.back().rows(0, num_cand_);
  if (buf_.logits.empty()) return logits;
  const Tensor out = buf_.logits.rows(0, num_cand_);
  cast(ctx, logits, out);
  return out;
}

double RankingModel::train_step(Ctx& ctx, uint64_t seed, double loss_scale) {
  forward_backward(ctx, seed, loss_scale);
  double loss = 0;
  copy_bytes(&loss, Device::kCPU, buf_.loss.data, buf_.loss.device, sizeof(double));
  return loss;
}

void RankingModel::forward_backward(Ctx& ctx, uint64_t seed, double loss_scale, GradHook* hook) {
  const int64_t t = batch_.num_tokens, e = num_events_, nc = num_cand_;
  const int64_t bc = int64_t{batch_.batch_size} * num_ctx_;
  const StepAttention step_attn(ctx, layers_, dense_, batch_, buf_.acts,
                                buf_.scratch);  // to the end
  forward(ctx, true, seed);
  const size_t nh = head_w_.size();
  const Tensor logits = buf_.head_h.back().rows(0, nc);
  const Tensor d_logits = buf_.d_logits.rows(0, nc);
  phase(ctx, "loss");
  if (binary_)
    bce_multitask(ctx, logits, buf_.labels.rows(0, nc), buf_.loss, d_logits, loss_scale);
  else
    cross_entropy(ctx, logits, buf_.labels.rows(0, nc), buf_.loss, d_logits, loss_scale);
  // MLP head backward: d_h holds the gradient of layer i's pre-activation.
  phase(ctx, "bwd.head");
  Tensor d_h = d_logits;
  for (size_t i = nh; i-- > 0;) {
    const Tensor in = i == 0 ? buf_.cand_norm.rows(0, nc) : buf_.head_a[i - 1].rows(0, nc);
    gemm(ctx, GemmDesc{true, false, 1.0f, 1.0f}, in, d_h, dense_.grad(head_w_[i]));
    if (head_b_[i] >= 0) bias_grad(ctx, d_h, dense_.grad(head_b_[i]), true);
    // Gradient of the layer's input; for a hidden layer turned in place into the gradient of
    // its pre-activation.
    const Tensor d_in = i == 0 ? buf_.d_cand.rows(0, nc) : buf_.head_d[i - 1].rows(0, nc);
    gemm(ctx, GemmDesc{false, true, 1.0f, 0.0f}, d_h, dense_.compute(head_w_[i]), d_in);
    if (i > 0) {
      activation_bwd(ctx, head_act(), buf_.head_h[i - 1].rows(0, nc), d_in, d_in);
      d_h = d_in;
    }
  }
  // L2 norm (and final LN) back to the candidate rows, then into the token grid.
  const float l2eps = static_cast<float>(cfg_.retrieval.l2_norm_eps);
  const Tensor d_cand = buf_.d_cand.rows(0, nc);
  if (cfg_.network.final_layernorm) {
    const Tensor d_ln = buf_.d_cand2.rows(0, nc);
    l2norm_bwd(ctx, buf_.cand_norm.rows(0, nc), buf_.norms.rows(0, nc), l2eps, d_cand, d_ln, false);
    layernorm_bwd(ctx, buf_.cand.rows(0, nc), dense_.param(final_ln_w_), buf_.ln_mean.rows(0, nc),
                  buf_.ln_rstd.rows(0, nc), d_ln, d_cand, false, dense_.grad(final_ln_w_),
                  dense_.grad(final_ln_b_));
  } else {
    l2norm_bwd(ctx, buf_.cand_norm.rows(0, nc), buf_.norms.rows(0, nc), l2eps, d_cand, d_cand,
               false);
  }
  const Tensor d_x = first_rows(buf_.d_x, t);
  gather_candidate_rows_bwd(ctx, d_cand, batch_.offsets.rows(0, batch_.batch_size + 1),
                            buf_.cand_offsets.rows(0, batch_.batch_size + 1), interleave_ ? 2 : 1,
                            d_x);
  if (hook) hook->stage_done(ctx, 0);
  for (size_t l = layers_.size(); l-- > 0;) {
    layers_[l].backward(ctx, dense_, batch_, first_rows(buf_.xs[l], t), buf_.acts[l], buf_.scratch,
                        d_x, true, derive_seed(seed, l));
    if (hook) hook->stage_done(ctx, static_cast<int>(layers_.size() - l));
  }
  const double p =
      cfg_.network.input_dropout < 0 ? cfg_.network.hidden_dropout : cfg_.network.input_dropout;
  phase(ctx, "bwd.embed");
  dropout_bwd(ctx, d_x,
              DropoutSpec{static_cast<float>(p), derive_seed(seed, 1000),
                          batch_.dropout_offset(cfg_.network.hidden_size)},
              d_x);
  // Split the token gradient per feature (reusing the forward's embedding buffers) and scatter.
  const Tensor d_item = buf_.item_emb.rows(0, e);
  const Tensor d_action = interleave_ ? buf_.action_emb.rows(0, e) : Tensor();
  const Tensor d_ctx = num_ctx_ > 0 ? buf_.ctx_emb.rows(0, bc) : Tensor();
  ranking_tokens_bwd(ctx, d_x, buf_.ev_offsets.rows(0, batch_.batch_size + 1), num_ctx_, d_ctx,
                     d_item, d_action);
  const float sq = static_cast<float>(std::sqrt(static_cast<double>(cfg_.network.hidden_size)));
  const Tensor d_pos = dense_.grad(pos_table_);
  embedding_bwd(ctx, d_item, buf_.item_ids.rows(0, e), sq, item_table_->grad, item_table_->touched,
                buf_.item_pos.rows(0, e), d_pos);
  if (interleave_)
    embedding_bwd(ctx, d_action, buf_.action_ids.rows(0, e), sq, actions_.grad, actions_.touched,
                  buf_.action_pos.rows(0, e), d_pos);
  if (num_ctx_ > 0)
    embedding_bwd(ctx, d_ctx, buf_.ctx_ids.rows(0, bc), sq, contextual_.grad, contextual_.touched,
                  buf_.ctx_pos.rows(0, bc), d_pos);
  if (hook) hook->stage_done(ctx, static_cast<int>(layers_.size()) + 1);
}

}  // namespace hstu
