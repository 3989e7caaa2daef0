// hash_table.cpp — one tier of the dynamic table: storage, growth, admission and the
// find-or-insert sequence over the backend primitives (table_ops.h).
#include "embed/hash_table.h"

#include <algorithm>
#include <bit>
#include <utility>
#include <vector>

#include "core/error.h"
#include "embed/table_math.h"

namespace hstu::embed {

struct HashTable::Storage {
  std::unique_ptr<Arena> meta;          // keys, scores, last_step
  std::unique_ptr<Arena> values;        // values on the device (or host for the CPU backend)
  std::unique_ptr<HostStaging> pinned;  // values of a CUDA store, in page-locked host memory
};

namespace {

int64_t buckets_for(int64_t rows, int bucket_size) {
  const int64_t b = std::max<int64_t>(1, (rows + bucket_size - 1) / bucket_size);
  return static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(b)));
}

}  // namespace

HashTable::HashTable(const HashTableConfig& cfg, Device device) : cfg_(cfg), device_(device) {
  HSTU_CHECK(cfg.bucket_size >= 1 && cfg.bucket_size <= 32 &&
                 std::has_single_bit(static_cast<unsigned>(cfg.bucket_size)),
             "dynamic table '", cfg.name, "': bucket_size must be a power of two in [1, 32], got ",
             cfg.bucket_size);
  HSTU_CHECK(cfg.capacity_rows >= 1, "dynamic table '", cfg.name,
             "': capacity_rows must be >= 1, got ", cfg.capacity_rows);
  HSTU_CHECK(cfg.max_capacity_rows >= cfg.capacity_rows, "dynamic table '", cfg.name,
             "': max_capacity_rows (", cfg.max_capacity_rows, ") is below capacity_rows (",
             cfg.capacity_rows, ")");
  HSTU_CHECK(cfg.max_load_factor > 0 && cfg.max_load_factor <= 1, "dynamic table '", cfg.name,
             "': max_load_factor must be in (0, 1], got ", cfg.max_load_factor);
  max_buckets_ = buckets_for(cfg.max_capacity_rows, cfg.bucket_size);
  // Slots beyond max_capacity_rows's power of two are never used; capacity may round up.
  Ctx ctx;
  ctx.device = device;
  allocate(ctx, buckets_for(cfg.capacity_rows, cfg.bucket_size));
  clear(ctx, view_);
  if (cfg.admit_threshold > 1) {
    sketch_width_ = static_cast<int64_t>(std::bit_ceil(
        static_cast<uint64_t>(std::clamp<int64_t>(cfg.max_capacity_rows, 1024, int64_t{1} << 22))));
    sketch_arena_ = std::make_unique<Arena>(
        device, static_cast<size_t>(kSketchDepth * sketch_width_) * 4 + Arena::kAlign,
        "dynamic_table_sketch:" + cfg.name);
    sketch_ = reinterpret_cast<uint32_t*>(
        sketch_arena_->zeros(DType::kI32, {kSketchDepth * sketch_width_}).data);
  }
  pending_arena_ = std::make_unique<Arena>(device, kPendingWords * 8 + Arena::kAlign,
                                           "dynamic_table_counts:" + cfg.name);
  pending_ = reinterpret_cast<uint64_t*>(pending_arena_->zeros(DType::kI64, {kPendingWords}).data);
  // The clear and zero-fills ran on the default stream: done before any stream's work.
  synchronize(ctx);
}

void HashTable::settle() const {
  if (!has_pending_) return;
  uint64_t h[kPendingWords];
  Ctx ctx;
  ctx.device = device_;
  read_pending(ctx, pending_, h);
  has_pending_ = false;
  counters_.inserts += static_cast<int64_t>(h[kPendingInserted]);
  counters_.evictions += static_cast<int64_t>(h[kPendingEvicted]);
  counters_.rejections += static_cast<int64_t>(h[kPendingNoVictim]);
  counters_.size += static_cast<int64_t>(h[kPendingInserted]) -
                    static_cast<int64_t>(h[kPendingEvicted]) -
                    static_cast<int64_t>(h[kPendingErased]);
}

HashTable::~HashTable() = default;

