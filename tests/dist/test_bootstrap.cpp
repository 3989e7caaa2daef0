// test_bootstrap.cpp — the TCP rendezvous that hands rank 0's NCCL id to the other ranks, run with
// one thread per rank on 127.0.0.1: the payload arrives everywhere, ranks that start before rank 0
// retry, a mismatched job hash fails every rank naming the rank, a missing rank or an absent rank
// 0 fails within the deadline; and the job hash itself.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/bootstrap.h"
#include "dist/launcher.h"

namespace hstu::dist {
namespace {

struct RankResult {
  std::vector<uint8_t> payload;
  std::string error;  // "" when the rank succeeded
  double seconds = 0;
};

// Runs the bootstrap on `world` threads (ranks in `ranks`, default all) with per-rank hashes and
// start delays (ms); returns each rank's result.
std::vector<RankResult> run(int world, std::vector<uint64_t> hashes, double timeout_s,
                            std::vector<int> delays_ms = {}, std::vector<int> ranks = {}) {
  const int port = free_tcp_port();
  if (ranks.empty())
    for (int r = 0; r < world; ++r) ranks.push_back(r);
  delays_ms.resize(static_cast<size_t>(world), 0);
  std::vector<RankResult> out(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r : ranks)
    threads.emplace_back([&, r] {
      RankResult& res = out[static_cast<size_t>(r)];
      res.payload.assign(128, 0);
      if (r == 0)
        for (size_t i = 0; i < res.payload.size(); ++i)
          res.payload[i] = static_cast<uint8_t>(i * 7);
      std::this_thread::sleep_for(std::chrono::milliseconds(delays_ms[static_cast<size_t>(r)]));
      const auto t0 = std::chrono::steady_clock::now();
      try {
        tcp_bootstrap({"127.0.0.1", port, r, world, timeout_s}, res.payload,
                      hashes[static_cast<size_t>(r)]);
      } catch (const Error& e) {
        res.error = e.what();
      }
      res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(TcpBootstrap, EveryRankGetsRankZerosPayload) {
  const std::vector<RankResult> res = run(4, {9, 9, 9, 9}, 20, {0, 0, 0, 0});
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(res[static_cast<size_t>(r)].error, "") << "rank " << r;
    for (size_t i = 0; i < 128; ++i)
      ASSERT_EQ(res[static_cast<size_t>(r)].payload[i], static_cast<uint8_t>(i * 7));
  }
}

// Ranks that start before rank 0 listens keep retrying.
TEST(TcpBootstrap, RanksRetryUntilRankZeroListens) {
  const std::vector<RankResult> res = run(3, {1, 1, 1}, 20, {700, 0, 100});
  for (const RankResult& r : res) EXPECT_EQ(r.error, "");
  EXPECT_EQ(res[2].payload[1], 7);
}

TEST(TcpBootstrap, MismatchedJobHashFailsEveryRank) {
  const std::vector<RankResult> res = run(3, {5, 5, 6}, 20);
  for (const RankResult& r : res) {
    EXPECT_NE(r.error.find("ranks disagree on the job hash (config + build)"), std::string::npos)
        << r.error;
    EXPECT_NE(r.error.find("rank 2 = 6"), std::string::npos) << r.error;
  }
  EXPECT_NE(res[1].error.find("rank 1"), std::string::npos);
}

// Rank 2 never starts: rank 0 gives up at the deadline naming it, and so does rank 1.
TEST(TcpBootstrap, MissingRankFailsWithinTheDeadline) {
  const std::vector<RankResult> res = run(3, {1, 1, 1}, 1.0, {}, {0, 1});
  EXPECT_NE(res[0].error.find("rank(s) 2 of 3 never connected"), std::string::npos) << res[0].error;
  EXPECT_NE(res[1].error.find("never connected"), std::string::npos) << res[1].error;
  EXPECT_LT(res[0].seconds, 5.0);
  EXPECT_LT(res[1].seconds, 5.0);
}

// No rank 0: the others give up at the deadline, naming the address they tried.
TEST(TcpBootstrap, AbsentRankZeroFailsWithinTheDeadline) {
  const std::vector<RankResult> res = run(2, {1, 1}, 0.8, {}, {1});
  EXPECT_NE(res[1].error.find("could not reach rank 0 at 127.0.0.1:"), std::string::npos)
      << res[1].error;
  EXPECT_GE(res[1].seconds, 0.5);
  EXPECT_LT(res[1].seconds, 4.0);
}

TEST(TcpBootstrap, OneRankNeedsNoRendezvous) {
  std::vector<uint8_t> p(128, 3);
  tcp_bootstrap({"", 0, 0, 1, 1}, p, 1);
  EXPECT_EQ(p[0], 3);
  EXPECT_THROW(tcp_bootstrap({"127.0.0.1", 0, 1, 2, 1}, p, 1), Error);     // no port
  EXPECT_THROW(tcp_bootstrap({"127.0.0.1", 1234, 2, 2, 1}, p, 1), Error);  // rank >= world
}

TEST(JobHash, DependsOnTheConfigAndIsStable) {
  EXPECT_EQ(job_hash("a = 1\n"), job_hash("a = 1\n"));
  EXPECT_NE(job_hash("a = 1\n"), job_hash("a = 2\n"));
  EXPECT_NE(job_hash(""), 0u);
  EXPECT_EQ(build_hash(), build_hash());
}

}  // namespace
}  // namespace hstu::dist
