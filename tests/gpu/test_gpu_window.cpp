// test_gpu_window.cpp — the row-sharded item table's window on the device (ops/window_gpu.h,
// ShardedTable::dedup_and_fetch_device, TrainStep's device window step) against the host path.
//
// (1) The device dedupe equals IdDeduper (dist/sharding.h): the same sorted unique ids and the
// same remapped ids, for the flag-scan strategy (rows <= window) and the sort strategy (rows >
// window), with 1-D and strided 2-D id arrays; the window gather and the gradient scatter equal
// their definitions. (2) Training on one rank (a local communicator on the GPU) with the window
// on the device equals the host window path (host dedupe, host negatives, host routing) bit for
// bit after several steps: every loss, the dense parameters and the item table, for uniform and
// in-batch negatives and both dedupe strategies, and for the W-rank device path (the distinct
// ids copied to the host, routed and exchanged) forced on one rank. (3) A data-parallel step's
// in-batch negatives on CUDA are drawn from the global batch's targets, equal to the CPU sampler's
// (one NCCL rank), and a dynamic item table sharded by key over one NCCL rank trains on the device
// window as on the host window. (4) A raw-id dynamic table's evaluation on CUDA ranks over the keys
// the table holds: the present ids equal the device pool, and the metrics equal the CPU reference's
// (cpu retrieval_rank over the CUDA run's normalised catalogue and queries, absent ids filtered).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dynamic_rig.h"
#include "common/gpu_harness.h"
#include "config/load.h"
#include "data/batcher.h"
#include "data/negatives.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "dist/comm.h"
#include "dist/sharded_table.h"
#include "dist/sharding.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "ops/embedding.h"
#include "ops/retrieval_rank.h"
#include "ops/window_gpu.h"
#if defined(HSTU_WITH_NCCL)
#include "dist/nccl_comm.h"
#endif
#include "ops/negatives_gpu.h"
#include "train/dynamic_item_table.h"
#include "train/evaluator.h"
#include "train/item_window.h"
#include "train/runtime.h"
#include "train/step.h"
#include "train/table_negatives.h"

namespace hstu::test {
namespace {

template <typename T>
std::vector<T> host_copy(const Tensor& t, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  copy_bytes(v.data(), Device::kCPU, t.data, t.device, v.size() * sizeof(T));
  return v;
}

template <typename T>
Tensor device_copy(Arena& a, const std::vector<T>& v, std::initializer_list<int64_t> dims) {
  Tensor t = a.alloc(DTypeOf<T>::value, dims);
  copy_bytes(t.data, Device::kCUDA, v.data(), Device::kCPU, v.size() * sizeof(T));
  return t;
}

// Ids of a [n] array and an [m, k] array stored at row stride k + 3, against IdDeduper.
void check_dedupe(int64_t rows, int64_t cap, int64_t n, int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(rows - 1));
  std::vector<int32_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(m * k));
  for (auto& x : a) x = id(rng) / 3;  // skewed, with repeats and zeros
  for (auto& x : b) x = id(rng);
  const int64_t ld = k + 3;
  std::vector<int32_t> b_strided(static_cast<size_t>(m * ld), -7);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j) b_strided[static_cast<size_t>(i * ld + j)] = b[i * k + j];

  Ctx ctx = gpu::cuda_ctx();
  Arena arena(Device::kCUDA, size_t{256} << 20, "test");
  const cuda::WindowDedup d = cuda::allocate_window_dedup(arena, rows, cap);
  EXPECT_EQ(d.dense, rows <= cap);
  Tensor ta = device_copy(arena, a, {n});
  Tensor tb = device_copy(arena, b_strided, {m, ld}).cols(0, k);
  const Tensor ids[] = {ta, tb};
  cuda::window_dedup(ctx, d, ids);

  dist::IdDeduper host(rows);
  const std::span<int32_t> spans[] = {a, b};
  const std::span<const int32_t> want = host.run(spans);
  gpu::sync();
  const int32_t u = host_copy<int32_t>(d.count, 1)[0];
  ASSERT_EQ(u, static_cast<int32_t>(want.size()));
  EXPECT_EQ(host_copy<int32_t>(d.unique, u), std::vector<int32_t>(want.begin(), want.end()));
  EXPECT_EQ(host_copy<int32_t>(ta, n), a);
  const std::vector<int32_t> got_b = host_copy<int32_t>(tb, m * ld);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ld; ++j)
      ASSERT_EQ(got_b[static_cast<size_t>(i * ld + j)],
                j < k ? b[static_cast<size_t>(i * k + j)] : -7)
          << "row " << i << " col " << j;

  // The window gather and the gradient scatter against their definitions.
  const int64_t dim = 5;
  std::vector<float> table(static_cast<size_t>(rows * dim)), wgrad(static_cast<size_t>(cap * dim));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i % 97) * 0.25f;
  for (size_t i = 0; i < wgrad.size(); ++i) wgrad[i] = static_cast<float>(i % 13) - 6.0f;
  std::vector<uint8_t> wtouched(static_cast<size_t>(cap), 0);
  for (int64_t j = 0; j < u; j += 2) wtouched[static_cast<size_t>(j)] = 1;
  Tensor t_table = device_copy(arena, table, {rows, dim});
  Tensor t_window = arena.zeros(DType::kF32, {cap, dim});
  Tensor t_wgrad = device_copy(arena, wgrad, {cap, dim});
  Tensor t_wtouched = device_copy(arena, wtouched, {cap});
  Tensor t_grad = arena.zeros(DType::kF32, {rows, dim});
  Tensor t_touched = arena.zeros(DType::kU8, {rows});
  cuda::window_gather_rows(ctx, d, t_table, t_window);
  cuda::window_scatter_grads(ctx, d, t_wgrad, t_wtouched, t_grad, t_touched);
  gpu::sync();
  const auto window = host_copy<float>(t_window, cap * dim);
  const auto grad = host_copy<float>(t_grad, rows * dim);
  const auto touched = host_copy<uint8_t>(t_touched, rows);
  const auto wgrad_after = host_copy<float>(t_wgrad, cap * dim);
  const auto wtouched_after = host_copy<uint8_t>(t_wtouched, cap);
  std::vector<float> want_grad(static_cast<size_t>(rows * dim), 0.0f);
  std::vector<uint8_t> want_touched(static_cast<size_t>(rows), 0);
  for (int64_t j = 0; j < u; ++j) {
    const int64_t r = want[static_cast<size_t>(j)];
    for (int64_t c = 0; c < dim; ++c) {
      ASSERT_EQ(window[j * dim + c], table[r * dim + c]) << "window row " << j;
      if (wtouched[j]) want_grad[r * dim + c] = wgrad[j * dim + c];
    }
    want_touched[r] = wtouched[j];
  }
  EXPECT_EQ(grad, want_grad);
  EXPECT_EQ(touched, want_touched);
  for (int64_t j = 0; j < u; ++j) {
    EXPECT_EQ(wtouched_after[j], 0);
    for (int64_t c = 0; c < dim; ++c) {
      if (wtouched[j]) {
        ASSERT_EQ(wgrad_after[j * dim + c], 0.0f);
      }
    }
  }
}

