// sharding.h — which rank owns each row of a row-wise sharded embedding table, the per-rank
// shard sizes of the memory plan, and the per-step id deduplication on the host.
//
// A model-parallel table of V rows is split over W ranks by an owner function:
//   modulo: owner(id) = id mod W, local row = id / W (recsys-examples' "roundrobin");
//   hash:   owner(id) = murmur3_fmix64(id) mod W ("hash_roundrobin"); a rank's local rows are the
//           ids it owns in ascending order, found through a lookup of V i32 built once.
// Either way every id 0..V-1 has exactly one owner and one local row there, and a rank's owned
// ids are ascending in its local rows. Nothing here needs a communicator, so `hstu plan
// --world-size W` can print the shard sizes of any W (describe_shards).
//
// IdDeduper turns one step's ids (input, target and negative ids, several i32 arrays) into the
// sorted unique ids U and rewrites every id as its index in U, so the unchanged model can run on
// a compact window table of U rows. Id 0 (padding, and "no target" in the sampled softmax) is
// always kept as U[0] = 0, so index 0 still means id 0 after the remap.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/hash.h"

namespace hstu::dist {

enum class OwnerKind { kModulo, kHash };

// "modulo" | "hash"; errors name `what` (the config field) and the accepted names.
OwnerKind parse_owner(const std::string& name, const std::string& what = "owner function");
const char* owner_name(OwnerKind k);

// The owner of a dynamic table's 64-bit key among `world` ranks (train/dynamic_shard.h): the
// same rule on the key's bits, so for keys >= 0 (every key hstu makes) it equals
// RowSharding::owner(key): modulo: key mod W; hash: murmur3_fmix64(key) mod W. Key 0 (padding)
// is always rank 0's.
inline int key_owner(int64_t key, int world, OwnerKind kind) {
  const uint64_t k = static_cast<uint64_t>(key), w = static_cast<uint64_t>(world);
  return static_cast<int>(kind == OwnerKind::kModulo ? k % w : murmur3_fmix64(k) % w);
}

// The row placement of a table of `rows` ids over `world` ranks. Ids are in [0, rows) and fit
// int32 (the model's ids are i32).
class RowSharding {
 public:
  RowSharding(int64_t rows, int world, OwnerKind kind);

  int64_t rows() const { return rows_; }
  int world() const { return world_; }
  OwnerKind kind() const { return kind_; }

  int owner(int64_t id) const {
    return kind_ == OwnerKind::kModulo
               ? static_cast<int>(id % world_)
               : static_cast<int>(murmur3_fmix64(static_cast<uint64_t>(id)) %
                                  static_cast<uint64_t>(world_));
  }
  // The row of `id` in its owner's shard.
  int64_t local_row(int64_t id) const {
    return kind_ == OwnerKind::kModulo ? id / world_ : local_[static_cast<size_t>(id)];
  }
  // Rows that rank r owns.
  int64_t shard_rows(int r) const { return counts_[static_cast<size_t>(r)]; }
  int64_t max_shard_rows() const;
  // The ids rank r owns, ascending (= its local rows in order). O(V) for hash.
  std::vector<int64_t> owned_ids(int r) const;

 private:
  int64_t rows_;
  int world_;
  OwnerKind kind_;
  std::vector<int64_t> counts_;  // [W] rows per rank
  std::vector<int32_t> local_;   // [V] hash only: the local row of each id
};

// One rank's share of a sharded table for the memory plan.
struct ShardSize {
  int rank = 0;
  int64_t rows = 0;
  int64_t table_bytes = 0;   // weight + grad + touched/row list + optimiser state (the shard)
  int64_t window_bytes = 0;  // the step's window table and exchange buffers (0 without max_unique)
};

// Bytes EmbeddingTable::allocate reserves for a table of rows x dim f32 with `optimizer`
// ("adam" | "dense_adam" | "row_wise_adagrad" | "sgd"), the same arithmetic as model/params.cpp.
int64_t embedding_table_bytes(int64_t rows, int64_t dim, const std::string& optimizer);

// Per-rank shard sizes of a [rows, dim] table over `world` ranks; max_unique > 0 adds the window
// and exchange buffers ShardedTable allocates for that many unique ids per step. No communicator.
std::vector<ShardSize> describe_shards(int64_t rows, int64_t dim, int world,
                                       const std::string& optimizer, OwnerKind owner,
                                       int64_t max_unique = 0);
// Device bytes of ShardedTable's step buffers on a rank owning `shard_rows` rows: the window
// table [max_unique, dim] (+ grad, touched) and the exchange buffers (ids and rows to send, and
// to receive from up to W ranks, each at most min(max_unique, shard_rows) rows).
int64_t window_bytes(int64_t max_unique, int64_t dim, int world, int64_t shard_rows);
// The same as printable lines ("  rank 0: 12345 rows, 12.3 MiB (+ window 1.2 MiB)").
std::string format_shards(const std::vector<ShardSize>& shards);

// Deduplicates and remaps a step's ids for a table of `rows` ids. Holds a V-entry i32 slot array
// (4 bytes per row of host memory), so a step costs O(ids + U log U), not O(V).
class IdDeduper {
 public:
  explicit IdDeduper(int64_t rows);

  // Collects the unique ids of all spans plus id 0, sorted ascending, into unique() and replaces
  // every id in the spans by its index there (in place). Ids must be in [0, rows) (error naming
  // the span and position otherwise). Deterministic: a function of the ids only.
  std::span<const int32_t> run(std::span<const std::span<int32_t>> ids);
  std::span<const int32_t> unique() const { return unique_; }

 private:
  std::vector<int32_t> slot_;  // [V]: -1, or the id's index in unique_ during run()
  std::vector<int32_t> unique_;
};

}  // namespace hstu::dist
