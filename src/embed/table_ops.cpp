// table_ops.cpp — dispatches the dynamic table's primitives on ctx.device (a CPU-only build
// throws for CUDA and needs no CUDA symbol).
#include "embed/table_ops.h"

#include "embed/cpu/table_ops.h"
#if defined(HSTU_WITH_CUDA)
#include "embed/cuda/table_ops.h"
#endif

namespace hstu::embed {

#define HSTU_EMBED_DISPATCH(call)  \
  if (ctx.cpu()) return cpu::call; \
  HSTU_CUDA_DISPATCH(return cuda::call);

int64_t dedupe(Ctx& ctx, const int64_t* keys, int64_t n, int64_t* unique, int32_t* inverse,
               int32_t* counts, int64_t* first_key, int32_t* order) {
  HSTU_EMBED_DISPATCH(dedupe(ctx, keys, n, unique, inverse, counts, first_key, order));
}
void dedupe_many(Ctx& ctx, const DedupeJob* jobs, int num_jobs, int64_t* u, int64_t* first_key) {
  HSTU_CHECK(num_jobs >= 0 && num_jobs <= kMaxDedupeJobs, "dedupe_many: ", num_jobs,
             " tables (at most ", kMaxDedupeJobs, ")");
  HSTU_EMBED_DISPATCH(dedupe_many(ctx, jobs, num_jobs, u, first_key));
}
void reduce_grad(Ctx& ctx, const int32_t* order, int64_t n, int64_t u, const float* dout,
                 int64_t dout_ld, float scale, float* grad, int64_t grad_ld, int64_t dim,
                 uint8_t* touched) {
  HSTU_EMBED_DISPATCH(
      reduce_grad(ctx, order, n, u, dout, dout_ld, scale, grad, grad_ld, dim, touched));
}
void find(Ctx& ctx, const TableView& t, const int64_t* keys, int64_t n, int64_t* slots) {
  HSTU_EMBED_DISPATCH(find(ctx, t, keys, n, slots));
}
void touch(Ctx& ctx, const TableView& t, const int64_t* slots, const int32_t* counts, int64_t n,
           int64_t step, Eviction policy) {
  HSTU_EMBED_DISPATCH(touch(ctx, t, slots, counts, n, step, policy));
}
AdmitCounts admit(Ctx& ctx, uint32_t* sketch, int depth, int64_t width, const int64_t* keys,
                  const int32_t* counts, const int64_t* slots, int64_t n, int64_t threshold,
                  uint8_t* mask, bool need_counts) {
  HSTU_EMBED_DISPATCH(
      admit(ctx, sketch, depth, width, keys, counts, slots, n, threshold, mask, need_counts));
}
void find_touch_admit(Ctx& ctx, const TableView& t, const int64_t* keys, const int32_t* counts,
                      int64_t n, int64_t step, Eviction policy, int64_t* slots, uint8_t* mask) {
  HSTU_EMBED_DISPATCH(find_touch_admit(ctx, t, keys, counts, n, step, policy, slots, mask));
}
InsertCounts insert(Ctx& ctx, const TableView& t, const int64_t* keys, const int32_t* counts,
                    int64_t n, int64_t step, Eviction policy, bool allow_evict, uint8_t* mask,
                    int64_t* slots, uint8_t* status, int64_t* evicted_keys, uint64_t* pending) {
  HSTU_EMBED_DISPATCH(insert(ctx, t, keys, counts, n, step, policy, allow_evict, mask, slots,
                             status, evicted_keys, pending));
}
void init_rows(Ctx& ctx, const TableView& t, const int64_t* keys, const int64_t* slots,
               const uint8_t* status, int64_t n, uint64_t table_seed, float init_std) {
  HSTU_EMBED_DISPATCH(init_rows(ctx, t, keys, slots, status, n, table_seed, init_std));
}
int64_t erase(Ctx& ctx, const TableView& t, const int64_t* keys, int64_t n, uint64_t* pending) {
  HSTU_EMBED_DISPATCH(erase(ctx, t, keys, n, pending));
}
void read_pending(Ctx& ctx, uint64_t* pending, uint64_t* out) {
  HSTU_EMBED_DISPATCH(read_pending(ctx, pending, out));
}
void rehash_double(Ctx& ctx, const TableView& from, const TableView& to) {
  HSTU_EMBED_DISPATCH(rehash_double(ctx, from, to));
}
void gather(Ctx& ctx, const RowSpace& rs, const int64_t* refs, const int64_t* keys, int64_t n,
            float* out, int64_t out_ld, bool init_missing, uint64_t table_seed, float init_std,
            const int32_t* inverse) {
  HSTU_EMBED_DISPATCH(
      gather(ctx, rs, refs, keys, n, out, out_ld, init_missing, table_seed, init_std, inverse));
}
void backward_apply(Ctx& ctx, const int32_t* order, int64_t n, int64_t u, const float* dout,
                    int64_t dout_ld, float scale, const RowSpace& rs, const int64_t* refs,
                    float* grad, int64_t grad_ld, uint8_t* touched, const SparseOptimizerSpec& spec,
                    uint8_t* dirty) {
  HSTU_CHECK(spec.kind == SparseOptimizerSpec::kAdam || spec.kind == SparseOptimizerSpec::kSgd,
             "dynamic table backward_apply: Adam or SGD only (row-wise Adagrad: reduce_grad, "
             "then apply)");
  HSTU_EMBED_DISPATCH(backward_apply(ctx, order, n, u, dout, dout_ld, scale, rs, refs, grad,
                                     grad_ld, touched, spec, dirty));
}
void apply_optimizer(Ctx& ctx, const RowSpace& rs, const int64_t* refs, float* grad,
                     int64_t grad_ld, uint8_t* touched, int64_t n, const SparseOptimizerSpec& spec,
                     uint8_t* dirty) {
  HSTU_EMBED_DISPATCH(apply_optimizer(ctx, rs, refs, grad, grad_ld, touched, n, spec, dirty));
}
void copy_rows(Ctx& ctx, const float* src, const int64_t* src_slots, float* dst,
               const int64_t* dst_slots, int64_t n, int64_t row_width, const uint8_t* only_dirty,
               uint8_t* clear_dirty) {
  HSTU_EMBED_DISPATCH(
      copy_rows(ctx, src, src_slots, dst, dst_slots, n, row_width, only_dirty, clear_dirty));
}
void miss_mask(Ctx& ctx, const int64_t* cache_slots, const int64_t* store_slots, int64_t n,
               uint8_t* mask) {
  HSTU_EMBED_DISPATCH(miss_mask(ctx, cache_slots, store_slots, n, mask));
}
void tier_refs(Ctx& ctx, const int64_t* cache_slots, const int64_t* store_slots,
               const uint8_t* miss, int64_t n, int64_t n_cache, int64_t* refs, int64_t* fill_src) {
  HSTU_EMBED_DISPATCH(tier_refs(ctx, cache_slots, store_slots, miss, n, n_cache, refs, fill_src));
}
void set_scores(Ctx& ctx, const TableView& t, const int64_t* slots, const uint64_t* values,
                int64_t n) {
  HSTU_EMBED_DISPATCH(set_scores(ctx, t, slots, values, n));
}
void clear(Ctx& ctx, const TableView& t) {
  HSTU_EMBED_DISPATCH(clear(ctx, t));
}
void fill_u8(Ctx& ctx, uint8_t* p, int64_t n, uint8_t v) {
  HSTU_EMBED_DISPATCH(fill_u8(ctx, p, n, v));
}
void synchronize(Ctx& ctx) {
  HSTU_EMBED_DISPATCH(synchronize(ctx));
}
void to_host(Ctx& ctx, void* dst, const void* src, size_t bytes) {
  HSTU_EMBED_DISPATCH(to_host(ctx, dst, src, bytes));
}
void to_device(Ctx& ctx, void* dst, const void* src, size_t bytes) {
  HSTU_EMBED_DISPATCH(to_device(ctx, dst, src, bytes));
}
int64_t list_occupied(Ctx& ctx, const TableView& t, int64_t* keys, int64_t* slots) {
  HSTU_EMBED_DISPATCH(list_occupied(ctx, t, keys, slots));
}

#undef HSTU_EMBED_DISPATCH

}  // namespace hstu::embed