TEST(GpuWindow, DedupeFlagScanEqualsHost) {
  HSTU_REQUIRE_GPU();
  check_dedupe(/*rows=*/700, /*cap=*/4000, /*n=*/900, /*m=*/37, /*k=*/50, 1);
  check_dedupe(/*rows=*/3, /*cap=*/3, /*n=*/10, /*m=*/2, /*k=*/2, 2);
}

TEST(GpuWindow, DedupeSortEqualsHost) {
  HSTU_REQUIRE_GPU();
  check_dedupe(/*rows=*/100000, /*cap=*/3000, /*n=*/900, /*m=*/37, /*k=*/50, 3);
  check_dedupe(/*rows=*/1 << 21, /*cap=*/200, /*n=*/60, /*m=*/5, /*k=*/20, 4);
}

// window_route over `world` owners against the host routing (ShardedTable::route: owners in rank
// order, window rows ascending within an owner), then the gradient push's rows and flags, and the
// owner's add of one sender's rows.
void check_route(int64_t rows, int64_t cap, int world, dist::OwnerKind kind, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(rows - 1));
  std::vector<int32_t> a(static_cast<size_t>(cap - 1));
  for (auto& x : a) x = id(rng);
  Ctx ctx = gpu::cuda_ctx();
  Arena arena(Device::kCUDA, size_t{64} << 20, "test");
  const cuda::WindowDedup d = cuda::allocate_window_dedup(arena, rows, cap, world, true);
  const dist::RowSharding sh(rows, world, kind);
  std::vector<int32_t> local(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i)
    local[static_cast<size_t>(i)] = static_cast<int32_t>(sh.local_row(i));
  Tensor t_local = device_copy(arena, local, {rows});
  Tensor ta = device_copy(arena, a, {cap - 1});
  Tensor send_local = arena.alloc(DType::kI32, {cap});
  Tensor perm = arena.alloc(DType::kI32, {cap});
  const Tensor ids[] = {ta};
  cuda::window_dedup(ctx, d, ids);
  cuda::window_route(ctx, d, kind == dist::OwnerKind::kHash, t_local, send_local, perm);
  dist::IdDeduper host(rows);
  const std::span<int32_t> spans[] = {a};
  const std::span<const int32_t> uniq = host.run(spans);
  const int64_t u = static_cast<int64_t>(uniq.size());
  std::vector<int32_t> order, counts(static_cast<size_t>(world), 0);
  for (int o = 0; o < world; ++o)
    for (int64_t k = 0; k < u; ++k)
      if (sh.owner(uniq[static_cast<size_t>(k)]) == o) {
        order.push_back(static_cast<int32_t>(k));
        ++counts[static_cast<size_t>(o)];
      }
  std::vector<int32_t> want_local(static_cast<size_t>(u)), want_perm(static_cast<size_t>(u));
  for (int64_t j = 0; j < u; ++j) {
    want_local[static_cast<size_t>(j)] =
        local[static_cast<size_t>(uniq[static_cast<size_t>(order[static_cast<size_t>(j)])])];
    want_perm[static_cast<size_t>(order[static_cast<size_t>(j)])] = static_cast<int32_t>(j);
  }
  gpu::sync();
  EXPECT_EQ(host_copy<int32_t>(d.counts, world), counts);
  EXPECT_EQ(host_copy<int32_t>(d.order, u), order);
  EXPECT_EQ(host_copy<int32_t>(send_local, u), want_local);
  EXPECT_EQ(host_copy<int32_t>(perm, u), want_perm);

  // The push's rows (window grad in routed order) and flags (untouched: -1 - local).
  const int64_t dim = 3;
  std::vector<float> wgrad(static_cast<size_t>(cap * dim));
  for (size_t i = 0; i < wgrad.size(); ++i) wgrad[i] = static_cast<float>(i) * 0.5f;
  std::vector<uint8_t> wtouched(static_cast<size_t>(cap), 0);
  for (int64_t k = 0; k < u; k += 3) wtouched[static_cast<size_t>(k)] = 1;
  Tensor t_wgrad = device_copy(arena, wgrad, {cap, dim});
  Tensor t_wtouched = device_copy(arena, wtouched, {cap});
  Tensor t_rows = arena.zeros(DType::kF32, {cap, dim});
  cuda::window_grad_rows(ctx, d, u, t_wgrad, t_wtouched, send_local, t_rows);
  gpu::sync();
  const auto got_rows = host_copy<float>(t_rows, u * dim);
  const auto got_idx = host_copy<int32_t>(send_local, u);
  for (int64_t j = 0; j < u; ++j) {
    const int32_t k = order[static_cast<size_t>(j)];
    for (int64_t c = 0; c < dim; ++c)
      ASSERT_EQ(got_rows[static_cast<size_t>(j * dim + c)],
                wgrad[static_cast<size_t>(k * dim + c)]);
    ASSERT_EQ(got_idx[static_cast<size_t>(j)], wtouched[static_cast<size_t>(k)]
                                                   ? want_local[static_cast<size_t>(j)]
                                                   : -1 - want_local[static_cast<size_t>(j)]);
  }
  // Owner 0's add of its segment: flagged rows skipped, the rest added and marked.
  const int64_t n0 = counts[0];
  const int64_t shard = sh.shard_rows(0);
  std::vector<float> base(static_cast<size_t>(shard * dim), 1.0f);
  Tensor t_grad = device_copy(arena, base, {shard, dim});
  Tensor t_touched = arena.zeros(DType::kU8, {shard});
  cuda::window_add_rows(ctx, t_rows.rows(0, n0), send_local.rows(0, n0), t_grad, t_touched);
  gpu::sync();
  std::vector<float> want_grad(base);
  std::vector<uint8_t> want_touched(static_cast<size_t>(shard), 0);
  for (int64_t j = 0; j < n0; ++j) {
    const int32_t r = got_idx[static_cast<size_t>(j)];
    if (r < 0) continue;
    want_touched[static_cast<size_t>(r)] = 1;
    for (int64_t c = 0; c < dim; ++c)
      want_grad[static_cast<size_t>(r * dim + c)] += got_rows[static_cast<size_t>(j * dim + c)];
  }
  EXPECT_EQ(host_copy<float>(t_grad, shard * dim), want_grad);
  EXPECT_EQ(host_copy<uint8_t>(t_touched, shard), want_touched);
}

