// data_parallel.cpp — a rank's share of the global batch and the gradient all-reduce.
#include "train/data_parallel.h"

#include <algorithm>

#include "data/batch_select.h"

namespace hstu {

DataParallel::DataParallel(dist::Comm& comm, bool balanced, double c1, double c2)
    : comm_(comm), balanced_(balanced), c1_(c1), c2_(c2) {}

double DataParallel::cost(int64_t tokens) const {
  const double t = static_cast<double>(tokens);
  return c1_ * t + c2_ * t * t;
}

std::vector<int64_t> DataParallel::samples_of(const SequenceBatch& global, int rank) const {
  const int64_t g = global.batch_size, w = comm_.size();
  const int64_t base = g / w, rem = g % w;
  const int64_t begin = rank * base + std::min<int64_t>(rank, rem);
  const int64_t n = base + (rank < rem ? 1 : 0);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = begin + i;
  return out;
}

const SequenceBatch& DataParallel::take(const SequenceBatch& global) {
  std::vector<std::vector<int64_t>> parts(static_cast<size_t>(comm_.size()));
  for (int r = 0; r < comm_.size(); ++r) parts[static_cast<size_t>(r)] = samples_of(global, r);
  // The work of each rank (the slowest sets the step time).
  double sum = 0, mx = 0;
  for (const auto& p : parts) {
    double w = 0;
    for (const int64_t s : p)
      w +=
          cost(global.offsets[static_cast<size_t>(s) + 1] - global.offsets[static_cast<size_t>(s)]);
    sum += w;
    mx = std::max(mx, w);
  }
  max_work_ = mx;
  mean_work_ = sum / comm_.size();
  const std::vector<int64_t>& mine = parts[static_cast<size_t>(comm_.rank())];
  select_samples(global, mine, local_);
  // Contiguous slices keep the global token positions; interleaved ones (balanced) get disjoint
  // ranges of a stream no other rank uses.
  token_offset_ = balanced_ ? static_cast<int64_t>(comm_.rank()) * global.num_tokens()
                            : (mine.empty() ? 0 : global.offsets[static_cast<size_t>(mine[0])]);
  return local_;
}

}  // namespace hstu
