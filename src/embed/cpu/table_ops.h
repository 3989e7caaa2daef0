// cpu/table_ops.h — the CPU reference (and CPU backend) of the dynamic table's primitives
// (embed/table_ops.h documents each; same signatures in hstu::embed::cpu).
#pragma once

#include "embed/table_ops.h"

namespace hstu::embed::cpu {

int64_t dedupe(Ctx& ctx, const int64_t* keys, int64_t n, int64_t* unique, int32_t* inverse,
               int32_t* counts, int64_t* first_key, int32_t* order);
void dedupe_many(Ctx& ctx, const DedupeJob* jobs, int num_jobs, int64_t* u, int64_t* first_key);
void reduce_grad(Ctx& ctx, const int32_t* order, int64_t n, int64_t u, const float* dout,
                 int64_t dout_ld, float scale, float* grad, int64_t grad_ld, int64_t dim,
                 uint8_t* touched);
void find(Ctx& ctx, const TableView& t, const int64_t* keys, int64_t n, int64_t* slots);
void touch(Ctx& ctx, const TableView& t, const int64_t* slots, const int32_t* counts, int64_t n,
           int64_t step, Eviction policy);
AdmitCounts admit(Ctx& ctx, uint32_t* sketch, int depth, int64_t width, const int64_t* keys,
                  const int32_t* counts, const int64_t* slots, int64_t n, int64_t threshold,
                  uint8_t* mask, bool need_counts);
void find_touch_admit(Ctx& ctx, const TableView& t, const int64_t* keys, const int32_t* counts,
                      int64_t n, int64_t step, Eviction policy, int64_t* slots, uint8_t* mask);
InsertCounts insert(Ctx& ctx, const TableView& t, const int64_t* keys, const int32_t* counts,
                    int64_t n, int64_t step, Eviction policy, bool allow_evict, uint8_t* mask,
                    int64_t* slots, uint8_t* status, int64_t* evicted_keys, uint64_t* pending);
void init_rows(Ctx& ctx, const TableView& t, const int64_t* keys, const int64_t* slots,
               const uint8_t* status, int64_t n, uint64_t table_seed, float init_std);
int64_t erase(Ctx& ctx, const TableView& t, const int64_t* keys, int64_t n, uint64_t* pending);
void read_pending(Ctx& ctx, uint64_t* pending, uint64_t* out);
void rehash_double(Ctx& ctx, const TableView& from, const TableView& to);
void gather(Ctx& ctx, const RowSpace& rs, const int64_t* refs, const int64_t* keys, int64_t n,
            float* out, int64_t out_ld, bool init_missing, uint64_t table_seed, float init_std,
            const int32_t* inverse);
void backward_apply(Ctx& ctx, const int32_t* order, int64_t n, int64_t u, const float* dout,
                    int64_t dout_ld, float scale, const RowSpace& rs, const int64_t* refs,
                    float* grad, int64_t grad_ld, uint8_t* touched, const SparseOptimizerSpec& spec,
                    uint8_t* dirty);
void apply_optimizer(Ctx& ctx, const RowSpace& rs, const int64_t* refs, float* grad,
                     int64_t grad_ld, uint8_t* touched, int64_t n, const SparseOptimizerSpec& spec,
                     uint8_t* dirty);
void copy_rows(Ctx& ctx, const float* src, const int64_t* src_slots, float* dst,
               const int64_t* dst_slots, int64_t n, int64_t row_width, const uint8_t* only_dirty,
               uint8_t* clear_dirty);
void miss_mask(Ctx& ctx, const int64_t* cache_slots, const int64_t* store_slots, int64_t n,
               uint8_t* mask);
void tier_refs(Ctx& ctx, const int64_t* cache_slots, const int64_t* store_slots,
               const uint8_t* miss, int64_t n, int64_t n_cache, int64_t* refs, int64_t* fill_src);
void set_scores(Ctx& ctx, const TableView& t, const int64_t* slots, const uint64_t* values,
                int64_t n);
void clear(Ctx& ctx, const TableView& t);
void fill_u8(Ctx& ctx, uint8_t* p, int64_t n, uint8_t v);
void synchronize(Ctx& ctx);
void to_host(Ctx& ctx, void* dst, const void* src, size_t bytes);
void to_device(Ctx& ctx, void* dst, const void* src, size_t bytes);
int64_t list_occupied(Ctx& ctx, const TableView& t, int64_t* keys, int64_t* slots);

}  // namespace hstu::embed::cpu
