// check_sm90_ds_offset.cu — host-only check (no GPU needed) that ds_byte_offset
// (attention_bwd_sm90_dq.cuh), the hand-written addresses of the fused sm_90a backward's dS
// stores, equals cute's indexing of BwdTraits::SmemLayoutdS through a 1024-byte aligned
// swizzled shared-memory pointer, for every (query, key, buffer) of every fused instance (and
// ds_byte_offset_wide against WideBwdTraits<.., true, true>::SmemLayoutdS, d 256), and
// that the offsets cover the buffer once; and that the stmatrix addresses of ds_stsm_offset put
// every element of the fused d 64 / 128 kernels' dS fragments where ds_byte_offset says, under
// stmatrix's documented fragment layout; and that the transposed dQ stage (d 64 / 256,
// stage_dq_transposed in attention_bwd_sm90_dq.cuh) writes every accumulator element of the real
// wgmma layout (cute's partition of TiledMmaDq) to its dq_col_pos once, that dq_pos_col inverts
// dq_col_pos, and that each warp's 64-bit stores are bank-conflict free; and q_elem_offset (the
// forward's O staging in its Q buffer) against cute's Q layout. Build and run (about a minute):
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
  return check<Tr>(
      name, [](int q, int k, int b) { return long(ds_byte_offset<Tr::kDqT, Tr::kBN>(q, k, b)); });
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
template <bool kKeyContig, int kBN>
int check_stsm(const char* name) {
  constexpr int kBM = 128;  // queries x keys of a tile (BwdTraits at d 64 / 128)
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
              uint32_t at;
              if constexpr (kKeyContig) {
                at = ds_stsm_offset<true, kBN>(8 * m + fc, 16 * warp, j, buf) + 2 * fr;
              } else {
                at = ds_stsm_offset<false, kBN>(8 * m + fr, 16 * warp, j, buf) + 2 * fc;
              }
              const uint32_t want = ds_byte_offset<kKeyContig, kBN>(q, key, buf);
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

// dq_pos_col inverts dq_col_pos on every row (as the convert kernel reads the accumulator).
template <int kHD>
int check_dq_pos(const char* name) {
  int bad = 0;
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 64; ++c) {
      const int pos = dq_col_pos<kHD>(r, c);
      if ((pos < 0 || pos >= 64 || dq_pos_col<kHD>(r, pos) != c) && bad++ < 5)
        std::printf("%s: row %d column %d: position %d, back to %d\n", name, r, c, pos,
                    dq_pos_col<kHD>(r, pos));
    }
  std::printf("%s: %s\n", name, bad ? "MISMATCH" : "ok");
  return bad != 0;
}

// stage_dq_transposed for Tr's dQ wgmma (accumulator [64 head columns, kN queries] per
// warpgroup): for each thread (cute's partition), its elements e, e + 1, e + 2, e + 3 must be
// (r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1) with r % 16 < 8 (the float2 pairs), every element
// must land at stage[c * 64 + dq_col_pos(c, r)] exactly once, and each 64-bit store instruction
// of a warp must touch every bank at most twice (256 bytes: two wavefronts, the minimum).
template <typename Tr, int kHD, int kN>
int check_dq_stage(const char* name) {
  typename Tr::TiledMmaDq mma;
  std::vector<int> seen(kN * 64, 0);
  int bad = 0;
  constexpr int kStores = 64 * kN / 128 / 2;  // float2 stores per thread
  std::vector<int> at(128 * kStores);
  for (int t = 0; t < 128; ++t) {
    auto tc = mma.get_thread_slice(t).partition_C(
        cute::make_identity_tensor(cute::Shape<cute::_64, cute::Int<kN>>{}));
    static_assert(int(cute::size(decltype(tc){})) == 4 * kStores / 2, "elements per thread");
    for (int e = 0; e < int(cute::size(tc)); e += 4) {
      const int r = cute::get<0>(tc(e)), c = cute::get<1>(tc(e));
      for (int i = 0; i < 4; ++i) {
        const int ri = cute::get<0>(tc(e + i)), ci = cute::get<1>(tc(e + i));
        if ((ri != r + 8 * (i >> 1) || ci != c + (i & 1) || r % 16 >= 8) && bad++ < 5)
          std::printf("%s: thread %d element %d is (%d, %d), not (r %d + %d, c %d + %d)\n", name, t,
                      e + i, ri, ci, r, 8 * (i >> 1), c, i & 1);
      }
      for (int h = 0; h < 2; ++h) {  // the two float2 stores: queries c, c + 1
        const int q = c + h, a = q * 64 + dq_col_pos<kHD>(q, r);
        if (a % 2 != 0 && bad++ < 5) std::printf("%s: unaligned float2 at %d\n", name, a);
        for (int v = 0; v < 2; ++v) {  // its two floats: head columns r, r + 8
          const int want = q * 64 + dq_col_pos<kHD>(q, r + 8 * v);
          if (a + v != want && bad++ < 5)
            std::printf("%s: (%d, %d) at %d, want %d\n", name, r + 8 * v, q, a + v, want);
          if (want >= 0 && want < kN * 64) ++seen[want];
        }
        at[t * kStores + e / 2 + h] = a;
      }
    }
  }
  for (int i = 0; i < kN * 64; ++i)
    if (seen[i] != 1 && bad++ < 10) std::printf("%s: float %d hit %d times\n", name, i, seen[i]);
  int worst = 0;
  for (int warp = 0; warp < 4; ++warp)
    for (int k = 0; k < kStores; ++k) {
      int bank[32] = {};
      for (int lane = 0; lane < 32; ++lane)
        for (int v = 0; v < 2; ++v) ++bank[(at[(32 * warp + lane) * kStores + k] + v) % 32];
      for (int b : bank) worst = b > worst ? b : worst;
    }
  if (worst > 2 && bad++ < 10) std::printf("%s: a store hits a bank %d times\n", name, worst);
  std::printf("%s: %s (%d floats, at most %d words a bank per store)\n", name,
              bad ? "MISMATCH" : "ok", kN * 64, worst);
  return bad != 0;
}

