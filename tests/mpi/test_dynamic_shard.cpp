// test_dynamic_shard.cpp — a dynamic item table sharded by key over W CPU ranks (mpirun -np 2 /
// 4; train/dynamic_shard.h): the table step on W ranks equals one table fed every rank's ids
// (bitwise, with gradients summed in rank order), evaluation's catalogue equals it, eviction
// counters are the ranks' sums, a retrieval run on W ranks with batch B equals one rank with
// batch W*B (loss, dense weights, every key's row and optimiser state, metrics), and checkpoints
// load across rank counts (W -> W bit-exact, W -> 1, 1 -> W, and every key kept by exactly one
// rank of any other count).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/load.h"
#include "embed/table_checkpoint.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "mpi/mpi_test_util.h"
#include "train/dynamic_item_table.h"
#include "train/dynamic_shard_checkpoint.h"
#include "train/trainer.h"

namespace hstu::dist {
namespace {

constexpr int64_t kDim = 8;

embed::DynamicTableSpec table_spec(const std::string& eviction, int64_t capacity) {
  embed::DynamicTableSpec s;
  s.name = "item_embedding";
  s.dim = kDim;
  s.capacity_rows = s.max_capacity_rows = capacity;
  s.bucket_size = 8;
  s.eviction = eviction;
  s.optimizer = "adam";
  s.seed = 5;
  return s;
}

// Rank r's ids of step `step` (catalogue indices = keys), overlapping between ranks.
std::vector<int32_t> rank_ids(int rank, int64_t step, int64_t n, int32_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(1 + (static_cast<uint64_t>(rank) * 7919u +
                                                            static_cast<uint64_t>(step) * 104729u +
                                                            static_cast<uint64_t>(i * i) * 31u) %
                                                               static_cast<uint64_t>(vocab - 1));
  return ids;
}

// A gradient row for (rank, key): multiples of 2^-10 below 1, so sums of a few are exact in any
// order and the comparison with the reference checks the routing bit for bit.
float grad_of(int rank, int64_t key, int64_t col, int64_t step) {
  const int64_t v = (key * 37 + col * 11 + rank * 5 + step * 3) % 17 - 8;
  return static_cast<float>(v) / 1024.0f;
}

std::vector<float> rows_of(const Tensor& t, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n * kDim));
  copy_bytes(v.data(), Device::kCPU, t.data, t.device, v.size() * sizeof(float));
  return v;
}

OptimizerArgs adam_args() {
  OptimizerArgs o;
  o.sparse_optimizer_str = "adam";
  return o;
}

