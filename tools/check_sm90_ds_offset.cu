// check_sm90_ds_offset.cu — host-only check (no GPU needed) that ds_byte_offset
// (attention_bwd_sm90_dq.cuh), the hand-written addresses of the fused sm_90a backward's dS
// stores, equals cute's indexing of BwdTraits::SmemLayoutdS through a 1024-byte aligned
// swizzled shared-memory pointer, for every (query, key, buffer) of every fused instance (and
// ds_byte_offset_wide against WideBwdTraits<.., true, true>::SmemLayoutdS, d 256), and
// that the offsets cover the buffer once; and that the stmatrix addresses of ds_stsm_offset put
// every element of the fused d 64 / 128 kernels' dS fragments where ds_byte_offset says, under
// stmatrix's documented fragment layout. Build and run (about a minute):
//   nvcc -std=c++20 -O1 -arch=sm_90a --expt-relaxed-constexpr -DHSTU_WITH_CUDA \
//     -DHSTU_SM90_KERNELS=1 -I src -I <cutlass>/include tools/check_sm90_ds_offset.cu \
//     -o /tmp/check_ds && /tmp/check_ds
#include <cstdio>
#include <vector>

#include "ops/cuda/sm90/attention_bwd_sm90.cuh"
#include "ops/cuda/sm90/attention_bwd_sm90_wide.cuh"

using namespace hstu::cuda::attn::sm90;

// Tr's dS buffer (Tr::SmemLayoutdS through a 1024-byte aligned swizzled pointer) against
// offset(q, k, buf), the kernel's hand-written byte address.
template <typename Tr, typename Offset>
int check(const char* name, Offset offset) {
  using Element = typename Tr::Element;
  constexpr int kBytes = int(cute::cosize_v<typename Tr::SmemLayoutdS>) * int(sizeof(Element));
  static_assert(kBytes == Tr::kBN * Tr::kBM * 2 * 2, "dS buffer size");
  alignas(1024) static Element buf[kBytes / sizeof(Element)];
  cute::Tensor t = cute::make_tensor(cute::make_smem_ptr(buf), typename Tr::SmemLayoutdS{});
  std::vector<int> seen(kBytes / 2, 0);
  int bad = 0;
  for (int b = 0; b < 2; ++b)
    for (int k = 0; k < Tr::kBM; ++k)
      for (int q = 0; q < Tr::kBN; ++q) {
        const long cute_off =
            reinterpret_cast<const char*>(&t(q, k, b)) - reinterpret_cast<const char*>(buf);
        const long mine = offset(q, k, b);
        if (cute_off != mine && bad++ < 5)
          std::printf("%s: (q %d, k %d, buf %d): cute %ld, hand-written %ld\n", name, q, k, b,
                      cute_off, mine);
        if (mine >= 0 && mine < kBytes && mine % 2 == 0) ++seen[mine / 2];
      }
  for (int i = 0; i < kBytes / 2; ++i)
    if (seen[i] != 1 && bad++ < 10) std::printf("%s: element %d hit %d times\n", name, i, seen[i]);
  std::printf("%s: %s (%d elements)\n", name, bad ? "MISMATCH" : "ok", kBytes / 2);
  return bad != 0;
}

// The fused d 64 / 128 kernels' dS stores (attention_bwd_sm90_dq.cuh, ds_byte_offset).
template <typename T, int kHD>
int check_fused(const char* name) {
  using Tr = BwdTraits<T, kHD, true, true>;
  return check<Tr>(name,
                   [](int q, int k, int b) { return long(ds_byte_offset<Tr::kDqT>(q, k, b)); });
}

// The fused d 256 kernel's dS buffer (attention_bwd_sm90_wide.cuh, ds_byte_offset_wide).
template <typename T>
int check_wide(const char* name) {
  return check<WideBwdTraits<T, true, true>>(
      name, [](int q, int k, int b) { return long(ds_byte_offset_wide(q, k, b)); });
}

// The fused d 64 / 128 kernels' stmatrix stores (ds_stsm_offset) against ds_byte_offset: for each
// warp of the two consumer warpgroups, lane, store j and 8 x 8 block m, where stmatrix puts
// each of the lane's two elements — row lane / 4, columns 2 (lane % 4) + {0, 1} of the block;
// at the row address lane 8 m + row gives plus 2 column bytes, or transposed (.trans), at the
// address of lane 8 m + column plus 2 row bytes — must be that element's ds_byte_offset, and the
// stores must cover the buffer once.
template <bool kKeyContig>
int check_stsm(const char* name) {
  constexpr int kBN = 64, kBM = 128;  // queries x keys of a tile (BwdTraits at d 64 / 128)
  std::vector<int> seen(kBN * kBM * 2, 0);
  int bad = 0;
  for (int buf = 0; buf < 2; ++buf)
    for (int warp = 0; warp < kBM / 16; ++warp)
      for (int j = 0; j < kBN / 16; ++j)
        for (int lane = 0; lane < 32; ++lane)
          for (int m = 0; m < 4; ++m)
            for (int b = 0; b < 2; ++b) {
              const int fr = lane / 4, fc = 2 * (lane % 4) + b;  // element (fr, fc) of block m
              const int key = 16 * warp + 8 * (m & 1) + fr, q = 8 * (2 * j + (m >> 1)) + fc;
              const uint32_t at =
                  kKeyContig ? ds_stsm_offset<true>(8 * m + fc, 16 * warp, j, buf) + 2 * fr
                             : ds_stsm_offset<false>(8 * m + fr, 16 * warp, j, buf) + 2 * fc;
              const uint32_t want = ds_byte_offset<kKeyContig>(q, key, buf);
              if (at != want && bad++ < 5)
                std::printf(
                    "%s: warp %d lane %d store %d block %d: (q %d, key %d) at %u, want %u\n", name,
                    warp, lane, j, m, q, key, at, want);
              if (at / 2 < seen.size()) ++seen[at / 2];
            }
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 1 && bad++ < 10) std::printf("%s: element %zu hit %d times\n", name, i, seen[i]);
  std::printf("%s: %s (%zu elements)\n", name, bad ? "MISMATCH" : "ok", seen.size());
  return bad != 0;
}

int main() {
  int fail = 0;
  fail |= check_stsm<false>("stmatrix d128");
  fail |= check_stsm<true>("stmatrix.trans d64");
  fail |= check_fused<__nv_bfloat16, 128>("bf16 d128");
  fail |= check_fused<__half, 128>("fp16 d128");
  fail |= check_fused<__nv_bfloat16, 64>("bf16 d64");
  fail |= check_fused<__half, 64>("fp16 d64");
  fail |= check_wide<__nv_bfloat16>("bf16 d256 (wide)");
  fail |= check_wide<__half>("fp16 d256 (wide)");
  return fail;
}