TEST(GpuWindow, RouteEqualsHostRouting) {
  HSTU_REQUIRE_GPU();
  check_route(/*rows=*/5000, /*cap=*/800, /*world=*/4, dist::OwnerKind::kModulo, 5);
  check_route(/*rows=*/5000, /*cap=*/800, /*world=*/4, dist::OwnerKind::kHash, 6);
  check_route(/*rows=*/300, /*cap=*/900, /*world=*/3, dist::OwnerKind::kHash, 7);  // flag scan
  check_route(/*rows=*/300, /*cap=*/900, /*world=*/1, dist::OwnerKind::kModulo, 8);
}

constexpr int kSteps = 6;

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> state;  // dense params, m, v, the item table
};

// kSteps training steps with the item table sharded over a 1-rank local communicator on the GPU,
// its window on the host (the reference) or on the device.
TrainRun train_sharded(const std::string& gin, bool host_window, bool route = false) {
  const Config cfg = load_config_text(gin, "<window>", {}, nullptr);
  const SequenceDataset ds = open_dataset(cfg);
  const DataSplits splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
  Batcher batcher(ds, splits.train, cfg.trainer.train_batch_size, true, 7);
  ModelShape shape = retrieval_model_shape(cfg, ds.num_items);
  shape.window_rows = item_window_rows(cfg, ds.num_items);
  shape.max_eval_queries = shape.max_batch;
  shape.max_scatter_rows = shape.window_rows;
  std::unique_ptr<dist::Comm> comm = dist::make_local_comm(Device::kCUDA);
  Runtime runtime(Device::kCUDA, cfg, shape);
  HstuModel model(cfg, shape, Device::kCUDA, DType::kBF16);
  model.plan(11);
  dist::ShardedTable table(*comm, "item_embedding", ds.num_items, cfg.network.hidden_size,
                           cfg.optimizer.sparse_optimizer_str, dist::OwnerKind::kModulo,
                           shape.window_rows);
  table.init_from_full(Init::trunc_normal(0.02), 11);
  table.set_route_on_one_rank(route);
  ShardedItemWindow window(table, *comm);
  window.set_host_path(host_window);
  EXPECT_EQ(window.on_device(), !host_window);
  EXPECT_EQ(window.device_only(), !host_window && !route);
  model.set_item_table(&window.window());
  TrainStep stepper(cfg, ds.num_items);
  StepShare share;
  share.comm = comm.get();
  share.items = &window;
  TrainRun r;
  SequenceBatch batch;
  for (int64_t step = 0; step < kSteps; ++step) {
    batcher.next(batch);
    stepper.run(runtime.ctx(), model, batch, step, 1e-3 * static_cast<double>(step + 1), share);
    for (const StepLoss& l : stepper.drain(false)) r.losses.push_back(l.loss);
  }
  for (const StepLoss& l : stepper.drain(true)) r.losses.push_back(l.loss);
  runtime.synchronize();
  for (const Tensor& t : {model.dense().flat_params(), model.dense().flat_m(),
                          model.dense().flat_v(), table.shard().weight})
    r.state.push_back(host_copy<float>(t, t.numel()));
  return r;
}