// q_elem_offset (attention_fwd_sm90.cuh: where the forward's epilogue stages O) against cute's
// indexing of FwdTraits::SmemLayoutQ through a 1024-byte aligned swizzled pointer, for every
// (row, column): each warpgroup's O rows then land exactly on its own Q rows.
template <typename T, int kHD>
int check_q_layout(const char* name) {
  using Tr = FwdTraits<T, kHD>;
  using Element = typename Tr::Element;
  constexpr int kElems = int(cute::cosize_v<typename Tr::SmemLayoutQ>);
  static_assert(kElems == Tr::kBM * kHD, "Q buffer size");
  alignas(1024) static Element buf[kElems];
  cute::Tensor t = cute::make_tensor(cute::make_smem_ptr(buf), typename Tr::SmemLayoutQ{});
  int bad = 0;
  for (int r = 0; r < Tr::kBM; ++r)
    for (int c = 0; c < kHD; ++c) {
      const long cute_off = long(&t(r, c) - buf), mine = q_elem_offset<Tr::kBM>(r, c);
      if (cute_off != mine && bad++ < 5)
        std::printf("%s: (r %d, c %d): cute %ld, hand-written %ld\n", name, r, c, cute_off, mine);
    }
  std::printf("%s: %s (%d elements)\n", name, bad ? "MISMATCH" : "ok", kElems);
  return bad != 0;
}

int main() {
  int fail = 0;
  fail |= check_stsm<false, 64>("stmatrix d128");
  fail |= check_stsm<true, BwdTraits<__nv_bfloat16, 64, true, true>::kBN>("stmatrix.trans d64");
  fail |= check_fused<__nv_bfloat16, 128>("bf16 d128");
  fail |= check_fused<__half, 128>("fp16 d128");
  fail |= check_fused<__nv_bfloat16, 64>("bf16 d64");
  fail |= check_fused<__half, 64>("fp16 d64");
  fail |= check_wide<__nv_bfloat16>("bf16 d256 (wide)");
  fail |= check_wide<__half>("fp16 d256 (wide)");
  fail |= check_dq_pos<64>("dq_pos_col d64");
  fail |= check_dq_pos<128>("dq_pos_col d128");
  fail |= check_dq_pos<256>("dq_pos_col d256");
  using Fused64 = BwdTraits<__nv_bfloat16, 64, true, true>;
  fail |= check_dq_stage<Fused64, 64, Fused64::kDqN>("dQ stage d64");
  std::printf("fused d 64: %d queries a tile, shared memory %d bytes (at most %d)\n", Fused64::kBN,
              Fused64::kSmemBytes, kSm90MaxSmem);
  fail |= Fused64::kSmemBytes > kSm90MaxSmem;
  fail |= check_dq_stage<WideBwdTraits<__nv_bfloat16, true, true>, 256, 32>("dQ stage d256");
  fail |= check_q_layout<__nv_bfloat16, 64>("forward Q / O layout d64");
  fail |= check_q_layout<__half, 128>("forward Q / O layout d128");
  fail |= check_q_layout<__nv_bfloat16, 256>("forward Q / O layout d256");
  return fail;
}
