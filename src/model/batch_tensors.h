// batch_tensors.h — a jagged batch on the compute device: the index/time arrays the ops read.
//
// Sized once for the largest batch (max tokens) and reused: uploading a batch copies into the
// prefix of each buffer (consumers take .rows(0, num_tokens)), so the step loop never allocates.
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/host_staging.h"
#include "core/tensor.h"
#include "data/batch.h"

namespace hstu {

struct BatchTensors {
  int32_t batch_size = 0, num_tokens = 0, max_seqlen = 0;
  // Where these tokens start in a data-parallel step's global batch (0 otherwise). Dropout of a
  // [T, width] tensor then starts at Philox counter dropout_offset(width): disjoint between
  // ranks, and, when token_offset * width is a multiple of 4, exactly the masks one rank with the
  // whole batch draws (a counter holds the words of 4 consecutive elements).
  int64_t token_offset = 0;
  uint64_t dropout_offset(int64_t width) const {
    return static_cast<uint64_t>((token_offset * width + 3) / 4);
  }
  Tensor offsets;     // i32 [B+1]
  Tensor item_ids;    // i32 [T]
  Tensor positions;   // i32 [T] position of each token in its sequence (clamped to the table)
  Tensor target_ids;  // i32 [T] next item per position (0 = unsupervised)
  Tensor ts_key;      // i64 [T] own timestamp
  Tensor ts_query;    // i64 [T] timestamp of the predicted item
  Tensor neg_ids;     // i32 capacity [T_max, R_max]; the step's negatives fill a [T, R] prefix
  // R of this batch: upload_batch sets the capacity's count; a step with RetrievalArgs
  // .num_negatives = -1 sets the batch's query count (data/negatives.h: negatives_per_query).
  int64_t num_negatives = 0;
  // Ranking only (left empty by allocate_batch_tensors, so retrieval never sets them): the
  // attention's contextual prefix and target counts per sample, i32 [B] (capacity max_batch).
  Tensor num_contexts;
  Tensor num_targets;
  // Host copies the CPU side needs (sequence boundaries for eval bookkeeping).
  const SequenceBatch* host = nullptr;
  std::vector<int32_t> host_positions;  // [T] host staging of `positions`
};

// The batch's negatives, i32 [num_tokens, num_negatives]: the first T * R elements of neg_ids,
// row-major (a batch's R may be smaller than the capacity's).
Tensor negatives_view(const BatchTensors& bt);

// Capacity of the buffers of a BatchTensors.
struct BatchCapacity {
  int64_t max_batch = 0, max_tokens = 0, num_negatives = 0, num_positions = 1;
};

// Allocates the buffers from `arena` (may be a measuring arena).
BatchTensors allocate_batch_tensors(Arena& arena, const BatchCapacity& cap);

// Copies `batch` into `bt` (device or host) and narrows the views to its size. Positions are
// 0-based within each sequence, clamped to cap.num_positions - 1. Without `staging` the copies
// are synchronous; with it (at least upload_staging_bytes(cap)) the batch is packed into the
// staging buffer and copied asynchronously on `stream`, so the call returns without waiting for
// the device (it waits only for the staging buffer's previous copies).
void upload_batch(const SequenceBatch& batch, const BatchCapacity& cap, BatchTensors& bt,
                  HostStaging* staging = nullptr, void* stream = nullptr);
size_t upload_staging_bytes(const BatchCapacity& cap);

}  // namespace hstu
