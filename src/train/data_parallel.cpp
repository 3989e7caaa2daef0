// data_parallel.cpp — a rank's share of the global batch (plain or balanced).
#include "train/data_parallel.h"

#include "data/batch_select.h"
#include "dist/balance.h"

namespace hstu {

DataParallel::DataParallel(dist::Comm& comm, bool balanced, CostFn cost)
    : comm_(comm), balanced_(balanced), cost_(std::move(cost)) {}

const SequenceBatch& DataParallel::take(const SequenceBatch& global) {
  const int64_t n = global.batch_size;
  costs_.resize(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s)
    costs_[static_cast<size_t>(s)] =
        cost_(global.offsets[static_cast<size_t>(s) + 1] - global.offsets[static_cast<size_t>(s)]);
  // Every rank computes the same partition from the same costs: no communication.
  const dist::Partition plain = dist::contiguous_partition(n, comm_.size());
  const dist::Partition parts = balanced_ ? dist::kk_partition(costs_, comm_.size()) : plain;
  const double plain_imb = dist::partition_work(costs_, plain).imbalance();
  sum_plain_ += plain_imb;
  sum_used_ += balanced_ ? dist::partition_work(costs_, parts).imbalance() : plain_imb;
  ++steps_;
  const std::vector<int64_t>& mine = parts[static_cast<size_t>(comm_.rank())];
  select_samples(global, mine, local_);
  token_offset_ = balanced_ ? static_cast<int64_t>(comm_.rank()) * global.num_tokens()
                            : (mine.empty() ? 0 : global.offsets[static_cast<size_t>(mine[0])]);
  return local_;
}

}  // namespace hstu
