// cpu/retrieval_score.cpp — the one tile kernel behind every CPU retrieval score
// (cpu/retrieval_score.h): kUsers queries x kItems items, each score the sequential chain over k.
#include "ops/cpu/retrieval_score.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace hstu::cpu::retrieval {
namespace {

constexpr int kUsers = 8;   // queries per tile (broadcast operands)
constexpr int kItems = 16;  // items per tile (the vector lanes)

// tile[m][n] = sum over k of q[m][k] * xt[k][n], accumulated in T in k order from 0. xt is an
// item block packed k-major ([d][kItems]). NOINLINE: one compiled body computes every score, so
// the arithmetic (including whether the multiply-add is contracted) is the same for every pair.
template <typename T>
[[gnu::noinline]] void score_tile(const T* const* q, const T* xt, int64_t d,
                                  T (&tile)[kUsers][kItems]) {
  // GCC vector extension: kItems lanes (split into the target's registers), so the accumulators
  // stay in registers; lane n of acc[m] is the chain of pair (m, n).
  typedef T Lanes __attribute__((vector_size(kItems * sizeof(T))));
  Lanes acc[kUsers];
  for (int m = 0; m < kUsers; ++m) acc[m] = Lanes{};
  for (int64_t k = 0; k < d; ++k) {
    Lanes x;
    std::memcpy(&x, xt + k * kItems, sizeof(Lanes));
    for (int m = 0; m < kUsers; ++m) acc[m] += q[m][k] * x;
  }
  for (int m = 0; m < kUsers; ++m) std::memcpy(tile[m], &acc[m], sizeof(Lanes));
}

// xt[k][n] = x[i0 + n][k] for the items of the block (zero lanes past ni).
template <typename T>
void pack_items(detail::Rows<const T> x, int64_t i0, int64_t ni, int64_t d, T* xt) {
  const int64_t cnt = std::min<int64_t>(kItems, ni - i0);
  for (int64_t n = 0; n < kItems; ++n) {
    if (n < cnt) {
      const T* row = x[i0 + n];
      for (int64_t k = 0; k < d; ++k) xt[k * kItems + n] = row[k];
    } else {
      for (int64_t k = 0; k < d; ++k) xt[k * kItems + n] = T(0);
    }
  }
}

}  // namespace

template <typename T>
void score_block(const Ctx& ctx, detail::Rows<const T> q, int64_t nu, detail::Rows<const T> x,
                 int64_t ni, int64_t d, T* out, int64_t ldo) {
  if (nu == 0 || ni == 0) return;
  const int64_t blocks = (ni + kItems - 1) / kItems;
  const int nt = static_cast<int>(
      std::min<int64_t>(detail::threads_for(ctx, nu * ni * std::max<int64_t>(d, 1)), blocks));
#pragma omp parallel num_threads(nt)
  {
    std::vector<T> xt(static_cast<size_t>(std::max<int64_t>(d, 1) * kItems));
    T tile[kUsers][kItems];
    const T* qr[kUsers];
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t i0 = b * kItems, cnt = std::min<int64_t>(kItems, ni - i0);
      pack_items(x, i0, ni, d, xt.data());
      for (int64_t u0 = 0; u0 < nu; u0 += kUsers) {
        const int64_t mu = std::min<int64_t>(kUsers, nu - u0);
        for (int m = 0; m < kUsers; ++m) qr[m] = q[u0 + std::min<int64_t>(m, mu - 1)];
        score_tile<T>(qr, xt.data(), d, tile);
        for (int64_t m = 0; m < mu; ++m)
          std::copy(tile[m], tile[m] + cnt, out + (u0 + m) * ldo + i0);
      }
    }
  }
}

template <typename T>
void score_pairs(const Ctx& ctx, detail::Rows<const T> q, detail::Rows<const T> x, int64_t n,
                 int64_t d, T* out) {
  if (n == 0) return;
  const int nt = detail::threads_for(ctx, n * kUsers * kItems * std::max<int64_t>(d, 1));
#pragma omp parallel num_threads(nt)
  {
    std::vector<T> xt(static_cast<size_t>(std::max<int64_t>(d, 1) * kItems));
    T tile[kUsers][kItems];
    const T* qr[kUsers];
#pragma omp for schedule(static)
    for (int64_t u = 0; u < n; ++u) {
      // Row x[u] alone in lane 0 of an item block; query u in every user slot.
      pack_items(detail::Rows<const T>{x[u], 0}, 0, 1, d, xt.data());
      for (int m = 0; m < kUsers; ++m) qr[m] = q[u];
      score_tile<T>(qr, xt.data(), d, tile);
      out[u] = tile[0][0];
    }
  }
}

template void score_block<float>(const Ctx&, detail::Rows<const float>, int64_t,
                                 detail::Rows<const float>, int64_t, int64_t, float*, int64_t);
template void score_block<double>(const Ctx&, detail::Rows<const double>, int64_t,
                                  detail::Rows<const double>, int64_t, int64_t, double*, int64_t);
template void score_pairs<float>(const Ctx&, detail::Rows<const float>, detail::Rows<const float>,
                                 int64_t, int64_t, float*);
template void score_pairs<double>(const Ctx&, detail::Rows<const double>,
                                  detail::Rows<const double>, int64_t, int64_t, double*);

}  // namespace hstu::cpu::retrieval
