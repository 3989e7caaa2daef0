// cpu/table_ops.cpp — CPU reference of the dynamic table's primitives: plain loops, keys handled
// in ascending order (so each bucket sees its keys in the order the CUDA kernels use), and the
// fused optimiser with the exact per-element math of ops/cpu/embedding.cpp's
// sparse_optimizer_step (double arithmetic, rounded to f32 on store; a bf16 table's embedding is
// read widened to f32 and that f32 result stored rounded to nearest even bf16).
#include "embed/cpu/table_ops.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.h"
#include "embed/table_math.h"
#include "ops/optimizer.h"

namespace hstu::embed::cpu {
namespace {

int threads_for(const Ctx& ctx, int64_t work) {
  if (work < (1 << 16)) return 1;
  return ctx.num_threads > 0 ? ctx.num_threads : omp_get_max_threads();
}

float* row_ptr(const RowSpace& rs, int64_t ref) {
  return ref < rs.n_a ? rs.a + ref * rs.row_width : rs.b + (ref - rs.n_a) * rs.row_width;
}

}  // namespace

int64_t dedupe(Ctx&, const int64_t* keys, int64_t n, int64_t* unique, int32_t* inverse,
               int32_t* counts, int64_t* first_key, int32_t* sorted) {
  std::vector<std::pair<int64_t, int32_t>> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = {keys[i], static_cast<int32_t>(i)};
  std::sort(order.begin(), order.end());
  int64_t u = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || order[i].first != order[i - 1].first) {
      ++u;
      unique[u] = order[i].first;
      counts[u] = 0;
    }
    ++counts[u];
    inverse[order[i].second] = static_cast<int32_t>(u);
    if (sorted) {
      sorted[i] = order[i].second;
      sorted[n + u] = static_cast<int32_t>(i + 1);
      sorted[2 * n + i] = static_cast<int32_t>(u);
    }
  }
  if (n > 0) *first_key = unique[0];
  return u + 1;
}

void backward_apply(Ctx& ctx, const int32_t* order, int64_t n, int64_t u, const float* dout,
                    int64_t dout_ld, float scale, const RowSpace& rs, const int64_t* refs,
                    float* grad, int64_t grad_ld, uint8_t* touched, const SparseOptimizerSpec& spec,
                    uint8_t* dirty) {
  // grad and touched are scratch (any contents on entry): zeroed, then reduce_grad and apply.
  for (int64_t k = 0; k < u; ++k) {
    std::fill_n(grad + k * grad_ld, rs.dim, 0.0f);
    touched[k] = 0;
  }
  cpu::reduce_grad(ctx, order, n, u, dout, dout_ld, scale, grad, grad_ld, rs.dim, touched);
  cpu::apply_optimizer(ctx, rs, refs, grad, grad_ld, touched, u, spec, dirty);
}

void dedupe_many(Ctx& ctx, const DedupeJob* jobs, int num_jobs, int64_t* u, int64_t* first_key) {
  for (int j = 0; j < num_jobs; ++j) {
    const DedupeJob& b = jobs[j];
    first_key[j] = 0;
    u[j] = cpu::dedupe(ctx, b.keys, b.n, b.unique, b.inverse, b.counts, &first_key[j], b.order);
  }
}

void reduce_grad(Ctx& ctx, const int32_t* order, int64_t n, int64_t u, const float* dout,
                 int64_t dout_ld, float scale, float* grad, int64_t grad_ld, int64_t dim,
                 uint8_t* touched) {
  const int32_t* ends = order + n;
#pragma omp parallel for num_threads(threads_for(ctx, n* dim))
  for (int64_t k = 0; k < u; ++k) {
    float* g = grad + k * grad_ld;
    for (int64_t j = k > 0 ? ends[k - 1] : 0; j < ends[k]; ++j) {
      const float* d = dout + static_cast<int64_t>(order[j]) * dout_ld;
      for (int64_t c = 0; c < dim; ++c) g[c] += d[c] * scale;
    }
    touched[k] = 1;
  }
}

void find(Ctx& ctx, const TableView& t, const int64_t* keys, int64_t n, int64_t* slots) {
#pragma omp parallel for num_threads(threads_for(ctx, n* t.bucket_size))
  for (int64_t i = 0; i < n; ++i) {
    slots[i] = -1;
    if (keys[i] == kEmptyKey) continue;
    const int64_t base = bucket_of(keys[i], t.num_buckets) * t.bucket_size;
    for (int s = 0; s < t.bucket_size; ++s)
      if (t.keys[base + s] == keys[i]) {
        slots[i] = base + s;
        break;
      }
  }
}

