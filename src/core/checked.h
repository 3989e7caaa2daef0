// checked.h — overflow-checked size arithmetic: the one place where sizes derived from configs,
// file headers or flags are multiplied, added or narrowed. Each helper throws hstu::Error naming
// `what` (the quantity being computed) instead of wrapping or invoking undefined behaviour.
#pragma once

#include <cstdint>
#include <limits>

#include "core/error.h"

namespace hstu {

// a * b, or an error naming `what` when the product does not fit in int64_t.
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    HSTU_THROW("size overflow: ", what, " = ", a, " * ", b, " does not fit in 64 bits");
  }
  return r;
}

// a + b, or an error naming `what` when the sum does not fit in int64_t.
inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    HSTU_THROW("size overflow: ", what, " = ", a, " + ", b, " does not fit in 64 bits");
  }
  return r;
}

// v as an int32_t, or an error naming `what` when it is out of the int32 range.
inline int32_t checked_i32(int64_t v, const char* what) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    HSTU_THROW("size overflow: ", what, " = ", v, " does not fit in 32 bits");
  }
  return static_cast<int32_t>(v);
}

}  // namespace hstu