std::string gin(int64_t items, int64_t batch, int64_t seqlen, int64_t negatives,
                const char* sampler) {
  return "DatasetArgs.dataset_name = \"synthetic\"\n"
         "DatasetArgs.max_history_seqlen = " +
         std::to_string(seqlen) +
         "\nSyntheticArgs.num_users = 300\n"
         "SyntheticArgs.num_items = " +
         std::to_string(items) +
         "\nSyntheticArgs.min_seqlen = 5\n"
         "SyntheticArgs.max_seqlen = " +
         std::to_string(seqlen) +
         "\nNetworkArgs.num_layers = 2\n"
         "NetworkArgs.hidden_size = 32\n"
         "NetworkArgs.num_attention_heads = 2\n"
         "NetworkArgs.kv_channels = 16\n"
         "NetworkArgs.hidden_dropout = 0.2\n"
         "TrainerArgs.train_batch_size = " +
         std::to_string(batch) + "\nRetrievalArgs.num_negatives = " + std::to_string(negatives) +
         "\nRetrievalArgs.negative_sampler = \"" + sampler + "\"\n";
}

void expect_equal(const TrainRun& host, const TrainRun& dev) {
  ASSERT_EQ(host.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(host.losses, dev.losses);
  ASSERT_EQ(host.state.size(), dev.state.size());
  for (size_t i = 0; i < host.state.size(); ++i) {
    ASSERT_EQ(host.state[i].size(), dev.state[i].size());
    EXPECT_EQ(0, std::memcmp(host.state[i].data(), dev.state[i].data(),
                             host.state[i].size() * sizeof(float)))
        << "state " << i << " (dense params, m, v, item table) differs";
  }
}

// Window rows >= table rows: the flag-scan dedupe.
TEST(GpuWindow, StepDeviceEqualsHostFlagScan) {
  HSTU_REQUIRE_GPU();
  for (const char* sampler : {"uniform", "in_batch"}) {
    SCOPED_TRACE(sampler);
    const std::string g = gin(500, 16, 32, 16, sampler);
    const TrainRun host = train_sharded(g, true);
    expect_equal(host, train_sharded(g, false));
    // The W-rank path: device dedupe and routing, counts to the host, exchanges, flagged push.
    expect_equal(host, train_sharded(g, false, true));
  }
}

// Window rows < table rows: the sort dedupe.
TEST(GpuWindow, StepDeviceEqualsHostSort) {
  HSTU_REQUIRE_GPU();
  for (const char* sampler : {"uniform", "in_batch"}) {
    SCOPED_TRACE(sampler);
    const std::string g = gin(20000, 4, 16, 4, sampler);
    const TrainRun host = train_sharded(g, true);
    expect_equal(host, train_sharded(g, false));
    expect_equal(host, train_sharded(g, false, true));
  }
}

// ---- The dynamic item table on the device window (issue 18) ---------------------------------

// The negatives drawn from a table's ids on the device equal the CPU reference, for a pool and
// for an empty pool (the catalogue's uniform draws); present_pool lists the ids with a ref.
TEST(GpuWindow, PoolNegativesAndPresentPoolEqualCpu) {
  HSTU_REQUIRE_GPU();
  Ctx ctx = gpu::cuda_ctx();
  Arena arena(Device::kCUDA, size_t{16} << 20, "test");
  const std::vector<int32_t> pool = {3, 9, 10, 57, 200, 201, 299};
  const int64_t t = 37, r = 9, num_items = 300;
  Tensor d_pool = device_copy(arena, pool, {static_cast<int64_t>(pool.size())});
  for (const int32_t n : {7, 0}) {
    SCOPED_TRACE(n);
    Tensor count = device_copy(arena, std::vector<int32_t>{n}, {1});
    Tensor negs = arena.alloc(DType::kI32, {t, r + 2}).cols(0, r);  // a row stride
    cuda::sample_pool_negatives(ctx, d_pool, count, num_items, 17, 5, negs, 4);
    gpu::sync();
    const std::vector<int32_t> all = host_copy<int32_t>(negs, t * (r + 2));
    std::vector<int32_t> got;
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < r; ++j) got.push_back(all[static_cast<size_t>(i * (r + 2) + j)]);
    std::vector<int32_t> want(static_cast<size_t>(t * r));
    sample_pool_negatives(std::span<const int32_t>(pool.data(), static_cast<size_t>(n)), num_items,
                          t, r, 17, 5, want, 4);
    EXPECT_EQ(got, want);
  }
  std::mt19937 rng(3);
  std::vector<int64_t> refs(5000);
  std::vector<int32_t> want_pool;
  for (size_t i = 0; i < refs.size(); ++i) {
    refs[i] = rng() % 3 == 0 ? -1 : static_cast<int64_t>(rng() % 100000);
    if (refs[i] >= 0) want_pool.push_back(static_cast<int32_t>(i) + 1);
  }
  const int64_t n = static_cast<int64_t>(refs.size());
  Tensor d_refs = device_copy(arena, refs, {n});
  Tensor flags = arena.alloc(DType::kI32, {n}), index = arena.alloc(DType::kI32, {n});
  Tensor temp = arena.alloc(DType::kU8, {static_cast<int64_t>(cuda::present_pool_temp_bytes(n))});
  Tensor out = arena.alloc(DType::kI32, {n}), count = arena.alloc(DType::kI32, {1});
  cuda::present_pool(ctx, d_refs, 1, flags, index, temp, out, count);
  gpu::sync();
  const int32_t m = host_copy<int32_t>(count, 1)[0];
  ASSERT_EQ(m, static_cast<int32_t>(want_pool.size()));
  EXPECT_EQ(host_copy<int32_t>(out, m), want_pool);
}

