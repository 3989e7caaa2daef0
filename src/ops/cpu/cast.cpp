// cpu/cast.cpp — CPU dtype conversion between f32, f64, bf16 and f16 tensors (row-strided).
//
// The one decision: 16-bit values are converted through the scalar bit-pattern functions of
// cast.h (round to nearest even), so a CPU cast gives the same bits as the CUDA kernel.
#include "ops/cpu/cast.h"

#include <cstring>

#include "ops/cpu/common.h"

namespace hstu::cpu {
namespace {

double load(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kF64:
      return static_cast<const double*>(base)[i];
    case DType::kBF16:
      return bf16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return f16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    default:
      HSTU_THROW("cast: unsupported source dtype ", dtype_name(t));
  }
}

// Narrowing from double goes through float first for the 16-bit formats (the values come from
// f32 buffers; a double source is rounded twice, as a f64 -> f32 -> bf16 pipeline would).
void store(void* base, DType t, int64_t i, double v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DType::kF64:
      static_cast<double*>(base)[i] = v;
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = f32_to_bf16_bits(static_cast<float>(v));
      return;
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = f32_to_f16_bits(static_cast<float>(v));
      return;
    default:
      HSTU_THROW("cast: unsupported destination dtype ", dtype_name(t));
  }
}

}  // namespace

void cast(Ctx& ctx, const Tensor& src, const Tensor& dst) {
  detail::check_cpu(src, "cast src");
  detail::check_cpu(dst, "cast dst");
  bool same = src.ndim == dst.ndim;
  for (int i = 0; same && i < src.ndim; ++i) same = src.dim(i) == dst.dim(i);
  HSTU_CHECK(same, "cast: shapes differ (", src.str(), " -> ", dst.str(), ")");
  for (const Tensor* t : {&src, &dst})
    HSTU_CHECK(is_float(t->dtype), "cast: only float dtypes convert, got ", t->str());
  if (src.numel() == 0) return;
  const int64_t rows = src.dim(0), cols = src.row_elems();
  const size_t es = dtype_size(src.dtype);
  const auto* s = static_cast<const char*>(src.data);
  auto* d = static_cast<char*>(dst.data);
#pragma omp parallel for num_threads(detail::threads_for(ctx, rows* cols))
  for (int64_t r = 0; r < rows; ++r) {
    const char* sr = s + static_cast<size_t>(r * src.row_stride) * es;
    char* dr = d + static_cast<size_t>(r * dst.row_stride) * dtype_size(dst.dtype);
    if (src.dtype == dst.dtype) {
      std::memcpy(dr, sr, static_cast<size_t>(cols) * es);
      continue;
    }
    for (int64_t c = 0; c < cols; ++c) store(dr, dst.dtype, c, load(sr, src.dtype, c));
  }
}

}  // namespace hstu::cpu