void touch(Ctx&, const TableView& t, const int64_t* slots, const int32_t* counts, int64_t n,
           int64_t step, Eviction policy) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = slots[i];
    if (s < 0) continue;
    t.last_step[s] = step;
    if (policy == Eviction::kLfu)
      t.scores[s] += static_cast<uint64_t>(counts[i]);
    else
      t.scores[s] = static_cast<uint64_t>(step);
  }
}

AdmitCounts admit(Ctx&, uint32_t* sketch, int depth, int64_t width, const int64_t* keys,
                  const int32_t* counts, const int64_t* slots, int64_t n, int64_t threshold,
                  uint8_t* mask, bool) {
  const uint64_t wmask = static_cast<uint64_t>(width - 1);
  for (int64_t i = 0; sketch && i < n; ++i) {
    if (slots[i] >= 0) continue;
    for (int r = 0; r < depth; ++r) {
      uint32_t& c = sketch[r * width + (derive_seed(key_hash(keys[i]), r) & wmask)];
      const uint64_t sum = static_cast<uint64_t>(c) + static_cast<uint64_t>(counts[i]);
      c = sum > 0xffffffffull ? 0xffffffffu : static_cast<uint32_t>(sum);
    }
  }
  AdmitCounts a;
  for (int64_t i = 0; i < n; ++i) {
    mask[i] = 0;
    if (slots[i] >= 0) continue;
    uint32_t est = 0xffffffffu;
    for (int r = 0; sketch && r < depth; ++r)
      est = std::min(est, sketch[r * width + (derive_seed(key_hash(keys[i]), r) & wmask)]);
    mask[i] = static_cast<int64_t>(est) >= threshold && keys[i] != kEmptyKey;
    a.admitted += mask[i];
    a.rejected += !mask[i];
  }
  return a;
}

// The reference of the fused pass: exactly find, touch, then admit without a sketch.
void find_touch_admit(Ctx& ctx, const TableView& t, const int64_t* keys, const int32_t* counts,
                      int64_t n, int64_t step, Eviction policy, int64_t* slots, uint8_t* mask) {
  cpu::find(ctx, t, keys, n, slots);
  cpu::touch(ctx, t, slots, counts, n, step, policy);
  cpu::admit(ctx, nullptr, 0, 1, keys, counts, slots, n, 0, mask, false);
}

InsertCounts insert(Ctx&, const TableView& t, const int64_t* keys, const int32_t* counts, int64_t n,
                    int64_t step, Eviction policy, bool allow_evict, uint8_t* mask, int64_t* slots,
                    uint8_t* status, int64_t* evicted_keys, uint64_t* pending) {
  InsertCounts c;
  for (int64_t i = 0; i < n; ++i) {
    evicted_keys[i] = kEmptyKey;
    if (!mask[i]) {
      status[i] = kSkipped;
      continue;
    }
    const int64_t base = bucket_of(keys[i], t.num_buckets) * t.bucket_size;
    int64_t slot = -1;
    for (int s = 0; s < t.bucket_size && slot < 0; ++s)
      if (t.keys[base + s] == kEmptyKey) slot = base + s;
    uint8_t st = kInserted;
    if (slot < 0 && allow_evict) {
      for (int s = 0; s < t.bucket_size; ++s) {
        const int64_t q = base + s;
        if (t.last_step[q] == step) continue;
        if (slot < 0 || evicts_before(t.scores[q], t.keys[q], t.scores[slot], t.keys[slot]))
          slot = q;
      }
      st = slot < 0 ? kNoVictim : kEvicted;
      if (slot >= 0) evicted_keys[i] = t.keys[slot];
    } else if (slot < 0) {
      st = kFull;
    }
    status[i] = st;
    mask[i] = st == kFull;
    slots[i] = slot;
    c.inserted += st == kInserted || st == kEvicted;
    c.evicted += st == kEvicted;
    c.full += st == kFull;
    c.no_victim += st == kNoVictim;
    if (slot < 0) continue;
    t.keys[slot] = keys[i];
    t.scores[slot] =
        policy == Eviction::kLfu ? static_cast<uint64_t>(counts[i]) : static_cast<uint64_t>(step);
    t.last_step[slot] = step;
  }
  if (pending) {
    pending[kPendingInserted] += static_cast<uint64_t>(c.inserted);
    pending[kPendingEvicted] += static_cast<uint64_t>(c.evicted);
    pending[kPendingFull] += static_cast<uint64_t>(c.full);
    pending[kPendingNoVictim] += static_cast<uint64_t>(c.no_victim);
    return {};
  }
  return c;
}