void HashTable::allocate(Ctx&, int64_t num_buckets) {
  auto st = std::make_unique<Storage>();
  const int64_t cap = num_buckets * cfg_.bucket_size;
  st->meta = std::make_unique<Arena>(
      device_,
      static_cast<size_t>(cap) * 24 + static_cast<size_t>(num_buckets) * 4 + 5 * Arena::kAlign,
      "dynamic_table:" + cfg_.name);
  TableView v;
  v.keys = st->meta->alloc(DType::kI64, {cap}).as<int64_t>();
  v.scores = reinterpret_cast<uint64_t*>(st->meta->alloc(DType::kI64, {cap}).data);
  v.last_step = st->meta->alloc(DType::kI64, {cap}).as<int64_t>();
  v.heads = st->meta->alloc(DType::kI32, {num_buckets}).as<int32_t>();
  const size_t vbytes = static_cast<size_t>(cap * cfg_.row_width) * sizeof(float);
  if (cfg_.values_on_host && device_ == Device::kCUDA) {
    st->pinned = std::make_unique<HostStaging>(device_, std::max<size_t>(vbytes, 4));
    v.values = reinterpret_cast<float*>(st->pinned->data());
  } else {
    st->values = std::make_unique<Arena>(device_, vbytes + Arena::kAlign,
                                         "dynamic_table_values:" + cfg_.name);
    v.values =
        st->values->alloc(DType::kF32, {std::max<int64_t>(1, cap * cfg_.row_width)}).as<float>();
  }
  v.num_buckets = num_buckets;
  v.bucket_size = cfg_.bucket_size;
  v.row_width = cfg_.row_width;
  v.dim = cfg_.dim;
  v.bf16 = cfg_.bf16;
  v.state_off = embedding_words(cfg_.dim, cfg_.bf16);
  storage_ = std::move(st);
  view_ = v;
  counters_.capacity = cap;
}

void HashTable::ensure_work(int64_t n) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * 32 + 8 * Arena::kAlign;
  if (work_ && work_->capacity() >= bytes) return;
  work_ = std::make_unique<Arena>(device_, std::max<size_t>(bytes * 2, size_t{1} << 20),
                                  "dynamic_table_work:" + cfg_.name);
}

template <typename T>
T* HashTable::scratch(int64_t n) {
  return static_cast<T*>(
      work_->alloc(DType::kU8, {std::max<int64_t>(n, 1) * static_cast<int64_t>(sizeof(T))}).data);
}

void HashTable::find(Ctx& ctx, const int64_t* keys, int64_t n, int64_t* slots) {
  embed::find(ctx, view_, keys, n, slots);
}

void HashTable::grow(Ctx& ctx) {
  HSTU_CHECK(view_.num_buckets < max_buckets_, "dynamic table '", cfg_.name,
             "': cannot grow past max_capacity_rows = ", cfg_.max_capacity_rows);
  std::unique_ptr<Storage> old = std::move(storage_);
  const TableView from = view_;
  allocate(ctx, from.num_buckets * 2);
  clear(ctx, view_);
  rehash_double(ctx, from, view_);
  ++counters_.grows;
}

