// check_sm90_ds_offset.cu — host-only check (no GPU needed) that ds_byte_offset
// (attention_bwd_sm90_dq.cuh), the hand-written addresses of the fused sm_90a backward's dS
// stores, equals cute's indexing of BwdTraits::SmemLayoutdS through a 1024-byte aligned
// swizzled shared-memory pointer, for every (query, key, buffer) of every fused instance (and
// ds_byte_offset_wide against WideBwdTraits<.., true, true>::SmemLayoutdS, d 256), and
// that the offsets cover the buffer once. Build and run (about a minute):
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

int main() {
  int fail = 0;
  fail |= check_fused<__nv_bfloat16, 128>("bf16 d128");
  fail |= check_fused<__half, 128>("fp16 d128");
  fail |= check_fused<__nv_bfloat16, 64>("bf16 d64");
  fail |= check_fused<__half, 64>("fp16 d64");
  fail |= check_wide<__nv_bfloat16>("bf16 d256 (wide)");
  fail |= check_wide<__half>("fp16 d256 (wide)");
  return fail;
}
