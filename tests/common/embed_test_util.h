// embed_test_util.h — helpers of the dynamic-table tests (tests/embed, tests/gpu): tensors over
// std::vectors, power-law keys and a gradient per (key, column), one training step of a
// DynamicTable on the host, and a table's exported rows by key.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "embed/dynamic_table.h"

namespace hstu::test {

template <typename T>
Tensor vec_tensor(std::vector<T>& v) {
  return Tensor(v.data(), DTypeOf<T>::value, Device::kCPU, {static_cast<int64_t>(v.size())});
}

// n keys with a power-law spread over [1, range) (hot keys repeat), a quarter of them negative
// (large negative raw ids), drawn from rng.
inline std::vector<int64_t> power_law_keys(std::mt19937_64& rng, int n, double range) {
  std::vector<int64_t> keys;
  for (int i = 0; i < n; ++i) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    int64_t k = static_cast<int64_t>(std::pow(range, u));
    if (rng() % 4 == 0) k = -k * 7919;
    keys.push_back(k);
  }
  return keys;
}

// The gradient the tests apply to column c of key's row.
inline float embed_grad(int64_t key, int64_t c) {
  return std::sin(0.37f * static_cast<float>(key % 101 + c));
}

// Exported rows (keys + values [n, width]) as a map from key to its row, to compare two tables
// whatever their slot order.
inline std::map<int64_t, std::vector<float>> rows_by_key(const embed::TableRows& r, int64_t width) {
  std::map<int64_t, std::vector<float>> m;
  for (size_t i = 0; i < r.keys.size(); ++i)
    m[r.keys[i]].assign(r.values.begin() + i * width, r.values.begin() + (i + 1) * width);
  return m;
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
