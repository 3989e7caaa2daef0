// table_ops.h — the batched primitives of the dynamic embedding table, one set per backend
// (cpu/table_ops.cpp: the reference; cuda/table_ops.cu), dispatched on ctx.device by
// table_ops.cpp. HashTable (hash_table.h) composes them; nothing else calls them.
//
// Every pointer is on ctx.device (the values of a host-tier store are page-locked host memory,
// which CUDA kernels address directly). Keys of one call are distinct (dedupe first), and insert
// handles a bucket's keys in the order they are given on both backends, so a sequence of calls
// leaves both backends' tables with the same keys, scores and rows. The reserved key is never
// found, admitted or inserted.
#pragma once

#include <cstdint>

#include "core/context.h"
#include "core/host_device.h"
#include "ops/embedding.h"

namespace hstu::embed {

enum class Eviction : uint8_t { kNone, kLru, kLfu };

// One tier's storage: capacity = num_buckets * bucket_size slots.
struct TableView {
  int64_t* keys = nullptr;       // [capacity], kEmptyKey = free
  uint64_t* scores = nullptr;    // [capacity]: LRU step of last use / LFU frequency
  int64_t* last_step = nullptr;  // [capacity]: step of last use (-1: never); protects the step
  float* values = nullptr;       // [capacity, row_width] 4-byte words: embedding [dim] (f32, or
                                 // bf16 in state_off words) | optimiser state f32 (table_math.h)
  int32_t* heads = nullptr;      // [num_buckets]: CUDA insert's per-bucket key lists; -1 between
                                 // calls (clear sets it; the CPU does not use it)
  int64_t num_buckets = 0;
  int bucket_size = 0;
  int64_t row_width = 0, dim = 0;
  int64_t state_off = 0;  // word of the optimiser state in a row: embedding_words(dim, bf16)
  bool bf16 = false;      // embedding values stored as bf16
  HSTU_HD int64_t capacity() const { return num_buckets * bucket_size; }
};

// insert() statuses, per key.
enum InsertStatus : uint8_t {
  kSkipped = 0,   // not asked to insert (mask 0)
  kInserted = 1,  // placed in a free slot
  kEvicted = 2,   // placed in the slot of evicted_keys[i]
  kFull = 3,      // bucket full and eviction not allowed: mask[i] stays 1 (grow and retry)
  kNoVictim = 4,  // bucket full of keys used this step: not admitted
};

struct InsertCounts {
  int64_t inserted = 0, evicted = 0, full = 0, no_victim = 0;
};

// Sort-based unique: unique[0:U) = the distinct keys of keys[0:n) ascending, inverse[i] = index
// of keys[i] in unique, counts[u] = occurrences, *first_key (host) = unique[0]. Returns U (the
// CUDA backend synchronises once). With order (i32 [3n], optional): order[0:n) = the positions
// of keys in (key, position) order, order[n + u] = one past unique key u's last entry there
// (its segment of the sorted order ends), order[2n + j] = the unique key of sorted entry j (so a
// kernel starting at any entry knows its key without a search), for reduce_grad and
// backward_apply.
int64_t dedupe(Ctx& ctx, const int64_t* keys, int64_t n, int64_t* unique, int32_t* inverse,
               int32_t* counts, int64_t* first_key, int32_t* order = nullptr);

// One table's part of dedupe_many: its lookups and dedupe's outputs (as dedupe's arguments).
struct DedupeJob {
  const int64_t* keys = nullptr;
  int64_t n = 0;
  int64_t* unique = nullptr;
  int32_t* inverse = nullptr;
  int32_t* counts = nullptr;
  int32_t* order = nullptr;  // optional, as dedupe's
};
inline constexpr int kMaxDedupeJobs = 64;
// dedupe of up to kMaxDedupeJobs tables at once, each exactly as dedupe would (keys of different
// jobs never meet): u[j] = job j's U, first_key[j] its smallest key (host arrays). The CUDA
// backend sorts all lookups together ((key, position) in 64 bits, then the job in one stable
// pass), so T tables cost one pair of sorts, one scan and one synchronisation.
void dedupe_many(Ctx& ctx, const DedupeJob* jobs, int num_jobs, int64_t* u, int64_t* first_key);

// The gradient of the unique rows from the lookups' output gradients, summed per unique key
// over dedupe's order (no atomics per lookup): grad[u, 0:dim) += scale * sum of dout[p, 0:dim)
// over the positions p of key u, touched[u] = 1, for u < U. grad rows [0, U) must be zero on
// entry on CUDA (a key whose lookups span several warps' chunks adds its partial sums
// atomically; the order of those additions is not fixed). The CPU sums each key in position
// order, as embedding_bwd does.
void reduce_grad(Ctx& ctx, const int32_t* order, int64_t n, int64_t u, const float* dout,
                 int64_t dout_ld, float scale, float* grad, int64_t grad_ld, int64_t dim,
                 uint8_t* touched);

// slots[i] = slot of keys[i] or -1.
void find(Ctx& ctx, const TableView& t, const int64_t* keys, int64_t n, int64_t* slots);

// For slots[i] >= 0: last_step = step; score = step (LRU, none) or score + counts[i] (LFU).
void touch(Ctx& ctx, const TableView& t, const int64_t* slots, const int32_t* counts, int64_t n,
           int64_t step, Eviction policy);

struct AdmitCounts {
  int64_t admitted = 0, rejected = 0;
};
// Count-min sketch admission: for keys with slots[i] < 0, adds counts[i] to the sketch
// (u32 [depth, width], width a power of two; saturating), then mask[i] = estimate >= threshold
// (mask[i] = 0 where slots[i] >= 0 or keys[i] is the reserved key). With sketch == nullptr every
// missing key is admitted. Without need_counts the CUDA backend does not read the counts back
// (no synchronisation) and returns {-1, -1}.
AdmitCounts admit(Ctx& ctx, uint32_t* sketch, int depth, int64_t width, const int64_t* keys,
                  const int32_t* counts, const int64_t* slots, int64_t n, int64_t threshold,
                  uint8_t* mask, bool need_counts);

// find, touch and admission without a sketch in one pass (the steady-state step of
// find_or_insert): slots[i] = slot of keys[i] or -1; found slots are touched as touch() does;
// mask[i] = 1 for every missing key but the reserved one (admit() with sketch == nullptr).
// Counts nothing; the CUDA backend runs one kernel and never synchronises.
void find_touch_admit(Ctx& ctx, const TableView& t, const int64_t* keys, const int32_t* counts,
                      int64_t n, int64_t step, Eviction policy, int64_t* slots, uint8_t* mask);

// Inserts keys[i] where mask[i] (keys absent from the table), a bucket's keys in input order: a
// free slot, else (allow_evict) the slot of the bucket's lowest (score, key) not used this step,
// else status kFull (mask stays 1) / kNoVictim. Sets slots[i], status[i], evicted_keys[i]
// (kEmptyKey unless kEvicted), the new slot's score (LRU/none: step; LFU: counts[i]) and last_step
// = step; mask[i] = 1 only for kFull afterwards.
// With `pending` (u64 [kPendingWords] on ctx.device; host memory on the CPU) the counts are added
// to pending[kPendingInserted..kPendingNoVictim] in stream order and {} is returned: the CUDA
// backend then does not synchronise (read_pending settles them later).
InsertCounts insert(Ctx& ctx, const TableView& t, const int64_t* keys, const int32_t* counts,
                    int64_t n, int64_t step, Eviction policy, bool allow_evict, uint8_t* mask,
                    int64_t* slots, uint8_t* status, int64_t* evicted_keys,
                    uint64_t* pending = nullptr);

// Rows slots[i] (where status[i] is kInserted or kEvicted) = the key's initial embedding (rounded
// to bf16 in a bf16 table) and a zero optimiser state (and zero padding).
void init_rows(Ctx& ctx, const TableView& t, const int64_t* keys, const int64_t* slots,
               const uint8_t* status, int64_t n, uint64_t table_seed, float init_std);

// Erases keys[0:n) that are present; returns how many were. With `pending` the count is added to
// pending[kPendingErased] instead (no synchronisation) and 0 is returned.
int64_t erase(Ctx& ctx, const TableView& t, const int64_t* keys, int64_t n,
              uint64_t* pending = nullptr);

// The words of a pending-count array (insert, erase).
enum PendingWord : int {
  kPendingInserted = 0,
  kPendingEvicted = 1,
  kPendingFull = 2,
  kPendingNoVictim = 3,
  kPendingErased = 4,
  kPendingWords = 5
};
// Waits for the device (every stream: the one that last added may be gone), copies
// pending[0:kPendingWords) to out (host) and zeroes pending.
void read_pending(Ctx& ctx, uint64_t* pending, uint64_t* out);

// Copies every slot of `from` into the slot of the same index within bucket b or b + nb of `to`
// (to.num_buckets == 2 * from.num_buckets); `to` starts empty.
void rehash_double(Ctx& ctx, const TableView& from, const TableView& to);

// A row reference space over two tiers: ref r < n_a is row r of a, ref >= n_a row r - n_a of b
// (b may be empty when n_a covers everything); ref < 0 is no row.
struct RowSpace {
  float* a = nullptr;
  int64_t n_a = 0;
  float* b = nullptr;
  int64_t row_width = 0, dim = 0;  // row_width in 4-byte words, as TableView's
  int64_t state_off = 0;           // as TableView's
  bool bf16 = false;
};

// out[i, 0:dim) = embedding of refs[r] (bf16 widened to f32), r = inverse ? inverse[i] : i; for
// refs[r] < 0 the initial value of keys[r] (init_missing; rounded to bf16 in a bf16 table, the
// value an insert would store) or zeros. out is [n, out_ld] f32. With inverse it is the
// lookups' output straight from the table (no window).
void gather(Ctx& ctx, const RowSpace& rs, const int64_t* refs, const int64_t* keys, int64_t n,
            float* out, int64_t out_ld, bool init_missing, uint64_t table_seed, float init_std,
            const int32_t* inverse = nullptr);

// The fused sparse optimiser: for each i with touched[i] and refs[i] >= 0, updates row refs[i]
// (embedding and state in the row) from grad[i, 0:dim) with exactly the per-element math of
// sparse_optimizer_step on this backend (a bf16 embedding is read as f32, updated in f32 and
// stored rounded to nearest even bf16; the state stays f32), sets dirty[refs[i]] = 1 where refs[i]
// < n_a and dirty is given; then zeroes grad[0:n) and touched[0:n). refs of touched rows must be
// distinct. spec.skip_if_nonfinite is honoured as sparse_optimizer_step does.
void apply_optimizer(Ctx& ctx, const RowSpace& rs, const int64_t* refs, float* grad,
                     int64_t grad_ld, uint8_t* touched, int64_t n, const SparseOptimizerSpec& spec,
                     uint8_t* dirty);

// The backward of dedupe's lookups: the rows' gradients summed per unique key over dedupe's
// order (reduce_grad's sums) and the optimiser applied to every key's row with apply_optimizer's
// per-element math (every unique key has lookups, so every row [0, u) is touched). grad [u,
// grad_ld] and touched [u] are scratch: any contents on entry, unspecified on return (the CPU
// zeroes them, runs reduce_grad then apply_optimizer and leaves them zero). The CUDA backend
// (dim a multiple of 4, 16-byte aligned) goes by key (order i32 [3n] as dedupe saves it): a key
// with at most 32 lookups is summed in position order and its row updated by one warp, with no
// gradient row; only hot keys' sums pass through grad (zeroed, 16-byte atomics, then updated):
// no zero pass over grad, no touched flags, no search. refs [u] as apply's. Adam and SGD only
// (row-wise Adagrad needs the row's whole gradient first: reduce_grad + apply_optimizer).
void backward_apply(Ctx& ctx, const int32_t* order, int64_t n, int64_t u, const float* dout,
                    int64_t dout_ld, float scale, const RowSpace& rs, const int64_t* refs,
                    float* grad, int64_t grad_ld, uint8_t* touched, const SparseOptimizerSpec& spec,
                    uint8_t* dirty);

// dst row dst_slots[i] = src row src_slots[i] (whole rows, row_width floats) where both are
// >= 0 and (only_dirty == nullptr or only_dirty[src_slots[i]]); then clear_dirty[dst_slots[i]]
// = 0 when given.
void copy_rows(Ctx& ctx, const float* src, const int64_t* src_slots, float* dst,
               const int64_t* dst_slots, int64_t n, int64_t row_width, const uint8_t* only_dirty,
               uint8_t* clear_dirty);

// The host tier: mask[i] = cache_slots[i] < 0 && store_slots[i] >= 0 (a row to bring in).
void miss_mask(Ctx& ctx, const int64_t* cache_slots, const int64_t* store_slots, int64_t n,
               uint8_t* mask);
// refs[i] = cache_slots[i] if >= 0, else n_cache + store_slots[i] if >= 0, else -1;
// fill_src[i] = store_slots[i] where miss[i] and cache_slots[i] >= 0 (a row to copy into the
// cache), else -1. miss may be null (no fills).
void tier_refs(Ctx& ctx, const int64_t* cache_slots, const int64_t* store_slots,
               const uint8_t* miss, int64_t n, int64_t n_cache, int64_t* refs, int64_t* fill_src);

// scores[slots[i]] = values[i] where slots[i] >= 0 (checkpoint loads).
void set_scores(Ctx& ctx, const TableView& t, const int64_t* slots, const uint64_t* values,
                int64_t n);

// Empties every slot: keys = kEmptyKey, scores = 0, last_step = -1, heads = -1 (values
// untouched).
void clear(Ctx& ctx, const TableView& t);
// p[0:n) = v.
void fill_u8(Ctx& ctx, uint8_t* p, int64_t n, uint8_t v);
// Waits for the work queued on ctx's stream (nothing on the CPU).
void synchronize(Ctx& ctx);
// Copies between the table's device and host memory (or within the device), in stream order;
// returns when done.
void to_host(Ctx& ctx, void* dst, const void* src, size_t bytes);
void to_device(Ctx& ctx, void* dst, const void* src, size_t bytes);

// Compacts the occupied slots in slot order: keys/slots into out arrays (capacity entries);
// returns their number.
int64_t list_occupied(Ctx& ctx, const TableView& t, int64_t* keys, int64_t* slots);

}  // namespace hstu::embed