// Training steps of the sharded table on every rank and of one local table fed all ranks' ids
// (each rank runs the reference itself): the fetched window rows, after each step's update, and
// the materialised catalogue are bitwise equal. The window of a rank holds its own keys; the
// reference's gradient of a key is the sum of the ranks' rows in rank order, as the owners add
// them.
TEST(DynamicShard, StepsEqualOneTableFedEveryRanksIds) {
  Comm& c = world();
  const int w = c.size(), me = c.rank();
  constexpr int32_t kVocab = 97;
  constexpr int64_t kIds = 24, kSteps = 6;
  for (const dist::OwnerKind owner : {dist::OwnerKind::kModulo, dist::OwnerKind::kHash}) {
    Ctx ctx = cpu_ctx();
    const embed::DynamicTableSpec spec = table_spec("none", 4 * kVocab);
    DynamicItemTable sharded(shard_table_spec(spec, w), Device::kCPU, kIds + 1, {}, &c, owner);
    DynamicItemTable ref(spec, Device::kCPU, w * kIds + 1);
    for (int64_t step = 0; step < kSteps; ++step) {
      std::vector<int32_t> mine = rank_ids(me, step, kIds, kVocab);
      const std::vector<int32_t> original = mine;
      const std::span<int32_t> spans[] = {mine};
      const int64_t u = sharded.fetch(ctx, step, spans);
      // The reference: every rank's ids in one window.
      std::vector<int32_t> all;
      for (int r = 0; r < w; ++r) {
        const std::vector<int32_t> ids = rank_ids(r, step, kIds, kVocab);
        all.insert(all.end(), ids.begin(), ids.end());
      }
      const std::vector<int32_t> all_ids = all;
      const std::span<int32_t> ref_spans[] = {all};
      const int64_t ru = ref.fetch(ctx, step, ref_spans);
      const std::vector<float> got = rows_of(sharded.window().weight, u);
      const std::vector<float> want = rows_of(ref.window().weight, ru);
      int64_t differ = 0;  // no ASSERT here: a rank leaving early would strand the others
      for (int64_t i = 0; i < kIds; ++i)
        for (int64_t d = 0; d < kDim; ++d)
          differ += got[static_cast<size_t>(mine[static_cast<size_t>(i)] * kDim + d)] !=
                    want[static_cast<size_t>(all[static_cast<size_t>(me * kIds + i)] * kDim + d)];
      EXPECT_EQ(differ, 0) << "window values differing from the reference at step " << step;
      // Gradients: rank r's row of key k on its window row; the reference sums them in rank
      // order from zero, as the owner does.
      std::vector<float> g(static_cast<size_t>(u * kDim), 0.0f), rg(static_cast<size_t>(ru * kDim));
      std::vector<uint8_t> t(static_cast<size_t>(u), 0), rt(static_cast<size_t>(ru), 0);
      for (int64_t i = 0; i < kIds; ++i) {
        const int32_t row = mine[static_cast<size_t>(i)];
        t[static_cast<size_t>(row)] = 1;
        for (int64_t d = 0; d < kDim; ++d)
          g[static_cast<size_t>(row * kDim + d)] =
              grad_of(me, original[static_cast<size_t>(i)], d, step);
      }
      for (int r = 0; r < w; ++r) {
        std::vector<bool> seen(static_cast<size_t>(ru), false);
        for (int64_t i = 0; i < kIds; ++i) {
          const int32_t row = all[static_cast<size_t>(r * kIds + i)];
          if (seen[static_cast<size_t>(row)]) continue;  // a rank's window row counts once
          seen[static_cast<size_t>(row)] = true;
          rt[static_cast<size_t>(row)] = 1;
          for (int64_t d = 0; d < kDim; ++d)
            rg[static_cast<size_t>(row * kDim + d)] +=
                grad_of(r, all_ids[static_cast<size_t>(r * kIds + i)], d, step);
        }
      }
      copy_bytes(sharded.window().grad.data, Device::kCPU, g.data(), Device::kCPU,
                 g.size() * sizeof(float));
      copy_bytes(sharded.window().touched.data, Device::kCPU, t.data(), Device::kCPU, t.size());
      copy_bytes(ref.window().grad.data, Device::kCPU, rg.data(), Device::kCPU,
                 rg.size() * sizeof(float));
      copy_bytes(ref.window().touched.data, Device::kCPU, rt.data(), Device::kCPU, rt.size());
      sharded.update(ctx, adam_args(), 0.05, step + 1, Tensor(), Tensor());
      ref.update(ctx, adam_args(), 0.05, step + 1, Tensor(), Tensor());
    }
    // Each rank's table holds only its keys; together the reference's.
    const embed::TableRows mine = sharded.table().export_rows(ctx);
    for (const int64_t k : mine.keys) EXPECT_EQ(dist::key_owner(k, w, owner), me) << k;
    EXPECT_EQ(c.all_reduce_host(static_cast<int64_t>(mine.keys.size()), ReduceOp::kSum),
              ref.table().size());
    EXPECT_EQ(sharded.counters().size, ref.counters().size);
    EXPECT_EQ(sharded.counters().inserts, ref.counters().inserts);
    // Evaluation's catalogue: every row (trained, or initial for keys never seen) bitwise.
    EmbeddingTable a, b;
    a.allocate("a", kVocab + 5, kDim, Device::kCPU, "sgd");
    b.allocate("b", kVocab + 5, kDim, Device::kCPU, "sgd");
    sharded.materialize(ctx, a);
    ref.materialize(ctx, b);
    EXPECT_EQ(rows_of(a.weight, kVocab + 5), rows_of(b.weight, kVocab + 5));
  }
}

