// test_nccl_comm.cpp — the NCCL backend on one GPU (a real 1-rank communicator): every collective
// gives what the local communicator gives on the same device buffers (all-reduce of each dtype and
// op, broadcast, all-gather, ragged all-gather and all-to-all of rows), the host conveniences
// staged through device memory, barrier, and open_comm's single-rank NCCL choice.
// Multi-rank NCCL needs one GPU per rank: the NcclRanks tests run when the binary is started as
// several ranks, `hstu launch --nproc-per-node 2 -- build/test_gpu --gtest_filter='Nccl*'`
// (skipped otherwise), and check every collective against values each rank computes itself.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "common/gpu_harness.h"
#include "dist/bootstrap.h"
#include "dist/comm.h"
#include "dist/launch_env.h"
#include "dist/nccl_comm.h"
#include "dist/open_comm.h"

namespace hstu::dist {
namespace {

#if defined(HSTU_WITH_NCCL)

// A device copy of a host vector, freed at scope exit.
template <typename T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(const std::vector<T>& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DevBuf() { cudaFree(p); }
  Tensor t(std::initializer_list<int64_t> dims = {}) const {
    if (dims.size() == 0) return Tensor(p, DTypeOf<T>::value, Device::kCUDA, {int64_t(n)});
    return Tensor(p, DTypeOf<T>::value, Device::kCUDA, dims);
  }
  std::vector<T> host() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

std::unique_ptr<Comm> nccl1() {
  return make_nccl_comm(0, 1, nccl_unique_id(), 0, 120);
}

template <typename T>
std::vector<T> values(size_t n, T scale) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<T>((static_cast<int64_t>(i * 37 % 11) - 5)) * scale;
  return v;
}

// all_reduce of one dtype and op through both communicators.
template <typename T>
void expect_all_reduce_same(Comm& nccl, Comm& local, T scale) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    const std::vector<T> h = values<T>(1000, scale);
    DevBuf<T> a(h), b(h);
    nccl.all_reduce(a.t(), op, nullptr);
    local.all_reduce(b.t(), op, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(a.host(), b.host());
    EXPECT_EQ(a.host(), h);  // one rank: the reduction is the value itself
  }
}

TEST(NcclComm, OneRankAllReduceEqualsLocal) {
  HSTU_REQUIRE_GPU();
  auto nccl = nccl1();
  auto local = make_local_comm(Device::kCUDA);
  EXPECT_STREQ(nccl->backend(), "nccl");
  EXPECT_EQ(nccl->device(), Device::kCUDA);
  EXPECT_EQ(nccl->size(), 1);
  expect_all_reduce_same<float>(*nccl, *local, 0.25f);
  expect_all_reduce_same<double>(*nccl, *local, 0.125);
  expect_all_reduce_same<int32_t>(*nccl, *local, 3);
  expect_all_reduce_same<int64_t>(*nccl, *local, int64_t{1} << 40);
}

TEST(NcclComm, OneRankMovementEqualsLocal) {
  HSTU_REQUIRE_GPU();
  auto nccl = nccl1();
  auto local = make_local_comm(Device::kCUDA);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  const int64_t rows = 37, w = 5;
  const std::vector<float> src = values<float>(rows * w, 0.5f);
  const std::vector<float> zeros(rows * w, -1.0f);
  DevBuf<float> send(src);
  {  // broadcast
    DevBuf<float> a(src);
    nccl->broadcast(a.t({rows, w}), 0, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(a.host(), src);
  }
  {  // all_gather
    DevBuf<float> a(zeros), b(zeros);
    nccl->all_gather(send.t({rows, w}), a.t({rows, w}), s);
    local->all_gather(send.t({rows, w}), b.t({rows, w}), s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(a.host(), b.host());
    EXPECT_EQ(a.host(), src);
  }
  {  // all_gather_v of the first 20 rows
    const std::vector<int64_t> counts = {20};
    DevBuf<float> a(zeros), b(zeros);
    nccl->all_gather_v(send.t({rows, w}), a.t({rows, w}), counts, s);
    local->all_gather_v(send.t({rows, w}), b.t({rows, w}), counts, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(a.host(), b.host());
    EXPECT_EQ(a.host()[20 * w - 1], src[20 * w - 1]);
    EXPECT_EQ(a.host()[20 * w], -1.0f);
  }
  {  // all_to_all_v of 30 rows
    const std::vector<int64_t> counts = {30};
    DevBuf<float> a(zeros), b(zeros);
    nccl->all_to_all_v(send.t({rows, w}), counts, a.t({rows, w}), counts, s);
    local->all_to_all_v(send.t({rows, w}), counts, b.t({rows, w}), counts, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(a.host(), b.host());
  }
  nccl->barrier();
  cudaStreamDestroy(s);
}

TEST(NcclComm, HostConveniencesAndChecks) {
  HSTU_REQUIRE_GPU();
  auto nccl = nccl1();
  EXPECT_EQ(nccl->all_gather_host(42), std::vector<int64_t>{42});
  EXPECT_EQ(nccl->all_reduce_host(int64_t{-7}, ReduceOp::kSum), -7);
  EXPECT_EQ(nccl->all_reduce_host(2.5, ReduceOp::kMax), 2.5);
  const std::vector<int64_t> one = {9};
  EXPECT_EQ(nccl->all_to_all_host(one), one);
  nccl->check_same(0xabcdef, "a test value");
  // Host buffers are refused by the device collectives.
  std::vector<float> h(4);
  EXPECT_THROW(nccl->all_reduce(Tensor(h.data(), DType::kF32, Device::kCPU, {4}), ReduceOp::kSum),
               Error);
}

TEST(NcclComm, OpenCommSingleRankNccl) {
  HSTU_REQUIRE_GPU();
  const WorldEnv one;
  EXPECT_STREQ(open_comm(one, Device::kCUDA)->backend(), "local");
  auto c = open_comm(one, Device::kCUDA, {.job_hash = 1, .nccl_single_rank = true});
  EXPECT_STREQ(c->backend(), "nccl");
  EXPECT_EQ(c->all_reduce_host(int64_t{5}, ReduceOp::kSum), 5);
}

// ---- several ranks (under hstu launch / torchrun / mpirun) ------------------------------------

// This process's rank of the launched job (one communicator for all NcclRanks tests).
Comm* job() {
  static std::unique_ptr<Comm> c = [] {
    const WorldEnv env = read_world_env();
    return env.world_size > 1 ? open_comm(env, Device::kCUDA, {.job_hash = job_hash("test_gpu")})
                              : nullptr;
  }();
  return c.get();
}

#define HSTU_REQUIRE_RANKS() \
  HSTU_REQUIRE_GPU();        \
  if (!job()) GTEST_SKIP() << "run as several ranks: hstu launch --nproc-per-node 2 -- ..."

TEST(NcclRanks, AllReduceAndBroadcast) {
  HSTU_REQUIRE_RANKS();
  Comm& c = *job();
  const int r = c.rank(), W = c.size();
  EXPECT_STREQ(c.backend(), "nccl");
  std::vector<float> x(1000);
  for (int i = 0; i < 1000; ++i) x[static_cast<size_t>(i)] = static_cast<float>(r + i);
  DevBuf<float> a(x);
  c.all_reduce(a.t(), ReduceOp::kSum, nullptr);
  const std::vector<float> sum = a.host();
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(sum[static_cast<size_t>(i)], static_cast<float>(W * (W - 1) / 2 + W * i));
  DevBuf<int64_t> m(std::vector<int64_t>{r, -r});
  c.all_reduce(m.t(), ReduceOp::kMax, nullptr);
  EXPECT_EQ(m.host(), (std::vector<int64_t>{W - 1, 0}));
  DevBuf<double> b(std::vector<double>(10, r));
  c.broadcast(b.t(), W - 1, nullptr);
  EXPECT_EQ(b.host(), std::vector<double>(10, W - 1));
}

// Rank p contributes p+1 rows of width 3 filled with p.
TEST(NcclRanks, AllGatherV) {
  HSTU_REQUIRE_RANKS();
  Comm& c = *job();
  const int r = c.rank(), W = c.size();
  std::vector<int64_t> counts(static_cast<size_t>(W));
  std::iota(counts.begin(), counts.end(), 1);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  DevBuf<float> send(std::vector<float>(static_cast<size_t>((r + 1) * 3), static_cast<float>(r)));
  DevBuf<float> recv(std::vector<float>(static_cast<size_t>(total * 3), -1.0f));
  c.all_gather_v(send.t({r + 1, 3}), recv.t({total, 3}), counts, nullptr);
  std::vector<float> want;
  for (int p = 0; p < W; ++p) want.insert(want.end(), static_cast<size_t>((p + 1) * 3), p);
  EXPECT_EQ(recv.host(), want);
}

// Rank r sends r+p+1 rows of width 2 holding 1000r+p to rank p.
TEST(NcclRanks, AllToAllV) {
  HSTU_REQUIRE_RANKS();
  Comm& c = *job();
  const int r = c.rank(), W = c.size();
  std::vector<int64_t> sc(static_cast<size_t>(W)), rc(sc.size());
  std::vector<int32_t> send, want;
  for (int p = 0; p < W; ++p) {
    sc[static_cast<size_t>(p)] = rc[static_cast<size_t>(p)] = r + p + 1;
    send.insert(send.end(), static_cast<size_t>((r + p + 1) * 2), 1000 * r + p);
    want.insert(want.end(), static_cast<size_t>((p + r + 1) * 2), 1000 * p + r);
  }
  DevBuf<int32_t> s(send), d(std::vector<int32_t>(want.size(), -1));
  c.all_to_all_v(s.t({int64_t(send.size() / 2), 2}), sc, d.t({int64_t(want.size() / 2), 2}), rc,
                 nullptr);
  EXPECT_EQ(d.host(), want);
}

TEST(NcclRanks, HostConveniences) {
  HSTU_REQUIRE_RANKS();
  Comm& c = *job();
  const int r = c.rank(), W = c.size();
  const std::vector<int64_t> g = c.all_gather_host(10 + r);
  for (int p = 0; p < W; ++p) EXPECT_EQ(g[static_cast<size_t>(p)], 10 + p);
  EXPECT_EQ(c.all_reduce_host(int64_t{r}, ReduceOp::kSum), W * (W - 1) / 2);
  EXPECT_EQ(c.all_reduce_host(0.5 * r, ReduceOp::kMax), 0.5 * (W - 1));
  std::vector<int64_t> a(static_cast<size_t>(W));
  for (int p = 0; p < W; ++p) a[static_cast<size_t>(p)] = 100 * r + p;
  const std::vector<int64_t> b = c.all_to_all_host(a);
  for (int p = 0; p < W; ++p) EXPECT_EQ(b[static_cast<size_t>(p)], 100 * p + r);
  EXPECT_THROW(c.check_same(static_cast<uint64_t>(r), "the rank"), Error);
  c.barrier();
}

#else

TEST(NcclComm, WithoutNcclSaysWhy) {
  EXPECT_FALSE(nccl_available());
  EXPECT_THROW(nccl_unique_id(), Error);
}

#endif

}  // namespace
}  // namespace hstu::dist