struct DynamicRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> dense;  // params, m, v
  embed::TableRows rows;                  // sorted by key
  embed::DynamicTableCounters counters;
  int64_t graph_steps = 0, device_only_steps = 0;
};

// kSteps training steps with a dynamic item table (one GPU), its window on the host (the
// reference: host dedupe and negatives) or on the device; with `comm` the table is sharded by
// key over its ranks (dynamic_shard.h) and the step is a data-parallel one.
DynamicRun train_dynamic(const std::string& gin, bool host_window, dist::Comm* comm = nullptr) {
  test::DynamicRig rig(load_config_text(gin, "<dynamic window>", {}, nullptr), 11, Device::kCUDA,
                       DType::kBF16, comm);
  DynamicItemTable& items = *rig.items;
  items.set_host_path(host_window);
  EXPECT_EQ(items.on_device(), !host_window);
  DynamicRun r;
  for (int64_t step = 0; step < kSteps; ++step) {
    rig.next();
    r.device_only_steps += items.device_only();
    rig.run(step, 1e-3 * static_cast<double>(step + 1));
  }
  r.losses = rig.losses();
  rig.runtime->synchronize();
  HstuModel& model = *rig.model;
  r.graph_steps = rig.stepper->graph().stats().graph_steps;
  for (const Tensor& t :
       {model.dense().flat_params(), model.dense().flat_m(), model.dense().flat_v()})
    r.dense.push_back(host_copy<float>(t, t.numel()));
  r.counters = items.counters();
  const embed::TableRows rows = items.table().export_rows(rig.ctx());
  std::vector<size_t> order(rows.keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return rows.keys[a] < rows.keys[b]; });
  const size_t w = rows.keys.empty() ? 0 : rows.values.size() / rows.keys.size();
  for (size_t i : order) {
    r.rows.keys.push_back(rows.keys[i]);
    r.rows.scores.push_back(rows.scores[i]);
    r.rows.values.insert(r.rows.values.end(), rows.values.begin() + i * w,
                         rows.values.begin() + (i + 1) * w);
  }
  return r;
}

