// batch_tensors.cpp — allocation and upload of jagged batch arrays.
#include "model/batch_tensors.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/checked.h"

namespace hstu {

BatchTensors allocate_batch_tensors(Arena& arena, const BatchCapacity& cap) {
  BatchTensors bt;
  const int64_t t = std::max<int64_t>(cap.max_tokens, 1);
  bt.offsets = arena.alloc(DType::kI32, {checked_add(cap.max_batch, 1, "batch offsets")});
  bt.item_ids = arena.alloc(DType::kI32, {t});
  bt.positions = arena.alloc(DType::kI32, {t});
  bt.target_ids = arena.alloc(DType::kI32, {t});
  bt.ts_key = arena.alloc(DType::kI64, {t});
  bt.ts_query = arena.alloc(DType::kI64, {t});
  bt.neg_ids = arena.alloc(DType::kI32, {t, std::max<int64_t>(cap.num_negatives, 1)});
  return bt;
}

Tensor negatives_view(const BatchTensors& bt) {
  const int64_t t = bt.num_tokens, r = bt.num_negatives, cap = bt.neg_ids.numel();
  HSTU_CHECK(r >= 1 && t * r <= cap, "negatives of ", t, " tokens x ", r,
             " exceed the planned buffer of ", cap, " ids (RetrievalArgs.num_negatives)");
  return bt.neg_ids.reshape({cap}).rows(0, t * r).reshape({t, r});
}

namespace {

// Copies n values of a batch field into dst: directly (synchronous) or through the staging
// buffer (asynchronous on the stream).
class Uploader {
 public:
  Uploader(HostStaging* staging, void* stream) : staging_(staging), stream_(stream) {}

  // Host memory for n values of T: staging space, or `fallback` resized.
  template <typename T>
  T* host_buffer(std::vector<T>& fallback, int64_t n) {
    if (!staging_) {
      fallback.resize(static_cast<size_t>(n));
      return fallback.data();
    }
    return static_cast<T*>(reserve(static_cast<size_t>(n) * sizeof(T)));
  }

  template <typename T>
  void put(const Tensor& dst, const T* src, int64_t n, const char* what) {
    HSTU_CHECK(n <= dst.shape[0], "batch field ", what, " has ", n, " rows, capacity ",
               dst.shape[0]);
    const size_t bytes = static_cast<size_t>(n) * sizeof(T);
    if (!staging_) {
      copy_bytes(dst.data, dst.device, src, Device::kCPU, bytes);
      return;
    }
    const bool staged = reinterpret_cast<const char*>(src) >= staging_->data() &&
                        reinterpret_cast<const char*>(src) < staging_->data() + staging_->size();
    void* host = staged ? const_cast<T*>(src) : reserve(bytes);
    if (!staged) std::memcpy(host, src, bytes);
    copy_bytes_async(dst.data, dst.device, host, Device::kCPU, bytes, stream_);
  }
  template <typename T>
  void put(const Tensor& dst, const std::vector<T>& src, int64_t n, const char* what) {
    HSTU_CHECK(static_cast<int64_t>(src.size()) >= n, "batch field ", what, " has ", src.size(),
               " values, expected ", n);
    put(dst, src.data(), n, what);
  }

 private:
  void* reserve(size_t bytes) {
    const size_t at = (used_ + 15) / 16 * 16;
    HSTU_CHECK(at + bytes <= staging_->size(), "upload staging buffer of ", staging_->size(),
               " bytes is too small");
    used_ = at + bytes;
    return staging_->data() + at;
  }

  HostStaging* staging_;
  void* stream_;
  size_t used_ = 0;
};

}  // namespace

size_t upload_staging_bytes(const BatchCapacity& cap) {
  const int64_t t = std::max<int64_t>(cap.max_tokens, 1);
  const int64_t offsets =
      checked_mul(checked_add(cap.max_batch, 1, "staged offsets"), 4, "staged offset bytes");
  const int64_t tokens = checked_mul(t, 3 * 4 + 2 * 8, "staged token bytes");
  return static_cast<size_t>(
      checked_add(16 * 8, checked_add(offsets, tokens, "staging bytes"), "staging bytes"));
}

void upload_batch(const SequenceBatch& b, const BatchCapacity& cap, BatchTensors& bt,
                  HostStaging* staging, void* stream) {
  const int64_t n = b.num_tokens();
  HSTU_CHECK(b.batch_size <= cap.max_batch && n <= cap.max_tokens, "batch of ", b.batch_size,
             " samples / ", n, " tokens exceeds the planned ", cap.max_batch, " / ",
             cap.max_tokens);
  bt.batch_size = b.batch_size;
  bt.num_tokens = checked_i32(n, "tokens in a batch");
  bt.max_seqlen = b.max_seqlen;
  bt.num_negatives = std::max<int64_t>(cap.num_negatives, 1);
  bt.host = &b;
  if (staging) staging->wait();  // its previous copies must have read it
  Uploader up(staging, stream);
  up.put(bt.offsets, b.offsets, b.batch_size + 1, "offsets");
  up.put(bt.item_ids, b.item_ids, n, "item_ids");
  int32_t* pos = up.host_buffer(bt.host_positions, n);  // reused: no allocation at capacity
  const int32_t last = static_cast<int32_t>(std::max<int64_t>(cap.num_positions - 1, 0));
  for (int32_t s = 0; s < b.batch_size; ++s)
    for (int32_t t = b.offsets[s]; t < b.offsets[s + 1]; ++t)
      pos[t] = std::min(t - b.offsets[s], last);
  up.put(bt.positions, pos, n, "positions");
  if (!b.target_ids.empty()) up.put(bt.target_ids, b.target_ids, n, "target_ids");
  if (!b.timestamps.empty()) up.put(bt.ts_key, b.timestamps, n, "timestamps");
  if (!b.query_timestamps.empty()) up.put(bt.ts_query, b.query_timestamps, n, "query_timestamps");
  if (staging) staging->record(stream);
}

}  // namespace hstu