// LRU eviction in tables too small for the ids: the counters reported are the ranks' sums, and
// every rank's keys stay its own.
TEST(DynamicShard, EvictionCountersAreSummedOverRanks) {
  Comm& c = world();
  const int w = c.size(), me = c.rank();
  Ctx ctx = cpu_ctx();
  constexpr int32_t kVocab = 1000;
  constexpr int64_t kIds = 40;
  const embed::DynamicTableSpec spec = table_spec("lru", 16 * w);
  DynamicItemTable sharded(shard_table_spec(spec, w), Device::kCPU, kIds + 1, {}, &c,
                           dist::OwnerKind::kHash);
  for (int64_t step = 0; step < 8; ++step) {
    std::vector<int32_t> ids = rank_ids(me, step, kIds, kVocab);
    const std::span<int32_t> spans[] = {ids};
    const int64_t u = sharded.fetch(ctx, step, spans);
    fill_zero(sharded.window().grad.rows(0, u));
    sharded.update(ctx, adam_args(), 0.05, step + 1, Tensor(), Tensor());
  }
  const embed::DynamicTableCounters own = sharded.table().counters(), sum = sharded.counters();
  EXPECT_EQ(sum.evictions, c.all_reduce_host(own.evictions, ReduceOp::kSum));
  EXPECT_EQ(sum.inserts, c.all_reduce_host(own.inserts, ReduceOp::kSum));
  EXPECT_EQ(sum.size, c.all_reduce_host(own.size, ReduceOp::kSum));
  EXPECT_EQ(sum.capacity, c.all_reduce_host(own.capacity, ReduceOp::kSum));
  EXPECT_GT(sum.evictions, 0) << "the tables were meant to overflow";
  EXPECT_LE(own.capacity, 2 * shard_table_spec(spec, w).capacity_rows);
  for (const int64_t k : sharded.table().export_rows(ctx).keys)
    EXPECT_EQ(dist::key_owner(k, w, dist::OwnerKind::kHash), me);
}

// Per-rank capacities: recsys-examples' align(ceil(N / W), bucket).
TEST(DynamicShard, PerRankCapacityIsAnAlignedShare) {
  embed::DynamicTableSpec s = table_spec("lru", 1000);
  s.bucket_size = 32;
  s.max_capacity_rows = 4000;
  const embed::DynamicTableSpec a = shard_table_spec(s, 3);
  EXPECT_EQ(a.capacity_rows, 352);  // ceil(1000 / 3) = 334 -> 352
  EXPECT_EQ(a.max_capacity_rows, 1344);
  EXPECT_EQ(a.gpu_cache_rows, 0);
  EXPECT_EQ(shard_table_spec(s, 1).capacity_rows, 1000);
}

// --- whole runs -------------------------------------------------------------------------------

Config dyn_config(const std::string& run_dir, int64_t batch, const std::string& owner,
                  bool raw_ids) {
  return retrieval_config(run_dir, batch, R"(
OptimizerArgs.sparse_optimizer_str = "adam"
DynamicTableArgs.tables = ["item"]
DynamicTableArgs.eviction = "none"
DynamicTableArgs.capacity_ratio = 4.0
)",
                          {"TrainerArgs.shard_owner=\"" + owner + "\"",
                           std::string("DatasetArgs.raw_ids=") + (raw_ids ? "True" : "False")});
}

std::string save_at(const std::string& run_dir, int64_t step = 20) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%09lld", static_cast<long long>(step));
  return run_dir + "/checkpoints/" + name;
}

// The dynamic item table of a checkpoint, key -> row (embedding | Adam m, v), from its one file
// or every rank's.
std::map<int64_t, std::vector<float>> table_rows(const std::string& dir) {
  std::vector<std::string> files;
  const std::string index = dir + "/" + dynamic_shard_index_name("item_embedding");
  if (std::filesystem::exists(index)) {
    const Json j = json::parse_file(index);
    for (const Json& f : json::array_at(j, "files"))
      files.push_back(dir + "/" + json::string_at(f, "file"));
  } else {
    files.push_back(embed::dynamic_table_file(dir, "item_embedding"));
  }
  std::map<int64_t, std::vector<float>> out;
  for (const std::string& path : files) {
    const SafetensorsFile f(path);
    const auto& k = f.get("keys");
    const auto& v = f.get("values");
    const int64_t n = k.numel(), width = v.shape[1];
    for (int64_t i = 0; i < n; ++i) {
      int64_t key;
      std::memcpy(&key, k.bytes.data() + i * 8, 8);
      std::vector<float> row(static_cast<size_t>(width));
      std::memcpy(row.data(), v.bytes.data() + i * width * 4, static_cast<size_t>(width) * 4);
      EXPECT_TRUE(out.emplace(key, std::move(row)).second) << "key " << key << " twice";
    }
  }
  return out;
}

// Largest |a - b| / (1 + |b|) between two saves (the key sets must be equal), apart over the
// weights (the dense ones and each key's embedding) and over the dynamic rows' Adam state (m, v).
struct SaveDiff {
  double weights = 0, state = 0;
  double max() const { return std::max(weights, state); }
};