void expect_equal(const DynamicRun& host, const DynamicRun& dev) {
  ASSERT_EQ(host.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(host.losses, dev.losses);
  ASSERT_EQ(host.dense.size(), dev.dense.size());
  for (size_t i = 0; i < host.dense.size(); ++i)
    EXPECT_EQ(0, std::memcmp(host.dense[i].data(), dev.dense[i].data(),
                             host.dense[i].size() * sizeof(float)))
        << "dense state " << i << " (params, m, v) differs";
  EXPECT_EQ(host.rows.keys, dev.rows.keys);
  EXPECT_EQ(host.rows.scores, dev.rows.scores);
  ASSERT_EQ(host.rows.values.size(), dev.rows.values.size());
  EXPECT_EQ(0, std::memcmp(host.rows.values.data(), dev.rows.values.data(),
                           host.rows.values.size() * sizeof(float)))
      << "table rows (embedding | optimiser state) differ";
  const auto c = [](const embed::DynamicTableCounters& x) {
    return std::vector<int64_t>{x.inserts, x.evictions, x.rejections, x.size, x.capacity, x.grows};
  };
  EXPECT_EQ(c(host.counters), c(dev.counters)) << "inserts, evictions, rejections, size, "
                                                  "capacity, grows";
}

std::string dynamic_gin(int64_t items, int64_t batch, int64_t seqlen, int64_t negatives,
                        const char* sampler, const std::string& table) {
  return gin(items, batch, seqlen, negatives, sampler) +
         "OptimizerArgs.sparse_optimizer_str = \"adam\"\n"
         "DynamicTableArgs.tables = [\"item\"]\n" +
         table;
}

// At maximum capacity with LRU / LFU eviction the table needs no host decision: the whole step
// is one CUDA graph (device_only), and it trains exactly as the host window, counters included.
TEST(GpuWindow, DynamicDeviceEqualsHostAtCapacity) {
  HSTU_REQUIRE_GPU();
  struct Case {
    const char* sampler;
    std::string table;
  };
  const Case cases[] = {
      {"uniform", ""},  // capacity = the catalogue, LRU: full buckets evict
      {"in_batch", "DynamicTableArgs.eviction = \"lfu\"\n"},
      {"uniform", "DynamicTableArgs.capacity_ratio = 0.25\n"},  // many evictions
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.sampler) + " " + c.table);
    const std::string g = dynamic_gin(500, 16, 32, 16, c.sampler, c.table);
    const DynamicRun host = train_dynamic(g, true), dev = train_dynamic(g, false);
    EXPECT_EQ(dev.device_only_steps, kSteps);
    EXPECT_GE(dev.graph_steps, kSteps - 1);  // the first step runs directly
    expect_equal(host, dev);
  }
}

// A table that may still grow (eviction none): the fetch runs before the step's graph and waits
// for its growth decisions until the catalogue fits; still equal to the host window. Also the sort
// dedupe (a catalogue larger than the window).
TEST(GpuWindow, DynamicDeviceEqualsHostWhileGrowing) {
  HSTU_REQUIRE_GPU();
  const std::string grow =
      "DynamicTableArgs.capacity_rows = 64\nDynamicTableArgs.max_capacity_rows = 65536\n"
      "DynamicTableArgs.eviction = \"none\"\n";
  for (const char* sampler : {"uniform", "in_batch"}) {
    SCOPED_TRACE(sampler);
    const std::string g = dynamic_gin(500, 16, 32, 16, sampler, grow);
    const DynamicRun host = train_dynamic(g, true), dev = train_dynamic(g, false);
    // It waits until the catalogue fits (HashTable::set_key_universe), then runs in the graph.
    EXPECT_LT(dev.device_only_steps, kSteps);
    EXPECT_GT(dev.counters.grows, 0);
    expect_equal(host, dev);
  }
  const std::string g = dynamic_gin(20000, 4, 16, 4, "uniform", "");
  expect_equal(train_dynamic(g, true), train_dynamic(g, false));
}

// Raw-id data with uniform negatives: drawn from the ids the table holds (the device pool
// against the host's), and the keys are the raw keys (+ 1).
TEST(GpuWindow, DynamicDeviceEqualsHostRawIdsTableNegatives) {
  HSTU_REQUIRE_GPU();
  const std::string g = dynamic_gin(500, 16, 32, 16, "uniform",
                                    "DatasetArgs.raw_ids = True\n"
                                    "DynamicTableArgs.capacity_ratio = 2.0\n");
  const DynamicRun host = train_dynamic(g, true), dev = train_dynamic(g, false);
  EXPECT_EQ(dev.device_only_steps, kSteps);
  expect_equal(host, dev);
}

