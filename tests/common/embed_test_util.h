// embed_test_util.h — helpers of the dynamic-table tests (tests/embed, tests/gpu): tensors over
// std::vectors and one training step of a DynamicTable on the host.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "embed/dynamic_table.h"

namespace hstu::test {

template <typename T>
Tensor vec_tensor(std::vector<T>& v) {
  return Tensor(v.data(), DTypeOf<T>::value, Device::kCPU, {static_cast<int64_t>(v.size())});
}

// What one host step of a CPU DynamicTable saw.
struct EmbedStep {
  std::vector<int64_t> unique, refs;
  std::vector<int32_t> inverse, counts;
  std::vector<float> rows;  // [U, dim] gathered before the update
};

// dedupe + begin_step + find_or_insert + gather, then apply with grad(u, c) for touched rows
// (touched(u) says which; all by default).
inline EmbedStep embed_cpu_step(embed::DynamicTable& t, Ctx& ctx, std::vector<int64_t> keys,
                                int64_t step, const SparseOptimizerSpec& opt,
                                const std::function<float(int64_t, int64_t)>& grad,
                                const std::function<bool(int64_t)>& touched = nullptr) {
  EmbedStep s;
  const int64_t n = static_cast<int64_t>(keys.size());
  s.unique.resize(keys.size());
  s.inverse.resize(keys.size());
  s.counts.resize(keys.size());
  const int64_t u = t.dedupe(ctx, vec_tensor(keys), vec_tensor(s.unique), vec_tensor(s.inverse),
                             vec_tensor(s.counts));
  (void)n;
  s.unique.resize(static_cast<size_t>(u));
  s.counts.resize(static_cast<size_t>(u));
  s.refs.resize(static_cast<size_t>(u));
  t.begin_step(step);
  t.find_or_insert(ctx, vec_tensor(s.unique), vec_tensor(s.counts), vec_tensor(s.refs));
  const int64_t d = t.spec().dim;
  s.rows.resize(static_cast<size_t>(u * d));
  Tensor out(s.rows.data(), DType::kF32, Device::kCPU, {u, d});
  t.gather(ctx, vec_tensor(s.unique), vec_tensor(s.refs), out, true);
  std::vector<float> g(static_cast<size_t>(u * d));
  std::vector<uint8_t> tch(static_cast<size_t>(u));
  for (int64_t i = 0; i < u; ++i) {
    tch[i] = !touched || touched(s.unique[i]);
    for (int64_t c = 0; c < d; ++c) g[i * d + c] = grad(s.unique[i], c);
  }
  Tensor gt(g.data(), DType::kF32, Device::kCPU, {u, d});
  t.apply(ctx, opt, vec_tensor(s.refs), gt, vec_tensor(tch));
  return s;
}

}  // namespace hstu::test
