// test_gpu_embed.cpp — the CUDA dynamic table against the CPU reference on the same operation
// sequences (dedupe, find_or_insert with growth / LRU / LFU eviction / admission, gather, the
// fused optimisers, erase, export), the CUDA host tier against the CUDA table without one, and
// the CUDA fused optimisers bit for bit against the CUDA sparse_optimizer_step.
//
// Keys, refs' presence, scores, sizes and counters must match exactly (the insert kernel places
// a bucket's keys in the CPU's order). Values are compared with a tolerance: the CPU optimisers
// compute in double and the CUDA ones in float (as ops' sparse_optimizer_step on each backend),
// and the initial values use double log/cos, whose last bits may differ between libm and CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "common/embed_test_util.h"
#include "common/gpu_harness.h"
#include "embed/dynamic_table.h"
#include "ops/embedding.h"

namespace hstu {
namespace {

using embed::DynamicTable;
using embed::DynamicTableSpec;

// A device array mirroring a host vector.
template <typename T>
struct DevVec {
  explicit DevVec(int64_t n) : n(n) {
    HSTU_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T)));
  }
  explicit DevVec(const std::vector<T>& h) : DevVec(static_cast<int64_t>(h.size())) {
    HSTU_CUDA_CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DevVec() { cudaFree(p); }
  DevVec(const DevVec&) = delete;
  std::vector<T> host(int64_t m = -1) const {
    std::vector<T> h(static_cast<size_t>(m < 0 ? n : m));
    HSTU_CUDA_CHECK(cudaMemcpy(h.data(), p, h.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  Tensor t(int64_t m = -1) const {
    return Tensor(p, DTypeOf<T>::value, Device::kCUDA, {m < 0 ? n : m});
  }
  T* p = nullptr;
  int64_t n;
};

// One step on the CUDA table with the same inputs as test::embed_cpu_step.
test::EmbedStep cuda_step(DynamicTable& t, Ctx& ctx, const std::vector<int64_t>& keys, int64_t step,
                          const SparseOptimizerSpec& opt, float (*grad)(int64_t, int64_t)) {
  const int64_t n = static_cast<int64_t>(keys.size()), d = t.spec().dim;
  DevVec<int64_t> dk(keys), du(n), refs(n);
  DevVec<int32_t> inv(n), cnt(n);
  const int64_t u = t.dedupe(ctx, dk.t(), du.t(), inv.t(), cnt.t());
  t.begin_step(step);
  t.find_or_insert(ctx, du.t(u), cnt.t(u), refs.t(u));
  DevVec<float> rows(u * d);
  Tensor out(rows.p, DType::kF32, Device::kCUDA, {u, d});
  t.gather(ctx, du.t(u), refs.t(u), out, true);
  test::EmbedStep s;
  s.unique = du.host(u);
  s.inverse = inv.host();
  s.counts = cnt.host(u);
  s.refs = refs.host(u);
  s.rows = rows.host();
  std::vector<float> g(static_cast<size_t>(u * d));
  for (int64_t i = 0; i < u; ++i)
    for (int64_t c = 0; c < d; ++c) g[i * d + c] = grad(s.unique[i], c);
  DevVec<float> dg(g);
  DevVec<uint8_t> touched(std::vector<uint8_t>(static_cast<size_t>(u), 1));
  t.apply(ctx, opt, refs.t(u), Tensor(dg.p, DType::kF32, Device::kCUDA, {u, d}), touched.t());
  test::gpu::sync();
  return s;
}

float grad_fn(int64_t key, int64_t c) {
  return std::sin(0.37f * static_cast<float>(key % 101 + c));
}

std::vector<int64_t> power_law_keys(std::mt19937_64& rng, int n, double range) {
  std::vector<int64_t> keys;
  for (int i = 0; i < n; ++i) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    int64_t k = static_cast<int64_t>(std::pow(range, u));
    if (rng() % 4 == 0) k = -k * 7919;
    keys.push_back(k);
  }
  return keys;
}

void compare_backends(DynamicTableSpec spec, int steps) {
  HSTU_REQUIRE_GPU();
  Ctx cctx = cpu_ctx(), gctx = test::gpu::cuda_ctx();
  DynamicTable cpu_t(spec, Device::kCPU), gpu_t(spec, Device::kCUDA);
  std::mt19937_64 rng(77);
  for (int s = 0; s < steps; ++s) {
    const std::vector<int64_t> keys = power_law_keys(rng, 200 + s * 13, 3000.0);
    const SparseOptimizerSpec opt = cpu_t.optimizer_spec(s + 1, spec.lr);
    const test::EmbedStep a = test::embed_cpu_step(cpu_t, cctx, keys, s, opt, grad_fn);
    const test::EmbedStep b = cuda_step(gpu_t, gctx, keys, s, opt, grad_fn);
    ASSERT_EQ(a.unique, b.unique) << "step " << s;
    ASSERT_EQ(a.counts, b.counts);
    ASSERT_EQ(std::vector<int32_t>(a.inverse.begin(), a.inverse.begin() + keys.size()),
              std::vector<int32_t>(b.inverse.begin(), b.inverse.begin() + keys.size()));
    for (size_t i = 0; i < a.refs.size(); ++i)
      ASSERT_EQ(a.refs[i] >= 0, b.refs[i] >= 0) << "key " << a.unique[i] << " step " << s;
    for (size_t i = 0; i < a.rows.size(); ++i)
      ASSERT_NEAR(a.rows[i], b.rows[i], 1e-5 + 1e-4 * std::abs(a.rows[i])) << "step " << s;
    const embed::DynamicTableCounters ca = cpu_t.counters(), cb = gpu_t.counters();
    ASSERT_EQ(ca.size, cb.size);
    ASSERT_EQ(ca.inserts, cb.inserts);
    ASSERT_EQ(ca.evictions, cb.evictions);
    ASSERT_EQ(ca.rejections, cb.rejections);
    ASSERT_EQ(ca.capacity, cb.capacity);
  }
  const embed::TableRows ra = cpu_t.export_rows(cctx), rb = gpu_t.export_rows(gctx);
  ASSERT_EQ(ra.keys, rb.keys);  // slot order: the same slots on both backends
  ASSERT_EQ(ra.scores, rb.scores);
  for (size_t i = 0; i < ra.values.size(); ++i)
    ASSERT_NEAR(ra.values[i], rb.values[i], 1e-5 + 1e-4 * std::abs(ra.values[i]));
}

DynamicTableSpec spec_of(const std::string& eviction, const std::string& opt, int64_t cap,
                         int64_t max_cap) {
  DynamicTableSpec s;
  s.name = "items";
  s.dim = 40;  // not a multiple of 32: partial warps
  s.capacity_rows = cap;
  s.max_capacity_rows = max_cap;
  s.bucket_size = 16;
  s.eviction = eviction;
  s.optimizer = opt;
  s.lr = 0.01f;
  return s;
}

TEST(GpuDynamicTable, LruSgdMatchesCpu) {
  compare_backends(spec_of("lru", "sgd", 256, 512), 12);
}
TEST(GpuDynamicTable, LfuAdamMatchesCpu) {
  compare_backends(spec_of("lfu", "adam", 256, 256), 12);
}
TEST(GpuDynamicTable, GrowthRowWiseAdagradMatchesCpu) {
  compare_backends(spec_of("none", "row_wise_adagrad", 64, 1 << 16), 10);
}
TEST(GpuDynamicTable, AdmissionMatchesCpu) {
  DynamicTableSpec s = spec_of("lru", "adam", 512, 512);
  s.admit_threshold = 3;
  compare_backends(s, 12);
}

TEST(GpuDynamicTable, HostTierEqualsDeviceTable) {
  HSTU_REQUIRE_GPU();
  Ctx ctx = test::gpu::cuda_ctx();
  DynamicTableSpec s = spec_of("lru", "adam", 512, 1024);
  DynamicTable flat(s, Device::kCUDA);
  s.gpu_cache_rows = 64;
  DynamicTable tier(s, Device::kCUDA);
  std::mt19937_64 rng(3);
  for (int step = 0; step < 15; ++step) {
    const std::vector<int64_t> keys = power_law_keys(rng, 150, 2000.0);
    const SparseOptimizerSpec opt = flat.optimizer_spec(step + 1, s.lr);
    const test::EmbedStep a = cuda_step(flat, ctx, keys, step, opt, grad_fn);
    const test::EmbedStep b = cuda_step(tier, ctx, keys, step, opt, grad_fn);
    ASSERT_EQ(a.rows, b.rows) << "step " << step;  // same backend: bit for bit
  }
  EXPECT_GT(tier.counters().cache_evictions, 0);
  const embed::TableRows ra = flat.export_rows(ctx), rb = tier.export_rows(ctx);
  std::map<int64_t, std::vector<float>> ma, mb;
  const int64_t w = flat.row_width();
  for (size_t i = 0; i < ra.keys.size(); ++i)
    ma[ra.keys[i]].assign(ra.values.begin() + i * w, ra.values.begin() + (i + 1) * w);
  for (size_t i = 0; i < rb.keys.size(); ++i)
    mb[rb.keys[i]].assign(rb.values.begin() + i * w, rb.values.begin() + (i + 1) * w);
  EXPECT_EQ(ma, mb);
}

// The CUDA fused optimisers equal the CUDA dense-table sparse optimiser bit for bit.
TEST(GpuDynamicTable, FusedOptimizersBitwiseEqualCudaSparseOptimizerStep) {
  HSTU_REQUIRE_GPU();
  Ctx ctx = test::gpu::cuda_ctx();
  for (const std::string opt_name : {"sgd", "adam", "row_wise_adagrad"}) {
    constexpr int64_t kRows = 50, kDim = 40;
    DynamicTableSpec s = spec_of("lru", opt_name, 256, 256);
    s.dim = kDim;
    DynamicTable t(s, Device::kCUDA);
    std::vector<float> w(kRows * kDim);
    std::mt19937 rng(9);
    for (auto& x : w) x = std::uniform_real_distribution<float>(-0.05f, 0.05f)(rng);
    std::vector<int64_t> ids(kRows);
    for (int64_t r = 0; r < kRows; ++r) ids[r] = r * 3 + 1;
    t.import_rows(ctx, ids, w, kDim);
    DevVec<float> dw(w), dg(std::vector<float>(kRows * kDim, 0.0f)),
        dm(std::vector<float>(kRows * kDim, 0.0f)), dv(std::vector<float>(kRows * kDim, 0.0f));
    for (int64_t step = 1; step <= 3; ++step) {
      std::vector<int32_t> rows;
      for (int32_t r = 0; r < kRows; ++r)
        if (rng() % 3) rows.push_back(r);
      const int64_t u = static_cast<int64_t>(rows.size());
      std::vector<float> g(static_cast<size_t>(u * kDim));
      for (auto& x : g) x = std::uniform_real_distribution<float>(-1, 1)(rng);
      std::vector<float> full(kRows * kDim, 0.0f);
      for (int64_t i = 0; i < u; ++i) std::copy_n(&g[i * kDim], kDim, &full[rows[i] * kDim]);
      HSTU_CUDA_CHECK(cudaMemcpy(dg.p, full.data(), full.size() * 4, cudaMemcpyHostToDevice));
      const SparseOptimizerSpec spec = t.optimizer_spec(step, 0.01f * static_cast<float>(step));
      DevVec<int32_t> drows(rows), dcount(std::vector<int32_t>{static_cast<int32_t>(u)});
      Tensor tm, tv;
      if (opt_name == "adam") {
        tm = Tensor(dm.p, DType::kF32, Device::kCUDA, {kRows, kDim});
        tv = Tensor(dv.p, DType::kF32, Device::kCUDA, {kRows, kDim});
      } else if (opt_name == "row_wise_adagrad") {
        tm = Tensor(dm.p, DType::kF32, Device::kCUDA, {kRows});
      }
      sparse_optimizer_step(ctx, spec, Tensor(dw.p, DType::kF32, Device::kCUDA, {kRows, kDim}),
                            Tensor(dg.p, DType::kF32, Device::kCUDA, {kRows, kDim}), drows.t(),
                            dcount.t(), tm, tv);
      std::vector<int64_t> keys(static_cast<size_t>(u));
      for (int64_t i = 0; i < u; ++i) keys[i] = ids[rows[i]];
      DevVec<int64_t> dk(keys), refs(u);
      DevVec<int32_t> cnt(std::vector<int32_t>(static_cast<size_t>(u), 1));
      t.begin_step(step);
      t.find_or_insert(ctx, dk.t(), cnt.t(), refs.t());
      DevVec<float> gg(g);
      DevVec<uint8_t> touched(std::vector<uint8_t>(static_cast<size_t>(u), 1));
      t.apply(ctx, spec, refs.t(), Tensor(gg.p, DType::kF32, Device::kCUDA, {u, kDim}),
              touched.t());
    }
    const std::vector<float> hw = dw.host(), hm = dm.host(), hv = dv.host();
    const embed::TableRows out = t.export_rows(ctx);
    const int64_t rw = t.row_width();
    for (size_t i = 0; i < out.keys.size(); ++i) {
      const int64_t r = (out.keys[i] - 1) / 3;
      ASSERT_EQ(std::memcmp(&out.values[i * rw], &hw[r * kDim], kDim * 4), 0) << opt_name;
      if (opt_name == "adam") {
        ASSERT_EQ(std::memcmp(&out.values[i * rw + kDim], &hm[r * kDim], kDim * 4), 0);
        ASSERT_EQ(std::memcmp(&out.values[i * rw + 2 * kDim], &hv[r * kDim], kDim * 4), 0);
      } else if (opt_name == "row_wise_adagrad") {
        ASSERT_EQ(std::memcmp(&out.values[i * rw + kDim], &hm[r], 4), 0);
      }
    }
  }
}

}  // namespace
}  // namespace hstu