#if defined(HSTU_WITH_NCCL)
// A dynamic item table sharded by key over a data-parallel job (one NCCL rank): the device window
// (device dedupe and negatives; the distinct keys read back and routed on the host) trains exactly
// as the host window, with evictions, dense and raw ids, in-batch and uniform negatives.
TEST(GpuWindow, DynamicShardedDeviceEqualsHost) {
  HSTU_REQUIRE_GPU();
  std::unique_ptr<dist::Comm> comm = dist::make_nccl_comm(0, 1, dist::nccl_unique_id(), 0, 120);
  const char* half = "DynamicTableArgs.capacity_ratio = 0.25\n";
  const std::string cases[] = {
      dynamic_gin(500, 16, 32, 16, "in_batch", half),
      dynamic_gin(500, 16, 32, 16, "uniform", ""),
      dynamic_gin(500, 16, 32, 16, "in_batch", std::string("DatasetArgs.raw_ids = True\n") + half),
  };
  for (const std::string& g : cases) {
    SCOPED_TRACE(g);
    const DynamicRun host = train_dynamic(g, true, comm.get());
    const DynamicRun dev = train_dynamic(g, false, comm.get());
    EXPECT_EQ(dev.device_only_steps, 0);  // the routing waits for the distinct keys
    expect_equal(host, dev);
  }
}
#endif

// Raw-id data with a table of half the catalogue: after training on the device, evaluation
// ranks the targets against the ids the table holds (DynamicItemTable::present_ids, equal to
// the device pool negatives use), and the CUDA evaluator's metrics equal the CPU reference's:
// cpu retrieval_rank over the CUDA run's normalised catalogue and queries (copied to the host)
// with every absent id filtered like a history item.
TEST(GpuWindow, DynamicRawIdsEvaluationRanksPresentKeysLikeCpu) {
  HSTU_REQUIRE_GPU();
  const Config cfg = load_config_text(dynamic_gin(500, 16, 32, 16, "uniform",
                                                  "DatasetArgs.raw_ids = True\n"
                                                  "DynamicTableArgs.capacity_ratio = 0.5\n"
                                                  "TrainerArgs.eval_batch_size = 16\n"
                                                  "RetrievalArgs.eval_rank_cap = 300\n"),
                                      "<dynamic eval>", {}, nullptr);
  test::DynamicRig rig(cfg, 11, Device::kCUDA, DType::kBF16);
  for (int64_t step = 0; step < kSteps; ++step) {
    rig.next();
    rig.run(step, 1e-3);
  }
  rig.losses();
  rig.runtime->synchronize();
  Ctx& ctx = rig.ctx();
  const SequenceDataset& ds = rig.ds;
  const DataSplits& splits = rig.splits;
  HstuModel& model = *rig.model;
  DynamicItemTable* items = rig.items.get();

  EmbeddingTable catalogue;
  catalogue.allocate("catalogue", ds.num_items, cfg.network.hidden_size, Device::kCUDA, "sgd");
  items->materialize(ctx, catalogue);
  model.set_item_table(&catalogue);
  const std::vector<int32_t> present = items->present_ids(ctx);
  ASSERT_GT(present.size(), 0u);
  ASSERT_LT(present.size(), static_cast<size_t>(ds.num_items - 1));
  Tensor pool, count;
  items->negative_pool_device(ctx, pool, count);
  rig.runtime->synchronize();
  const int32_t n_pool = host_copy<int32_t>(count, 1)[0];
  EXPECT_EQ(host_copy<int32_t>(pool, n_pool), present);

  RetrievalEvaluator eval(ds, splits.test, cfg.trainer.eval_batch_size, 0, model);
  const NamedValues got = eval.run(ctx, model, &present).values();

  // The CPU reference on the same normalised rows and queries.
  const int64_t v = ds.num_items, d = cfg.network.hidden_size;
  const int32_t cap = static_cast<int32_t>(cfg.retrieval.eval_rank_cap);
  std::vector<float> rows = host_copy<float>(model.normalized_items(ctx), v * d);
  std::vector<char> is_present(static_cast<size_t>(v), 0);
  for (int32_t id : present) is_present[static_cast<size_t>(id)] = 1;
  std::vector<int32_t> absent;
  for (int32_t id = 1; id < v; ++id)
    if (!is_present[static_cast<size_t>(id)]) absent.push_back(id);
  Batcher eb(ds, splits.test, cfg.trainer.eval_batch_size, false, 0);
  std::unique_ptr<Arena> qa = Arena::planned(Device::kCUDA, "eval queries", [&](Arena& a) {
    a.alloc(DType::kI32, {cfg.trainer.eval_batch_size});
    a.alloc(DType::kF32, {cfg.trainer.eval_batch_size, d});
  });
  RetrievalMetrics want;
  Ctx h = cpu_ctx();
  SequenceBatch b;
  for (int64_t i = 0; i < eb.num_batches(); ++i) {
    eb.get(0, i, b);
    const int32_t n = b.batch_size;
    BatchTensors& bt = model.batch_tensors();
    upload_batch(b, model.capacity(), bt);
    const Tensor out = model.encode(ctx, bt);  // [T, D] normalised
    qa->reset(0);
    const Tensor last_idx = qa->alloc(DType::kI32, {n}), qd = qa->alloc(DType::kF32, {n, d});
    std::vector<int32_t> last(static_cast<size_t>(n)), offsets = {0}, hist;
    for (int32_t s = 0; s < n; ++s) {
      last[static_cast<size_t>(s)] = b.offsets[static_cast<size_t>(s) + 1] - 1;
      hist.insert(hist.end(), b.item_ids.begin() + b.offsets[static_cast<size_t>(s)],
                  b.item_ids.begin() + b.offsets[static_cast<size_t>(s) + 1]);
      hist.insert(hist.end(), absent.begin(), absent.end());
      offsets.push_back(static_cast<int32_t>(hist.size()));
    }
    copy_bytes(last_idx.data, Device::kCUDA, last.data(), Device::kCPU, n * sizeof(int32_t));
    embedding_fwd(ctx, out, last_idx, 1.0f, Tensor(), Tensor(), qd);
    rig.runtime->synchronize();
    std::vector<float> q = host_copy<float>(qd, n * d);
    std::vector<int32_t> targets(b.eval_targets.begin(), b.eval_targets.begin() + n), ranks(n);
    retrieval_rank(
        h, Tensor(q.data(), DType::kF32, Device::kCPU, {n, d}),
        Tensor(rows.data(), DType::kF32, Device::kCPU, {v, d}),
        Tensor(targets.data(), DType::kI32, Device::kCPU, {n}),
        Tensor(offsets.data(), DType::kI32, Device::kCPU, {n + 1}),
        Tensor(hist.data(), DType::kI32, Device::kCPU, {static_cast<int64_t>(hist.size())}), cap,
        Tensor(ranks.data(), DType::kI32, Device::kCPU, {n}));
    for (int32_t r : ranks) want.add(r == cap + 2 ? cap + 1 : r);
  }
  const NamedValues wv = want.values();
  ASSERT_EQ(got.size(), wv.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k].second, wv[k].second) << got[k].first;
}

