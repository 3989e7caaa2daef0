// cuda/hash_dedupe.h — dedupe_many on CUDA without sorting the lookups (CUDA builds only;
// private to embed/cuda/): each job's lookups go into a per-call open-addressing set, the
// distinct keys are ordered by one pass into buckets of their key range plus a rank within the
// bucket, and the sorted positions by placing each lookup in its key's segment and sorting the
// segments. Results are exactly table_ops.h's dedupe_many (and dedupe); the caller falls back to
// the radix sort where this path declines.
#pragma once

#include <cstdint>

#include "core/context.h"
#include "embed/table_ops.h"

namespace hstu::embed::cuda {

// dedupe_many's results (u[j], first_key[j] on the host) for jobs [0, num_jobs) (each n >= 1),
// or false with no result when the key distribution defeats the bucketing (a bucket of more
// than 1024 distinct keys), a job has more than 2^20 lookups, or HSTU_DEDUPE_SORT=1; the outputs
// are then partly written and the caller runs the sort path. Synchronises the stream once.
bool hash_dedupe_many(Ctx& ctx, const DedupeJob* jobs, int num_jobs, int64_t* u,
                      int64_t* first_key);

// How many calls of hash_dedupe_many found a bucket too large after launching (the process's
// count; tests use it to see which path ran).
int64_t hash_dedupe_fallbacks();

}  // namespace hstu::embed::cuda