SaveDiff save_diff(const std::string& a_dir, const std::string& b_dir) {
  SaveDiff worst;
  auto cmp = [&](const std::vector<float>& a, const std::vector<float>& b, const std::string& n,
                 size_t weights) {  // elements [0, weights) are weights, the rest state
    EXPECT_EQ(a.size(), b.size()) << n;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      const double d = std::abs(double(a[i]) - double(b[i])) / (1.0 + std::abs(double(b[i])));
      double& w = i < weights ? worst.weights : worst.state;
      w = std::max(w, d);
    }
  };
  const SafetensorsFile fa(a_dir + "/model.safetensors"), fb(b_dir + "/model.safetensors");
  EXPECT_EQ(fa.names(), fb.names());
  for (const std::string& n : fb.names()) {
    if (!fa.contains(n)) continue;
    const auto &ea = fa.get(n), &eb = fb.get(n);
    std::vector<float> a(static_cast<size_t>(ea.numel())), b(static_cast<size_t>(eb.numel()));
    std::memcpy(a.data(), ea.bytes.data(), a.size() * 4);
    std::memcpy(b.data(), eb.bytes.data(), b.size() * 4);
    cmp(a, b, n, b.size());
  }
  const auto ta = table_rows(a_dir), tb = table_rows(b_dir);
  EXPECT_EQ(ta.size(), tb.size()) << "keys in the dynamic table";
  for (const auto& [key, row] : tb) {
    const auto it = ta.find(key);
    EXPECT_NE(it, ta.end()) << "key " << key << " missing";
    if (it != ta.end()) cmp(it->second, row, "key " + std::to_string(key), row.size() / 3);
  }
  return worst;
}

double max_rel_diff(const std::string& a_dir, const std::string& b_dir) {
  return save_diff(a_dir, b_dir).max();
}

// The last "item_table" record of a run's metrics.jsonl.
Json item_table_record(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  Json last;
  for (std::string line; std::getline(in, line);) {
    const Json r = json::parse(line, "metrics.jsonl");
    if (r.value("event", "") == "item_table") last = r;
  }
  return last;
}

TrainSummary run(const Config& cfg, Comm* comm, const std::string& resume = "") {
  TrainOptions opts;
  opts.quiet = true;
  opts.comm = comm;
  opts.resume_dir = resume;
  return train(cfg, opts);
}

// W ranks x batch 8 train what one rank with batch 8W trains: loss, dense weights, every key's
// row and Adam state, the test metrics, and the summed counters; dense ids with the modulo owner
// and raw ids (keys = id + 1) with the hash owner.
TEST(DynamicShard, RetrievalEqualsOneRankWithTheWholeBatch) {
  Comm& c = world();
  for (const bool raw : {false, true}) {
    const std::string owner = raw ? "hash" : "modulo";
    const std::string dir = shared_dir("dynamic_train_" + owner);
    const Config a = dyn_config(dir + "/dist", 8, owner, raw);
    const TrainSummary d = run(a, &c);
    const std::unique_ptr<Comm> alone = make_local_comm(Device::kCPU);
    const Config b = dyn_config(dir + "/ref", 8 * c.size(), owner, raw);
    const TrainSummary r = c.is_root() ? run(b, alone.get()) : TrainSummary{};
    c.barrier();
    if (c.is_root()) {
      EXPECT_TRUE(std::filesystem::exists(save_at(a.trainer.run_dir) + "/" +
                                          dynamic_shard_index_name("item_embedding")));
      const SaveDiff diff = save_diff(save_at(a.trainer.run_dir), save_at(b.trainer.run_dir));
      std::printf(
          "[ measured ] %d ranks vs one rank (%s): weights within %.3g, Adam state within %.3g\n",
          c.size(), owner.c_str(), diff.weights, diff.state);
      // NOTE: the ranks sum the gradients in another order. The weights stay close; the Adam
      // first moments of a few keys differ more (likely: keys whose per-sample gradients largely
      // cancel, so the order's rounding is large against their sum m, which no normalisation
      // scales down as the step's m / sqrt(v) is). Measured (session 18): weights 1.5e-6 /
      // 3.0e-7, state 3.5e-4 / 5.9e-5 at 4 ranks (modulo / hash; the worst, key 40's m[1]:
      // 0.33563 vs 0.33610), weights 1.2e-7 / 7.3e-8, state 1.1e-5 / 1.2e-5 at 2; earlier boxes
      // measured at most 4.4e-5 for both together.
      EXPECT_LT(diff.weights, 5e-5)
          << c.size() << " ranks vs one rank with the whole batch (" << owner << ")";
      EXPECT_LT(diff.state, 1e-3) << c.size() << " ranks vs one rank with the whole batch ("
                                  << owner << "): Adam state";
      EXPECT_EQ(d.steps, 20);
      EXPECT_NEAR(d.last_loss, r.last_loss, 1e-4 * (1 + std::abs(r.last_loss)));
      EXPECT_EQ(d.final_test.size(), r.final_test.size());
      for (size_t i = 0; i < std::min(r.final_test.size(), d.final_test.size()); ++i)
        EXPECT_NEAR(d.final_test[i].second, r.final_test[i].second, 0.02) << r.final_test[i].first;
      const Json cd = item_table_record(a.trainer.run_dir),
                 cr = item_table_record(b.trainer.run_dir);
      for (const char* k : {"size", "inserts", "evictions", "rejections"})
        EXPECT_EQ(json::int_at(cd, k), json::int_at(cr, k)) << k << " summed over the ranks";
    }
    c.barrier();
    if (c.is_root() && !std::getenv("HSTU_KEEP")) std::filesystem::remove_all(dir);
  }
}

