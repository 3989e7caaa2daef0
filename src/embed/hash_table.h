// hash_table.h — one tier of a dynamic embedding table: a bucketed hash table of int64 keys with
// per-slot scores and value rows (embedding | optimiser state), its growth by doubling, admission
// sketch and counters. DynamicTable (dynamic_table.h) is the public face: it owns one HashTable
// (all rows on the device) or two (a host-memory store with every row and a device cache).
//
// All batch arguments are arrays on the table's device; keys handed to find_or_insert are
// distinct (DynamicTable::dedupe makes them so, ascending) and handled in the given order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/context.h"
#include "core/host_staging.h"
#include "embed/table_ops.h"

namespace hstu::embed {

struct HashTableConfig {
  std::string name;  // for errors
  int64_t capacity_rows = 0, max_capacity_rows = 0;
  int bucket_size = 32;
  double max_load_factor = 0.75;
  Eviction eviction = Eviction::kLru;
  int64_t admit_threshold = 0;     // <= 1: every key is admitted
  int64_t dim = 0, row_width = 0;  // row_width: 4-byte words per row (TableView)
  bool bf16 = false;               // bf16 embedding values (table_math.h's row layout)
  uint64_t table_seed = 0;
  float init_std = 0.02f;
  bool values_on_host = false;  // CUDA: values in page-locked host memory (the store of a tier)
};

struct HashTableCounters {
  int64_t inserts = 0, evictions = 0, rejections = 0, size = 0, capacity = 0, grows = 0;
};

class HashTable {
 public:
  HashTable(const HashTableConfig& cfg, Device device);
  ~HashTable();

  const TableView& view() const { return view_; }
  const HashTableConfig& config() const { return cfg_; }
  // Counters (and size) settle the counts the device accumulated since the last read first: a
  // synchronisation when any are pending.
  const HashTableCounters& counters() const {
    settle();
    return counters_;
  }
  Device device() const { return device_; }
  int64_t size() const { return counters().size; }
  int64_t capacity() const { return view_.capacity(); }

  // slots[i] = slot of keys[i], or -1.
  void find(Ctx& ctx, const int64_t* keys, int64_t n, int64_t* slots);
  // Finds keys[0:n) (distinct), updates the scores of those present, admits and
  // inserts the missing ones (growing, then evicting at max capacity), initialising their rows.
  // slots[i] = the key's slot, -1 if not admitted or no slot could be freed this step.
  // evicted_keys (device i64 [n], optional) receives the keys this call evicted (kEmptyKey
  // elsewhere). Slots are valid until the next call that inserts, erases or grows.
  // admit_all skips admission (imports).
  void find_or_insert(Ctx& ctx, const int64_t* keys, const int32_t* counts, int64_t n, int64_t step,
                      int64_t* slots, int64_t* evicted_keys, bool admit_all = false);
  // Inserts keys whose mask[i] is set, all absent, never growing (the cache of a tier): slots,
  // evicted_keys as above; mask is consumed. The counts stay on the device (counters() settles
  // them), so this does not synchronise.
  void insert_no_grow(Ctx& ctx, const int64_t* keys, int64_t n, int64_t step, uint8_t* mask,
                      int64_t* slots, int64_t* evicted_keys);
  int64_t erase(Ctx& ctx, const int64_t* keys, int64_t n);
  // erase without the count read-back (counted on the device; counters() settles it).
  void erase_async(Ctx& ctx, const int64_t* keys, int64_t n);
  // Doubles the buckets (rehash); throws at max capacity.
  void grow(Ctx& ctx);
  // Whether find_or_insert (without admit_all) may wait for the device: the table can still grow
  // (its growth is decided on the host from the admitted count), admission keeps a sketch, or
  // eviction is off (a full bucket is reported to the host). Otherwise it never synchronises.
  // Also never while the key universe fits (set_key_universe).
  bool insert_waits() const {
    return !universe_fits_ && (cfg_.admit_threshold > 1 || view_.num_buckets < max_buckets_ ||
                               cfg_.eviction == Eviction::kNone);
  }
  // Declares every key find_or_insert will be given (a catalogue; distinct). While they fit the
  // table as it is — each bucket holds its present keys and the universe's others, and all of
  // them stay within the load factor — no find_or_insert can grow the table or find a bucket
  // full, so it inserts with the counts on the device and never waits (an admission sketch
  // excepted). Checked now and after each growth or import (one read of the keys present).
  void set_key_universe(Ctx& ctx, std::vector<int64_t> keys);
  bool universe_fits() const { return universe_fits_; }

 private:
  struct Storage;
  void allocate(Ctx& ctx, int64_t num_buckets);
  // Makes the work arena hold the scratch arrays of a call over n keys (at most 32 B per key).
  void ensure_work(int64_t n);
  // A scratch array of n elements of T on the device (valid until the call returns).
  template <typename T>
  T* scratch(int64_t n);

  HashTableConfig cfg_;
  Device device_;
  int64_t max_buckets_ = 0;
  std::unique_ptr<Storage> storage_;
  TableView view_;
  std::unique_ptr<Arena> sketch_arena_;
  uint32_t* sketch_ = nullptr;
  int64_t sketch_width_ = 0;
  static constexpr int kSketchDepth = 4;
  std::unique_ptr<Arena> work_;
  // Counts of inserts / evictions / erases accumulated on the device (PendingWord order), settled
  // into counters_ by settle() (which waits for the device).
  void settle() const;
  std::unique_ptr<Arena> pending_arena_;
  uint64_t* pending_ = nullptr;
  mutable bool has_pending_ = false;
  mutable HashTableCounters counters_;
  // set_key_universe: the keys, and whether they fit the current table.
  void check_universe(Ctx& ctx);
  std::vector<int64_t> universe_;
  bool universe_fits_ = false;
};

}  // namespace hstu::embed
