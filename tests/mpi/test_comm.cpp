// test_comm.cpp — the MPI backend's collectives on 2 or 4 CPU ranks (run under mpirun by ctest:
// mpi_np2, mpi_np4), each result checked against what every rank can compute on its own.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/philox.h"
#include "dist/comm.h"
#include "mpi/mpi_test_util.h"

namespace hstu::dist {
namespace {

TEST(MpiComm, AllReduceSumMaxMin) {
  Comm& c = world();
  ASSERT_GE(c.size(), 2) << "run under mpirun -np 2 or more";
  std::vector<double> x = {1.0 * c.rank(), 2.5, -1.0 * c.rank()};
  c.all_reduce(host_tensor(x), ReduceOp::kSum);
  const double n = c.size(), sum_r = n * (n - 1) / 2;
  EXPECT_DOUBLE_EQ(x[0], sum_r);
  EXPECT_DOUBLE_EQ(x[1], 2.5 * n);
  EXPECT_DOUBLE_EQ(x[2], -sum_r);
  std::vector<int64_t> y = {c.rank(), -c.rank()};
  c.all_reduce(host_tensor(y), ReduceOp::kMax);
  EXPECT_EQ(y[0], c.size() - 1);
  EXPECT_EQ(y[1], 0);
  std::vector<int32_t> z = {c.rank() + 7};
  c.all_reduce(host_tensor(z), ReduceOp::kMin);
  EXPECT_EQ(z[0], 7);
}

TEST(MpiComm, BroadcastAndGather) {
  Comm& c = world();
  std::vector<float> b(5, static_cast<float>(c.rank()));
  if (c.rank() == 1) std::iota(b.begin(), b.end(), 10.0f);
  c.broadcast(host_tensor(b), 1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b[static_cast<size_t>(i)], 10.0f + i);

  std::vector<int32_t> mine = {c.rank(), 100 + c.rank()};
  std::vector<int32_t> all(2 * static_cast<size_t>(c.size()));
  c.all_gather(host_tensor(mine), host_tensor(all));
  for (int r = 0; r < c.size(); ++r) {
    EXPECT_EQ(all[2 * r], r);
    EXPECT_EQ(all[2 * r + 1], 100 + r);
  }
  EXPECT_EQ(c.all_gather_host(3 * c.rank())[static_cast<size_t>(c.size() - 1)], 3 * (c.size() - 1));
  EXPECT_EQ(c.all_reduce_host(int64_t{1}, ReduceOp::kSum), c.size());
}

// Ragged gather of rows of width 3: rank r sends r+1 rows filled with its rank.
TEST(MpiComm, AllGatherV) {
  Comm& c = world();
  const int64_t w = 3;
  std::vector<int64_t> counts(static_cast<size_t>(c.size()));
  std::iota(counts.begin(), counts.end(), 1);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<float> send(static_cast<size_t>((c.rank() + 1) * w), static_cast<float>(c.rank()));
  std::vector<float> recv(static_cast<size_t>(total * w), -1.0f);
  c.all_gather_v(host_tensor(send, {c.rank() + 1, w}), host_tensor(recv, {total, w}), counts);
  size_t i = 0;
  for (int r = 0; r < c.size(); ++r)
    for (int64_t k = 0; k < counts[static_cast<size_t>(r)] * w; ++k)
      EXPECT_EQ(recv[i++], static_cast<float>(r));
}

// Random ragged all-to-all, the counts exchanged with all_to_all_host: every rank can compute
// every count (seeded by sender and receiver), so the received rows are checked exactly.
TEST(MpiComm, AllToAllVRandomCounts) {
  Comm& c = world();
  const int64_t w = 2;
  const size_t n = static_cast<size_t>(c.size());
  for (uint64_t trial = 0; trial < 5; ++trial) {
    auto count = [&](int from, int to) {
      return static_cast<int64_t>(philox4x32(trial, static_cast<uint64_t>(from * 64 + to), 7).x %
                                  5);
    };
    std::vector<int64_t> sc(n), expect_rc(n);
    for (int p = 0; p < c.size(); ++p) {
      sc[static_cast<size_t>(p)] = count(c.rank(), p);
      expect_rc[static_cast<size_t>(p)] = count(p, c.rank());
    }
    const std::vector<int64_t> rc = c.all_to_all_host(sc);
    EXPECT_EQ(rc, expect_rc);
    std::vector<int64_t> send,
        recv(static_cast<size_t>(std::accumulate(rc.begin(), rc.end(), int64_t{0}) * w));
    for (int p = 0; p < c.size(); ++p)
      for (int64_t k = 0; k < sc[static_cast<size_t>(p)]; ++k) {
        send.push_back(c.rank() * 1000 + p);
        send.push_back(k);
      }
    const int64_t srows = static_cast<int64_t>(send.size()) / w;
    send.resize(send.size() + 2);  // never an empty buffer
    recv.resize(recv.size() + 2);
    c.all_to_all_v(host_tensor(send, {srows + 1, w}), sc,
                   host_tensor(recv, {static_cast<int64_t>(recv.size()) / w, w}), rc);
    size_t i = 0;
    for (int p = 0; p < c.size(); ++p)
      for (int64_t k = 0; k < rc[static_cast<size_t>(p)]; ++k) {
        EXPECT_EQ(recv[i++], p * 1000 + c.rank());
        EXPECT_EQ(recv[i++], k);
      }
  }
}

TEST(MpiComm, CheckSameNamesTheDisagreement) {
  Comm& c = world();
  EXPECT_NO_THROW(c.check_same(42, "the config hash"));
  try {
    c.check_same(c.rank() == 1 ? 7u : 42u, "the config hash");
    ADD_FAILURE() << "a disagreement passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ranks disagree on the config hash"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("rank 1 = 7"), std::string::npos);
  }
}

}  // namespace
}  // namespace hstu::dist
