// dedupe_check.h — the GPU tests' comparison of the CUDA dynamic-table dedupe with the CPU
// reference, output for output (tests/gpu: the hash path's cases and the table's order case).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/gpu_harness.h"
#include "embed/cuda/hash_dedupe.h"
#include "embed/table_ops.h"

namespace hstu::test {

// What expect_dedupe_matches_cpu saw: how many calls the CUDA hash path handed to the sort path
// meanwhile, and each job's first key (dedupe_many's first_key) on the CPU.
struct DedupeCheck {
  int64_t fallbacks = 0;
  std::vector<int64_t> first;
};

// dedupe_many of `keys` (one job each) on CUDA and on the CPU: every output equal (unique keys,
// inverse, counts, first key, and the saved order: positions by (key, position), segment ends,
// each entry's key).
inline DedupeCheck expect_dedupe_matches_cpu(const std::vector<std::vector<int64_t>>& keys,
                                             const std::string& what) {
  Ctx cctx = cpu_ctx(), gctx = gpu::cuda_ctx();
  const int jobs = static_cast<int>(keys.size());
  std::vector<embed::DedupeJob> cj(jobs), gj(jobs);
  std::vector<std::vector<int64_t>> cu(jobs);
  std::vector<std::vector<int32_t>> ci(jobs), cc(jobs), co(jobs);
  std::vector<std::unique_ptr<gpu::DevVec<int64_t>>> dk, du;
  std::vector<std::unique_ptr<gpu::DevVec<int32_t>>> di, dc, dord;
  for (int j = 0; j < jobs; ++j) {
    const int64_t n = static_cast<int64_t>(keys[j].size());
    cu[j].assign(n, 0);
    ci[j].assign(n, 0);
    cc[j].assign(n, 0);
    co[j].assign(3 * n, -7);
    cj[j] = {keys[j].data(), n, cu[j].data(), ci[j].data(), cc[j].data(), co[j].data()};
    dk.push_back(std::make_unique<gpu::DevVec<int64_t>>(keys[j]));
    du.push_back(std::make_unique<gpu::DevVec<int64_t>>(n));
    di.push_back(std::make_unique<gpu::DevVec<int32_t>>(n));
    dc.push_back(std::make_unique<gpu::DevVec<int32_t>>(n));
    dord.push_back(std::make_unique<gpu::DevVec<int32_t>>(std::vector<int32_t>(3 * n, -7)));
    gj[j] = {dk[j]->p, n, du[j]->p, di[j]->p, dc[j]->p, dord[j]->p};
  }
  std::vector<int64_t> cuu(jobs), cfirst(jobs), guu(jobs), gfirst(jobs);
  const int64_t before = embed::cuda::hash_dedupe_fallbacks();
  embed::dedupe_many(cctx, cj.data(), jobs, cuu.data(), cfirst.data());
  embed::dedupe_many(gctx, gj.data(), jobs, guu.data(), gfirst.data());
  const int64_t fallbacks = embed::cuda::hash_dedupe_fallbacks() - before;
  for (int j = 0; j < jobs; ++j) {
    const int64_t n = static_cast<int64_t>(keys[j].size()), u = cuu[j];
    SCOPED_TRACE(what + ", job " + std::to_string(j));
    EXPECT_EQ(guu[j], u);
    EXPECT_EQ(gfirst[j], cfirst[j]);
    if (guu[j] != u) continue;
    EXPECT_EQ(du[j]->host(u), std::vector<int64_t>(cu[j].begin(), cu[j].begin() + u));
    EXPECT_EQ(di[j]->host(), ci[j]);
    EXPECT_EQ(dc[j]->host(u), std::vector<int32_t>(cc[j].begin(), cc[j].begin() + u));
    const std::vector<int32_t> go = dord[j]->host();
    EXPECT_EQ(std::vector<int32_t>(go.begin(), go.begin() + n),
              std::vector<int32_t>(co[j].begin(), co[j].begin() + n))
        << "positions";
    EXPECT_EQ(std::vector<int32_t>(go.begin() + n, go.begin() + n + u),
              std::vector<int32_t>(co[j].begin() + n, co[j].begin() + n + u))
        << "segment ends";
    EXPECT_EQ(std::vector<int32_t>(go.begin() + 2 * n, go.end()),
              std::vector<int32_t>(co[j].begin() + 2 * n, co[j].end()))
        << "entry keys";
  }
  return {fallbacks, cfirst};
}

// One table's dedupe (embed::dedupe, not dedupe_many) of `keys` on CUDA and on the CPU: the same
// unique count, first key and saved order.
inline void expect_single_dedupe_matches_cpu(const std::vector<int64_t>& keys) {
  Ctx cctx = cpu_ctx(), gctx = gpu::cuda_ctx();
  const int64_t n = static_cast<int64_t>(keys.size());
  std::vector<int64_t> cu(n);
  std::vector<int32_t> ci(n), cc(n), co(3 * n, -7);
  int64_t cfirst = 0, gfirst = 0;
  const int64_t u =
      embed::dedupe(cctx, keys.data(), n, cu.data(), ci.data(), cc.data(), &cfirst, co.data());
  gpu::DevVec<int64_t> dk(keys), du(n);
  gpu::DevVec<int32_t> di(n), dc(n), dord(std::vector<int32_t>(3 * n, -7));
  ASSERT_EQ(embed::dedupe(gctx, dk.p, n, du.p, di.p, dc.p, &gfirst, dord.p), u);
  EXPECT_EQ(gfirst, cfirst);
  EXPECT_EQ(du.host(u), std::vector<int64_t>(cu.begin(), cu.begin() + u));
  const std::vector<int32_t> go = dord.host();
  EXPECT_EQ(std::vector<int32_t>(go.begin(), go.begin() + n),
            std::vector<int32_t>(co.begin(), co.begin() + n))
      << "positions";
  EXPECT_EQ(std::vector<int32_t>(go.begin() + n, go.begin() + n + u),
            std::vector<int32_t>(co.begin() + n, co.begin() + n + u))
      << "segment ends";
  EXPECT_EQ(std::vector<int32_t>(go.begin() + 2 * n, go.end()),
            std::vector<int32_t>(co.begin() + 2 * n, co.end()))
      << "entry keys";
}

}  // namespace hstu::test