void init_rows(Ctx& ctx, const TableView& t, const int64_t* keys, const int64_t* slots,
               const uint8_t* status, int64_t n, uint64_t table_seed, float init_std) {
#pragma omp parallel for num_threads(threads_for(ctx, n* t.row_width * 8))
  for (int64_t i = 0; i < n; ++i) {
    if (status[i] != kInserted && status[i] != kEvicted) continue;
    float* row = t.values + slots[i] * t.row_width;
    std::fill(row, row + t.row_width, 0.0f);  // state and the bf16 padding
    for (int64_t c = 0; c < t.dim; ++c)
      set_row_value(row, c, key_init_value(table_seed, keys[i], c, init_std), t.bf16);
  }
}

void read_pending(Ctx&, uint64_t* pending, uint64_t* out) {
  std::copy_n(pending, kPendingWords, out);
  std::fill_n(pending, kPendingWords, uint64_t{0});
}

int64_t erase(Ctx& ctx, const TableView& t, const int64_t* keys, int64_t n, uint64_t* pending) {
  std::vector<int64_t> slots(static_cast<size_t>(n));
  cpu::find(ctx, t, keys, n, slots.data());
  int64_t erased = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (slots[i] < 0) continue;
    t.keys[slots[i]] = kEmptyKey;
    t.scores[slots[i]] = 0;
    t.last_step[slots[i]] = -1;
    ++erased;
  }
  if (pending) {
    pending[kPendingErased] += static_cast<uint64_t>(erased);
    return 0;
  }
  return erased;
}

void rehash_double(Ctx&, const TableView& from, const TableView& to) {
  HSTU_CHECK(to.num_buckets == 2 * from.num_buckets && to.bucket_size == from.bucket_size &&
                 to.row_width == from.row_width,
             "dynamic table rehash: the new table must have twice the buckets");
  for (int64_t b = 0; b < from.num_buckets; ++b)
    for (int s = 0; s < from.bucket_size; ++s) {
      const int64_t q = b * from.bucket_size + s;
      const int64_t k = from.keys[q];
      if (k == kEmptyKey) continue;
      const int64_t d = bucket_of(k, to.num_buckets) * to.bucket_size + s;
      to.keys[d] = k;
      to.scores[d] = from.scores[q];
      to.last_step[d] = from.last_step[q];
      std::memcpy(to.values + d * to.row_width, from.values + q * from.row_width,
                  static_cast<size_t>(from.row_width) * sizeof(float));
    }
}

void gather(Ctx& ctx, const RowSpace& rs, const int64_t* refs, const int64_t* keys, int64_t n,
            float* out, int64_t out_ld, bool init_missing, uint64_t table_seed, float init_std,
            const int32_t* inverse) {
#pragma omp parallel for num_threads(threads_for(ctx, n* rs.dim))
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + i * out_ld;
    const int64_t r = inverse ? inverse[i] : i;
    if (refs[r] >= 0 && !rs.bf16) {
      std::memcpy(o, row_ptr(rs, refs[r]), static_cast<size_t>(rs.dim) * sizeof(float));
    } else if (refs[r] >= 0) {
      const float* row = row_ptr(rs, refs[r]);
      for (int64_t c = 0; c < rs.dim; ++c) o[c] = row_value(row, c, true);
    } else {
      for (int64_t c = 0; c < rs.dim; ++c) {
        const float v = init_missing ? key_init_value(table_seed, keys[r], c, init_std) : 0.0f;
        o[c] = rs.bf16 ? round_bf16(v) : v;
      }
    }
  }
}