// Save on W ranks at step 10, then continue: on W ranks (bit for bit the uninterrupted run), on
// one rank with batch 8W (equal up to the order of the sums); a one-rank save continued on W
// ranks; and the W-rank save's keys split over any other rank count exactly once each.
TEST(DynamicShard, CheckpointsLoadOnAnyRankCount) {
  Comm& c = world();
  const int w = c.size();
  const std::string dir = shared_dir("dynamic_resume");
  Config full = dyn_config(dir + "/full", 8, "hash", true);
  full.trainer.ckpt_save_interval = 10;
  full.trainer.ckpt_keep = 3;
  run(full, &c);
  const std::string at10 = save_at(dir + "/full", 10);
  run(dyn_config(dir + "/again", 8, "hash", true), &c, at10);
  const std::unique_ptr<Comm> alone = make_local_comm(Device::kCPU);
  // One rank: continues the W-rank save, and writes a save of its own for W ranks to continue.
  Config ref = dyn_config(dir + "/ref", 8 * w, "hash", true);
  ref.trainer.ckpt_save_interval = 10;
  ref.trainer.ckpt_keep = 3;
  if (c.is_root()) {
    EXPECT_EQ(max_rel_diff(save_at(dir + "/again"), save_at(dir + "/full")), 0.0)
        << "a resume on the same ranks is bit-exact";
    run(dyn_config(dir + "/one", 8 * w, "hash", true), alone.get(), at10);
    EXPECT_LT(max_rel_diff(save_at(dir + "/one"), save_at(dir + "/full")), 2e-4)
        << "one rank continuing a " << w << "-rank save";
    run(ref, alone.get());
  }
  c.barrier();
  run(dyn_config(dir + "/from_one", 8, "hash", true), &c, save_at(dir + "/ref", 10));
  if (c.is_root()) {
    EXPECT_LT(max_rel_diff(save_at(dir + "/from_one"), save_at(dir + "/ref")), 2e-4)
        << w << " ranks continuing a one-rank save";
  }
  // Resharding of the table alone: the W-rank save onto M ranks, M = 1 .. 2W + 1, each rank
  // keeping its keys (modulo and hash): every key exactly once, with its saved row.
  if (c.is_root()) {
    Ctx ctx = cpu_ctx();
    const auto saved = table_rows(at10);
    EXPECT_GT(saved.size(), 100u) << "keys saved at step 10";
    embed::DynamicTableSpec spec = table_spec("none", 1024);
    spec.dim = 16;
    for (const dist::OwnerKind owner : {dist::OwnerKind::kModulo, dist::OwnerKind::kHash})
      for (int m = 1; m <= 2 * w + 1; ++m) {
        std::map<int64_t, std::vector<float>> got;
        for (int r = 0; r < m; ++r) {
          embed::DynamicTable t(spec, Device::kCPU);
          load_dynamic_any(ctx, t, at10,
                           [&](int64_t k) { return dist::key_owner(k, m, owner) == r; });
          const embed::TableRows rows = t.export_rows(ctx);
          const int64_t width = t.row_width();
          for (size_t i = 0; i < rows.keys.size(); ++i) {
            EXPECT_EQ(dist::key_owner(rows.keys[i], m, owner), r);
            EXPECT_TRUE(
                got.emplace(rows.keys[i], std::vector<float>(rows.values.begin() + i * width,
                                                             rows.values.begin() + (i + 1) * width))
                    .second);
          }
        }
        EXPECT_EQ(got.size(), saved.size())
            << "onto " << m << " ranks (" << owner_name(owner) << ")";
        EXPECT_TRUE(got == saved) << "onto " << m << " ranks (" << owner_name(owner) << ")";
      }
  }
  c.barrier();
  if (c.is_root() && !std::getenv("HSTU_KEEP")) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hstu::dist
