// params.h — where the model's trainable state lives.
//
// Dense parameters (layer weights, LayerNorms, biases, positions, rab) are slices of ONE flat
// fp32 buffer described by a table (name, shape, offset, decay flag); gradients and Adam moments
// are parallel flat buffers, so the dense optimiser (and later the gradient all-reduce) touches
// one buffer. Parameters with weight decay come first. Embedding tables are separate: each has
// its own dense fp32 gradient that only the batch's rows make non-zero, and a sparse optimiser.
// A matmul weight is stored [in, out] (y = x @ W) and flagged `linear` where its layer registers
// it, so checkpoints can write it in torch.nn.Linear's [out, in] layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/arena.h"
#include "core/context.h"
#include "core/tensor.h"

namespace hstu {

// How a parameter is initialised (all draws are Philox streams keyed by seed and name).
struct Init {
  enum Kind { kZeros, kOnes, kNormal, kTruncNormal, kUniform, kXavierUniform, kXavierNormal } kind;
  double a = 0;  // std (normal kinds) or bound (uniform)
  static Init zeros() { return {kZeros}; }
  static Init ones() { return {kOnes}; }
  static Init normal(double std) { return {kNormal, std}; }
  static Init trunc_normal(double std) { return {kTruncNormal, std}; }  // truncated at +-2 std
  static Init uniform(double bound) { return {kUniform, bound}; }
  static Init xavier_uniform() { return {kXavierUniform}; }  // fan_in, fan_out = shape[0], [1]
  static Init xavier_normal() { return {kXavierNormal}; }
};

// Fills a host f32/f64 tensor from Philox stream (seed, hash(name)).
void init_tensor(const Tensor& host, const Init& init, uint64_t seed, const std::string& name);

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  bool decay = false;   // takes weight decay (matrices); biases, norms, tables do not
  bool linear = false;  // a matmul weight [in, out] used as x @ W (see add_linear)
  Init init = Init::zeros();
  int64_t offset = 0;  // in elements, in the flat buffers (set by finalize)
  int64_t numel = 1;
};

class DenseParams {
 public:
  // Registers a parameter; returns its index. Only before finalize().
  int add(const std::string& name, std::vector<int64_t> shape, bool decay, Init init);
  // Registers the weight [in, out] of a linear map y = x @ W (with weight decay), flagged
  // `linear`: checkpoints store it transposed, as torch.nn.Linear's weight [out, in].
  int add_linear(const std::string& name, int64_t in, int64_t out, Init init);
  // Lays out the table without allocating: decay parameters first, each at a 64-element
  // aligned offset; sets every ParamInfo::offset, size() and num_decay(). finalize() calls it;
  // the memory plan (model/memory_plan.h) calls it alone. Returns size().
  int64_t layout();
  // Lays out the table (layout()), allocates params/grads/moments on `device` and
  // initialises the weights with `seed`.
  // compute_dtype != dtype adds a compute copy of the flat buffer (bf16 weights on CUDA), filled
  // here from the initial weights.
  void finalize(Device device, uint64_t seed, DType dtype = DType::kF32,
                DType compute_dtype = DType::kF32);
  void refresh_compute_copy(Ctx& ctx);

  Tensor param(int i) const { return view(params_, i); }
  // Parameter i in the compute dtype (for GEMMs): the master itself when the dtypes agree,
  // else a view of the compute copy refreshed by refresh_compute_copy() after each update.
  Tensor compute(int i) const { return view(compute_.empty() ? params_ : compute_, i); }
  Tensor grad(int i) const { return view(grads_, i); }
  // Parameter i's slices of the Adam moments (flat_m / flat_v).
  Tensor state_m(int i) const { return view(m_, i); }
  Tensor state_v(int i) const { return view(v_, i); }
  const std::vector<ParamInfo>& table() const { return table_; }
  int find(const std::string& name) const;  // -1 if absent

  Tensor flat_params() const { return params_; }
  Tensor flat_grads() const { return grads_; }
  Tensor flat_m() const { return m_; }
  Tensor flat_v() const { return v_; }
  // f64 [2]: the step's health, filled by the optimiser step before it updates anything:
  // [0] the squared norm of the (all-reduced) gradients, also what clipping reads; [1] the
  // step's (all-reduced) loss. Read back with the step (StepStaging), and the device-side guard
  // of TrainerArgs.nonfinite = "skip_step".
  Tensor health() const { return health_; }
  // f64 [1]: health()[0], the squared norm of the gradients.
  Tensor grad_sumsq() const { return health_.rows(0, 1); }
  int64_t num_decay() const { return num_decay_; }  // elements [0, num_decay) take decay
  int64_t size() const { return size_; }

 private:
  Tensor view(const Tensor& flat, int i) const;
  std::vector<ParamInfo> table_;
  std::unordered_map<std::string, int> index_;  // name -> index in table_
  std::unique_ptr<Arena> arena_;
  Tensor params_, grads_, m_, v_, compute_, health_;
  int64_t size_ = 0, num_decay_ = 0;
};

// One embedding table [V, D] with its sparse-gradient machinery and optimiser state.
struct EmbeddingTable {
  std::string name;
  int64_t rows = 0, dim = 0;
  Tensor weight;     // f32 [V, D]
  Tensor grad;       // f32 [V, D], non-zero only on touched rows
  Tensor touched;    // u8 [V]
  Tensor row_list;   // i32 [V] scratch for collect_touched_rows
  Tensor row_count;  // i32 [1] its count (on the table's device)
  Tensor m, v;       // optimiser state: Adam [V, D] each; row-wise Adagrad: m = [V]; SGD: none
  std::unique_ptr<Arena> arena;

  // Allocates on `device`; `optimizer` is "adam" | "row_wise_adagrad" | "sgd" | "dense_adam".
  void allocate(const std::string& name, int64_t rows, int64_t dim, Device device,
                const std::string& optimizer, DType dtype = DType::kF32);
};

}  // namespace hstu
