// batch_select.h — a batch made of some samples of another batch: how a data-parallel rank takes
// its share of the global batch that every rank assembles identically.
#pragma once

#include <cstdint>
#include <span>

#include "data/batch.h"

namespace hstu {

// out = the samples `samples` (indices into `in`, in this order) of `in`, every per-token and
// per-sample field copied (contextual rows included). Reuses out's buffers.
void select_samples(const SequenceBatch& in, std::span<const int64_t> samples, SequenceBatch& out);

}  // namespace hstu