#if defined(HSTU_WITH_NCCL)
// A data-parallel step's in-batch negatives on CUDA come from the global batch's targets (as the
// CPU sampler's do), not only the rank's own: one NCCL rank is handed a global batch whose
// targets include ids its own batch lacks, and its negatives must equal the CPU sampler's with
// that pool, element for element.
TEST(GpuWindow, InBatchPoolIsTheGlobalBatch) {
  HSTU_REQUIRE_GPU();
  const Config cfg = load_config_text(gin(500, 8, 32, 16, "in_batch"), "<pool>", {}, nullptr);
  const SequenceDataset ds = open_dataset(cfg);
  const DataSplits splits = make_splits(ds, cfg.dataset.split, cfg.dataset.max_history_seqlen);
  Batcher batcher(ds, splits.train, cfg.trainer.train_batch_size, true, 7);
  ModelShape shape = retrieval_model_shape(cfg, ds.num_items);
  shape.max_pool_targets = 2 * shape.max_tokens;  // as for two ranks
  std::unique_ptr<dist::Comm> comm = dist::make_nccl_comm(0, 1, dist::nccl_unique_id(), 0, 120);
  Runtime runtime(Device::kCUDA, cfg, shape);
  HstuModel model(cfg, shape, Device::kCUDA, DType::kBF16);
  model.plan(11);
  TrainStep stepper(cfg, ds.num_items);
  SequenceBatch batch;
  for (int64_t step = 0; step < 3; ++step) {
    batcher.next(batch);
    // The "global" targets: this batch's, then ids from the top of the catalogue that a batch of
    // 8 short synthetic histories is unlikely to hold (another rank's batch).
    std::vector<int32_t> global(batch.target_ids);
    for (int32_t i = 0; i < 200; ++i)
      global.push_back(static_cast<int32_t>(ds.num_items - 1 - (i * 7 + step) % 300));
    StepShare share;
    share.comm = comm.get();
    share.global_count = supervised_tokens(batch);
    share.global_targets = global;
    stepper.run(runtime.ctx(), model, batch, step, 1e-3, share);
    runtime.synchronize();
    const Tensor negs = negatives_view(model.batch_tensors());  // [T, R]
    const int64_t t = negs.dim(0), r = negs.dim(1);
    std::vector<int32_t> got(static_cast<size_t>(t * r));
    for (int64_t i = 0; i < t; ++i)
      copy_bytes(&got[static_cast<size_t>(i * r)], Device::kCPU,
                 static_cast<int32_t*>(negs.data) + i * negs.row_stride, Device::kCUDA,
                 static_cast<size_t>(r) * sizeof(int32_t));
    const std::vector<int32_t> want = sample_negatives("in_batch", batch, ds.num_items, r,
                                                       static_cast<uint64_t>(cfg.trainer.seed),
                                                       static_cast<uint64_t>(step), 0, global);
    EXPECT_EQ(got, want) << "step " << step;
    const std::vector<int32_t> local_only = sample_negatives(
        "in_batch", batch, ds.num_items, r, static_cast<uint64_t>(cfg.trainer.seed),
        static_cast<uint64_t>(step), 0, {});
    EXPECT_NE(got, local_only) << "step " << step << ": the pool was the batch's own targets";
    stepper.drain(true);
  }
}
#endif

}  // namespace
}  // namespace hstu::test