void HashTable::find_or_insert(Ctx& ctx, const int64_t* keys, const int32_t* counts, int64_t n,
                               int64_t step, int64_t* slots, int64_t* evicted_keys,
                               bool admit_all) {
  if (n == 0) return;
  ensure_work(n);
  struct Reset {
    Arena* a;
    ~Reset() { a->reset(0); }
  } reset{work_.get()};
  uint8_t* mask = scratch<uint8_t>(n);
  uint8_t* status = scratch<uint8_t>(n);
  int64_t* evicted = evicted_keys ? evicted_keys : scratch<int64_t>(n);
  const int64_t grows_before = counters_.grows;
  const bool sketch = cfg_.admit_threshold > 1 && !admit_all;
  // The key universe fits (set_key_universe): no growth and no full bucket can occur.
  const bool fits = universe_fits_ && !admit_all;
  // At max capacity without a sketch nothing needs the admitted count: insert counts itself.
  const bool need_counts = !fits && (sketch || view_.num_buckets < max_buckets_);
  AdmitCounts ad;
  if (!need_counts) {  // the steady state: find, touch and admit in one pass
    find_touch_admit(ctx, view_, keys, counts, n, step, cfg_.eviction, slots, mask);
  } else {
    embed::find(ctx, view_, keys, n, slots);
    touch(ctx, view_, slots, counts, n, step, cfg_.eviction);
    ad = admit(ctx, sketch ? sketch_ : nullptr, kSketchDepth, sketch_width_, keys, counts, slots, n,
               admit_all ? 0 : cfg_.admit_threshold, mask, need_counts);
  }
  if (need_counts) {
    counters_.rejections += ad.rejected;
    if (ad.admitted == 0) return;
  }
  bool grew = false;
  while (need_counts &&
         static_cast<double>(size() + ad.admitted) >
             cfg_.max_load_factor * static_cast<double>(capacity()) &&
         view_.num_buckets < max_buckets_) {
    grow(ctx);
    grew = true;
  }
  // The keys found before the growth moved with the rehash: look them up again.
  if (grew) embed::find(ctx, view_, keys, n, slots);
  for (;;) {
    const bool at_max = view_.num_buckets >= max_buckets_;
    const bool evict = at_max && cfg_.eviction != Eviction::kNone;
    if (evict || fits) {
      // With eviction at max capacity (or a fitting universe) no key finds its bucket full
      // (kFull), so nothing on the host waits for the counts: they stay on the device until
      // counters() reads them.
      insert(ctx, view_, keys, counts, n, step, cfg_.eviction, evict, mask, slots, status, evicted,
             pending_);
      has_pending_ = true;
      init_rows(ctx, view_, keys, slots, status, n, cfg_.table_seed, cfg_.init_std);
      break;
    }
    const InsertCounts c = insert(ctx, view_, keys, counts, n, step, cfg_.eviction, false, mask,
                                  slots, status, evicted);
    init_rows(ctx, view_, keys, slots, status, n, cfg_.table_seed, cfg_.init_std);
    counters_.inserts += c.inserted;
    counters_.evictions += c.evicted;
    counters_.rejections += c.no_victim;
    counters_.size += c.inserted - c.evicted;
    if (c.full == 0) break;
    HSTU_CHECK(!at_max, "dynamic table '", cfg_.name, "' is full: ", c.full,
               " keys found their bucket full at capacity ", capacity(),
               " rows (max_capacity_rows = ", cfg_.max_capacity_rows,
               ") and eviction = none; raise max_capacity_rows or set eviction to lru or lfu");
    grow(ctx);
    // Keys placed before the growth moved with the rehash: look every key up again.
    embed::find(ctx, view_, keys, n, slots);
  }
  // A growth or an import (keys outside the universe, perhaps) changes whether it fits.
  if (!universe_.empty() && (grew || admit_all || counters_.grows != grows_before))
    check_universe(ctx);
}

void HashTable::set_key_universe(Ctx& ctx, std::vector<int64_t> keys) {
  universe_ = std::move(keys);
  check_universe(ctx);
}

void HashTable::check_universe(Ctx& ctx) {
  universe_fits_ = false;
  if (universe_.empty() || cfg_.admit_threshold > 1) return;
  const int64_t cap = capacity(), nb = view_.num_buckets;
  std::vector<int64_t> present(static_cast<size_t>(cap));
  to_host(ctx, present.data(), view_.keys, static_cast<size_t>(cap) * sizeof(int64_t));
  std::vector<int32_t> fill(static_cast<size_t>(nb), 0);
  std::vector<int64_t> held;
  held.reserve(static_cast<size_t>(cap));
  for (const int64_t k : present) {
    if (k == kEmptyKey) continue;
    held.push_back(k);
    ++fill[static_cast<size_t>(bucket_of(k, nb))];
  }
  std::sort(held.begin(), held.end());
  int64_t total = static_cast<int64_t>(held.size());
  for (const int64_t k : universe_) {
    if (k == kEmptyKey || std::binary_search(held.begin(), held.end(), k)) continue;
    ++total;
    ++fill[static_cast<size_t>(bucket_of(k, nb))];
  }
  if (static_cast<double>(total) > cfg_.max_load_factor * static_cast<double>(cap)) return;
  for (const int32_t f : fill)
    if (f > cfg_.bucket_size) return;
  universe_fits_ = true;
}

void HashTable::insert_no_grow(Ctx& ctx, const int64_t* keys, int64_t n, int64_t step,
                               uint8_t* mask, int64_t* slots, int64_t* evicted_keys) {
  if (n == 0) return;
  ensure_work(n);
  uint8_t* status = scratch<uint8_t>(n);
  int32_t* ones = scratch<int32_t>(n);  // counts are unused by LRU
  insert(ctx, view_, keys, ones, n, step, Eviction::kLru, true, mask, slots, status, evicted_keys,
         pending_);
  has_pending_ = true;
  work_->reset(0);
}

int64_t HashTable::erase(Ctx& ctx, const int64_t* keys, int64_t n) {
  settle();
  const int64_t e = embed::erase(ctx, view_, keys, n);
  counters_.size -= e;
  return e;
}

void HashTable::erase_async(Ctx& ctx, const int64_t* keys, int64_t n) {
  if (n == 0) return;
  embed::erase(ctx, view_, keys, n, pending_);
  has_pending_ = true;
}

}  // namespace hstu::embed
