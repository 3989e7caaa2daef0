// batch_tensors.cpp — allocation and upload of jagged batch arrays.
#include "model/batch_tensors.h"

#include <algorithm>
#include <vector>

namespace hstu {

BatchTensors allocate_batch_tensors(Arena& arena, const BatchCapacity& cap) {
  BatchTensors bt;
  const int64_t t = std::max<int64_t>(cap.max_tokens, 1);
  bt.offsets = arena.alloc(DType::kI32, {cap.max_batch + 1});
  bt.item_ids = arena.alloc(DType::kI32, {t});
  bt.positions = arena.alloc(DType::kI32, {t});
  bt.target_ids = arena.alloc(DType::kI32, {t});
  bt.ts_key = arena.alloc(DType::kI64, {t});
  bt.ts_query = arena.alloc(DType::kI64, {t});
  bt.neg_ids = arena.alloc(DType::kI32, {t, std::max<int64_t>(cap.num_negatives, 1)});
  return bt;
}

namespace {
template <typename T>
void put(const Tensor& dst, const std::vector<T>& src, int64_t n, const char* what) {
  HSTU_CHECK(static_cast<int64_t>(src.size()) >= n, "batch field ", what, " has ", src.size(),
             " values, expected ", n);
  HSTU_CHECK(n <= dst.shape[0], "batch field ", what, " has ", n, " rows, capacity ", dst.shape[0]);
  copy_bytes(dst.data, dst.device, src.data(), Device::kCPU, static_cast<size_t>(n) * sizeof(T));
}
}  // namespace

void upload_batch(const SequenceBatch& b, const BatchCapacity& cap, BatchTensors& bt) {
  const int64_t n = b.num_tokens();
  HSTU_CHECK(b.batch_size <= cap.max_batch && n <= cap.max_tokens, "batch of ", b.batch_size,
             " samples / ", n, " tokens exceeds the planned ", cap.max_batch, " / ", cap.max_tokens);
  bt.batch_size = b.batch_size;
  bt.num_tokens = static_cast<int32_t>(n);
  bt.max_seqlen = b.max_seqlen;
  bt.host = &b;
  put(bt.offsets, b.offsets, b.batch_size + 1, "offsets");
  put(bt.item_ids, b.item_ids, n, "item_ids");
  std::vector<int32_t>& pos = bt.host_positions;  // reused: no allocation once at capacity
  pos.resize(static_cast<size_t>(n));
  const int32_t last = static_cast<int32_t>(std::max<int64_t>(cap.num_positions - 1, 0));
  for (int32_t s = 0; s < b.batch_size; ++s)
    for (int32_t t = b.offsets[s]; t < b.offsets[s + 1]; ++t)
      pos[static_cast<size_t>(t)] = std::min(t - b.offsets[s], last);
  put(bt.positions, pos, n, "positions");
  if (!b.target_ids.empty()) put(bt.target_ids, b.target_ids, n, "target_ids");
  if (!b.timestamps.empty()) put(bt.ts_key, b.timestamps, n, "timestamps");
  if (!b.query_timestamps.empty()) put(bt.ts_query, b.query_timestamps, n, "query_timestamps");
}

}  // namespace hstu