void apply_optimizer(Ctx& ctx, const RowSpace& rs, const int64_t* refs, float* grad,
                     int64_t grad_ld, uint8_t* touched, int64_t n, const SparseOptimizerSpec& spec,
                     uint8_t* dirty) {
  const Tensor& guard = spec.skip_if_nonfinite;
  if (!guard.empty())
    HSTU_CHECK(guard.device == Device::kCPU && guard.dtype == DType::kF64,
               "dynamic table optimiser: skip_if_nonfinite must be f64 on the CPU, got ",
               guard.str());
  const bool skip = !guard.empty() && !all_finite(guard.as<double>(), guard.numel());
  const int64_t d = rs.dim;
  // The same expressions, in the same order, as cpu::sparse_optimizer_step (T = float).
  const double lr = spec.lr, b1 = spec.beta1, b2 = spec.beta2, eps = spec.eps;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(spec.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(spec.step));
  const auto kind = spec.kind;
  if (kind == SparseOptimizerSpec::kAdam)
    HSTU_CHECK(spec.step >= 1, "dynamic table Adam: step is 1-based, got ", spec.step);
#pragma omp parallel for num_threads(threads_for(ctx, 8 * n * d))
  for (int64_t i = 0; i < n; ++i) {
    float* gr = grad + i * grad_ld;
    if (touched[i] && refs[i] >= 0 && !skip) {
      float* wr = row_ptr(rs, refs[i]);
      const bool bf = rs.bf16;
      float* st = wr + rs.state_off;  // the f32 optimiser state
      if (kind == SparseOptimizerSpec::kAdam) {
        float* mr = st;
        float* vr = st + d;
        for (int64_t c = 0; c < d; ++c) {
          const double gc = gr[c];
          const double mc = b1 * mr[c] + (1 - b1) * gc;
          const double vc = b2 * vr[c] + (1 - b2) * gc * gc;
          mr[c] = static_cast<float>(mc);
          vr[c] = static_cast<float>(vc);
          const double wc = row_value(wr, c, bf);
          set_row_value(wr, c,
                        static_cast<float>(wc - lr * (mc / bc1) / (std::sqrt(vc / bc2) + eps)), bf);
        }
      } else if (kind == SparseOptimizerSpec::kRowWiseAdagrad) {
        double ss = 0;
        for (int64_t c = 0; c < d; ++c) ss += double(gr[c]) * gr[c];
        const double sv = st[0] + ss / static_cast<double>(d);
        st[0] = static_cast<float>(sv);
        const double mult = lr / (std::sqrt(sv) + eps);
        for (int64_t c = 0; c < d; ++c)
          set_row_value(wr, c, static_cast<float>(row_value(wr, c, bf) - mult * gr[c]), bf);
      } else {
        for (int64_t c = 0; c < d; ++c)
          set_row_value(wr, c, static_cast<float>(row_value(wr, c, bf) - lr * gr[c]), bf);
      }
      if (dirty && refs[i] < rs.n_a) dirty[refs[i]] = 1;
    }
    for (int64_t c = 0; c < d; ++c) gr[c] = 0.0f;
    touched[i] = 0;
  }
}

void copy_rows(Ctx&, const float* src, const int64_t* src_slots, float* dst,
               const int64_t* dst_slots, int64_t n, int64_t row_width, const uint8_t* only_dirty,
               uint8_t* clear_dirty) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = src_slots[i], d = dst_slots[i];
    if (s < 0 || d < 0 || (only_dirty && !only_dirty[s])) continue;
    std::memcpy(dst + d * row_width, src + s * row_width,
                static_cast<size_t>(row_width) * sizeof(float));
    if (clear_dirty) clear_dirty[d] = 0;
  }
}

void miss_mask(Ctx&, const int64_t* cache_slots, const int64_t* store_slots, int64_t n,
               uint8_t* mask) {
  for (int64_t i = 0; i < n; ++i) mask[i] = cache_slots[i] < 0 && store_slots[i] >= 0;
}

void tier_refs(Ctx&, const int64_t* cache_slots, const int64_t* store_slots, const uint8_t* miss,
               int64_t n, int64_t n_cache, int64_t* refs, int64_t* fill_src) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = cache_slots[i], s = store_slots[i];
    refs[i] = c >= 0 ? c : (s >= 0 ? n_cache + s : -1);
    if (fill_src) fill_src[i] = miss && miss[i] && c >= 0 ? s : -1;
  }
}

void set_scores(Ctx&, const TableView& t, const int64_t* slots, const uint64_t* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (slots[i] >= 0) t.scores[slots[i]] = values[i];
}

void clear(Ctx&, const TableView& t) {
  std::fill(t.keys, t.keys + t.capacity(), kEmptyKey);
  std::fill(t.scores, t.scores + t.capacity(), uint64_t{0});
  std::fill(t.last_step, t.last_step + t.capacity(), int64_t{-1});
  if (t.heads) std::fill(t.heads, t.heads + t.num_buckets, int32_t{-1});
}

void fill_u8(Ctx&, uint8_t* p, int64_t n, uint8_t v) {
  std::memset(p, v, static_cast<size_t>(n));
}

void synchronize(Ctx&) {}

void to_host(Ctx&, void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void to_device(Ctx&, void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

int64_t list_occupied(Ctx&, const TableView& t, int64_t* keys, int64_t* slots) {
  int64_t m = 0;
  for (int64_t q = 0; q < t.capacity(); ++q)
    if (t.keys[q] != kEmptyKey) {
      keys[m] = t.keys[q];
      slots[m++] = q;
    }
  return m;
}

}  // namespace hstu::embed::cpu
