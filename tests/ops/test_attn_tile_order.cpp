// test_attn_tile_order.cpp — the sm_90a attention's longest-first launch order
// (ops/detail/attn_tile_order.h): the list's size bound, the host reference's order, and a host
// replay of the device builder's ranking (attention_sm90.cu, tile_order_kernel: chunks of
// threads, ranks within a warp from equal keys, per-warp counts across warps) against the
// reference, for batches that span several chunks. The device kernel itself is compared with the
// reference by tests/gpu/test_gpu_attention.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/detail/attn_tile_order.h"

namespace hstu::test {
namespace {

using cuda::attn::seq_blocks;
using cuda::attn::SeqTile;
using cuda::attn::tile_order_entries;
using cuda::attn::tile_order_keys;
using cuda::attn::tile_order_reference;

std::vector<int32_t> offsets(const std::vector<int>& len) {
  std::vector<int32_t> cu(len.size() + 1, 0);
  for (size_t b = 0; b < len.size(); ++b) cu[b + 1] = cu[b] + len[b];
  return cu;
}

// The device builder's algorithm, step by step on the host (nthreads a multiple of 32).
std::vector<SeqTile> replay_builder(const std::vector<int32_t>& cu, int max_seqlen, int bm,
                                    int64_t entries, int nthreads) {
  const int batch = static_cast<int>(cu.size()) - 1, keys = tile_order_keys(max_seqlen, bm);
  const int nwarps = nthreads / 32;
  auto key_of = [&](int len) { return std::min(seq_blocks(len, bm), keys - 1); };
  std::vector<int> cnt(keys, 0), base(keys, 0), seen(keys, 0);
  for (int b = 0; b < batch; ++b) ++cnt[key_of(cu[b + 1] - cu[b])];
  long long acc = 0;
  for (int k = keys - 1; k >= 0; --k) {
    base[k] = static_cast<int>(acc);
    acc += static_cast<long long>(k) * cnt[k];
  }
  const long long total = std::min<long long>(acc, entries);
  std::vector<SeqTile> out(entries, SeqTile{-7, -7, -7, -7});
  for (int c0 = 0; c0 < batch; c0 += nthreads) {
    std::vector<int> wc(32 * keys, 0), key(nthreads, keys), rank(nthreads, 0);
    for (int t = 0; t < nthreads; ++t)
      if (c0 + t < batch) key[t] = key_of(cu[c0 + t + 1] - cu[c0 + t]);
    for (int t = 0; t < nthreads; ++t) {  // __match_any_sync: lanes of the warp with equal keys
      const int w = t / 32;
      int same = 0, lower = 0;
      for (int l = 0; l < 32; ++l)
        if (key[32 * w + l] == key[t]) {
          ++same;
          if (l < t % 32) ++lower;
        }
      rank[t] = lower;
      if (c0 + t < batch && lower == 0) wc[w * keys + key[t]] = same;
    }
    for (int t = 0; t < nthreads; ++t) {
      const int b = c0 + t, k = key[t];
      if (b >= batch || k == 0) continue;
      int r = seen[k] + rank[t];
      for (int w = 0; w < t / 32; ++w) r += wc[w * keys + k];
      const long long off = base[k] + static_cast<long long>(k) * r;
      for (int j = 0; j < k; ++j)
        if (off + j < entries) out[off + j] = SeqTile{b, j, cu[b], cu[b + 1] - cu[b]};
    }
    for (int k = 0; k < keys; ++k)
      for (int w = 0; w < nwarps; ++w) seen[k] += wc[w * keys + k];
  }
  for (long long t = total; t < entries; ++t) out[t] = SeqTile{-1, 0, 0, 0};
  return out;
}

bool same(const SeqTile& a, const SeqTile& b) {
  return a.b == b.b && a.j == b.j && a.start == b.start && a.len == b.len;
}

TEST(AttnTileOrder, EntriesBoundTheBlocks) {
  std::mt19937 g(7);
  for (int it = 0; it < 200; ++it) {
    const int batch = 1 + static_cast<int>(g() % 70), max_len = 1 + static_cast<int>(g() % 5000);
    const int bm = (it % 3 == 0) ? 64 : (it % 3 == 1 ? 128 : 192);
    std::vector<int> len(batch);
    int mx = 0;
    for (int& l : len) mx = std::max(mx, l = static_cast<int>(g() % (max_len + 1)));
    const std::vector<int32_t> cu = offsets(len);
    int64_t blocks = 0;
    for (int l : len) blocks += seq_blocks(l, bm);
    const int64_t n = tile_order_entries(batch, std::max(mx, 1), cu.back(), bm);
    EXPECT_GE(n, blocks);
    EXPECT_LE(n, int64_t(batch) * seq_blocks(std::max(mx, 1), bm));
    EXPECT_LE(n, blocks + batch);  // at most one spare entry per sequence
  }
  EXPECT_EQ(tile_order_entries(0, 100, 0, 128), 0);
  EXPECT_EQ(tile_order_entries(4, 0, 0, 128), 0);
}

// The launch plan (ops/hstu_attention.h: hstu_attention_plan) keeps each order in a region of
// attention_plan_capacity entries: room for the list of every block height a kernel has, and
// the counter's slot after the two regions.
TEST(AttnTileOrder, PlanRegionsHoldEveryBlockHeight) {
  std::mt19937 g(13);
  for (int it = 0; it < 300; ++it) {
    const int batch = 1 + static_cast<int>(g() % 300), max_len = 1 + static_cast<int>(g() % 5000);
    std::vector<int> len(batch);
    int mx = 1;
    for (int& l : len) mx = std::max(mx, l = static_cast<int>(g() % (max_len + 1)));
    const int64_t t = offsets(len).back();
    const int64_t cap = cuda::attn::attention_plan_capacity(batch, mx, t);
    for (int bm : {64, 128, 192}) EXPECT_LE(tile_order_entries(batch, mx, t, bm), cap) << bm;
    EXPECT_EQ(cuda::attn::attention_plan_bytes(batch, mx, t),
              int64_t(sizeof(SeqTile)) * (2 * cap + 1));
  }
  // 66 sequences, one token in all: the bound at 64 rows (64 entries) is below the one at 128
  // (65), so a region sized for 64-row blocks alone would overflow.
  EXPECT_LT(tile_order_entries(66, 1, 1, 64), tile_order_entries(66, 1, 1, 128));
  EXPECT_GE(cuda::attn::attention_plan_capacity(66, 1, 1), tile_order_entries(66, 1, 1, 128));
}

TEST(AttnTileOrder, ReferenceIsLongestFirstEveryBlockOnce) {
  // One long sequence among many short ones (the skewed GPU case), and equal lengths.
  std::vector<int> len = {5, 4096, 1, 16, 0, 300, 129, 128, 3, 4096};
  const std::vector<int32_t> cu = offsets(len);
  const int bm = 128;
  const std::vector<SeqTile> ref = tile_order_reference(cu, 4096, cu.back(), bm);
  ASSERT_EQ(static_cast<int64_t>(ref.size()), tile_order_entries(10, 4096, cu.back(), bm));
  // Sequences by blocks descending, ties in batch order; blocks j = 0.. of each together.
  const std::vector<int> seq_order = {1, 9, 5, 6, 0, 2, 3, 7, 8};
  size_t e = 0;
  for (int b : seq_order)
    for (int j = 0; j < seq_blocks(len[b], bm); ++j, ++e) {
      ASSERT_LT(e, ref.size());
      EXPECT_TRUE(same(ref[e], SeqTile{b, j, cu[b], len[b]})) << "entry " << e;
    }
  for (; e < ref.size(); ++e) EXPECT_EQ(ref[e].b, -1) << "entry " << e;
}

TEST(AttnTileOrder, DeviceAlgorithmMatchesReference) {
  std::mt19937 g(11);
  for (int it = 0; it < 60; ++it) {
    // Several chunks of 128 threads for the larger batches; lengths with many equal keys.
    const int batch = 1 + static_cast<int>(g() % 700), max_len = 1 + static_cast<int>(g() % 4096);
    const int bm = it % 2 ? 128 : 64;
    std::vector<int> len(batch);
    int mx = 1;
    for (int& l : len) {
      l = (g() % 4 == 0) ? static_cast<int>(g() % 17) : static_cast<int>(g() % (max_len + 1));
      mx = std::max(mx, l);
    }
    const std::vector<int32_t> cu = offsets(len);
    const int64_t n = tile_order_entries(batch, mx, cu.back(), bm);
    const std::vector<SeqTile> ref = tile_order_reference(cu, mx, cu.back(), bm);
    for (int threads : {128, 1024}) {
      const std::vector<SeqTile> dev = replay_builder(cu, mx, bm, n, threads);
      ASSERT_EQ(dev.size(), ref.size());
      for (size_t k = 0; k < ref.size(); ++k)
        ASSERT_TRUE(same(dev[k], ref[k]))
            << "batch " << batch << " threads " << threads << " entry " << k;
    }
  }
}

}  // namespace
}  // namespace hstu::test
