// balance.h — balanced batching (TrainerArgs.enable_balanced_shuffler): split a global batch of
// samples over W data-parallel ranks so that every rank gets the same NUMBER of samples and
// nearly the same WORK, since a synchronous step waits for its slowest rank.
//
// The work of a sample is an estimate from its token count (model/flops.h: sample_cost, linear
// GEMM terms plus the quadratic attention term). The split is the equal-count k-way
// Karmarkar-Karp differencing method that recsys-examples' batch shuffler uses
// (../shared/reference/distributed.md §6):
//   1. sort the samples by (cost, index) ascending; position p of that order is "item p";
//   2. cut the sorted items into runs of k consecutive items; each run is a state of k singleton
//      sets, ordered by sum;
//   3. keep the states in a heap, largest spread (max set sum - min set sum) first;
//   4. pop the two states of largest spread, A and B (both ordered by sum ascending), and merge
//      them into C with C_i = A_i + B_{k-1-i} (A's smallest set with B's largest), order C by
//      sum, push it back; until one state remains: its k sets are the ranks' samples.
// Every tie (equal costs, equal set sums, equal spreads) is broken by positions in the sorted
// order of step 1, never by memory addresses or hashing, so:
//   - the result is a pure function of the cost vector: every rank that runs it on the same
//     global batch gets the same partition, with no communication;
//   - it depends on the sample indices only through the order of equal costs (lower index first):
//     permuting the input permutes the output, and the per-rank sums are the same for any
//     permutation of the costs.
// Guarantee (tested): merging keeps the spread of C at most max(spread A, spread B), so the final
// max - min rank work is at most the largest spread of a run of step 2, which is at most
// max(cost) - min(cost). With N = 2k (two samples per rank) the result is optimal. O(N log N)
// time, O(N) memory: sets are linked lists, so a merge costs O(k log k) whatever their sizes.
//
// Rank r's samples are returned in ascending index order, so each rank's batch is a stable
// sub-sequence of the global batch. Rank r gets the set of rank r in the final state's order by
// (sum, first position) ascending.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hstu::dist {

// rank -> the global-batch indices of its samples, ascending.
using Partition = std::vector<std::vector<int64_t>>;

// The Karmarkar-Karp equal-count partition of costs [N] (finite, >= 0) into k >= 1 sets. When N
// is not a multiple of k the input is padded with zero-cost phantom samples (indices >= N) up to
// the next multiple, which are dropped from the result: ranks then get floor(N/k) or ceil(N/k)
// samples. N = 0 gives k empty sets.
Partition kk_partition(std::span<const double> costs, int k);

// The baseline: rank r gets the contiguous slice [r*N/k, (r+1)*N/k) (integer division, so slice
// sizes differ by at most one), i.e. what plain data-parallel batching does.
Partition contiguous_partition(int64_t n, int k);

// The work of a partition: per-rank cost sums and their max, mean and min.
struct PartitionWork {
  std::vector<double> rank_sums;  // [k]
  double max = 0, mean = 0, min = 0;
  // max / mean: the step time of a synchronous step relative to a perfect split (1 = perfect;
  // 1 when every cost is 0).
  double imbalance() const { return mean > 0 ? max / mean : 1.0; }
};
// Checks that `p` uses every index of costs [N] exactly once (an hstu::Error naming the first
// violation otherwise) and sums the costs per rank.
PartitionWork partition_work(std::span<const double> costs, const Partition& p);

}  // namespace hstu::dist
