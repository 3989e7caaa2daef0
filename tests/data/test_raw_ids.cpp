// test_raw_ids.cpp — the raw-id data path (DatasetArgs.raw_ids, issue 18): the string-id key
// hash, raw-key preprocessing of every id kind (numeric, string, synthetic) against the dense
// path through its id map, the version-2 sequence file and its cache, and the batches.
//
// The central check: on the real ml-latest-small, every batch of the raw-id dataset carries
// exactly id_map[dense id] wherever the dense dataset's batch carries a dense id.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/data_test_util.h"
#include "data/batch_select.h"
#include "data/batcher.h"
#include "data/key_hash.h"
#include "data/popularity.h"
#include "data/preprocess.h"
#include "data/ranking.h"
#include "data/splits.h"
#include "io/json.h"

namespace hstu {
namespace {

using test::error_of;
using test::TempDir;

const std::string kSmall = std::string(HSTU_SHARED_DATA_DIR) + "/ml-latest-small";

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The key of key_hash.h written out again, independently, byte by byte.
uint64_t reference_key(const std::string& s) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a 64 offset basis
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;  // FNV-1a 64 prime
  }
  uint64_t z = h;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z = z ^ (z >> 31);
  return z & ((uint64_t{1} << 63) - 1);
}

TEST(RawIds, StringKeyIsStableAndNonNegative) {
  // Fixed values (computed outside this code base with the formula of key_hash.h): a change of
  // the hash would silently re-key every Amazon cache and checkpoint.
  EXPECT_EQ(string_key("0000000116"), 6558290593767105398);
  EXPECT_EQ(string_key("B000GQG5MA"), 4871471754436470662);
  EXPECT_EQ(string_key(""), 8442584544778250395);
  for (const char* s : {"0000000116", "B000GQG5MA", "", "a", "A", "u1"}) {
    EXPECT_EQ(static_cast<uint64_t>(string_key(s)), reference_key(s)) << s;
    EXPECT_GE(string_key(s), 0) << s;
  }
  static_assert(string_key("x") != kNoKey);
}

// Every raw-id batch equals the dense batch mapped through the id map: keys where ids are,
// kNoKey where the dense array says "none", and the dense arrays hold the catalogue indices,
// which for numeric ids are the dense ids.
void expect_batches_match(const SequenceBatch& dense, const SequenceBatch& raw,
                          const std::vector<int64_t>& id_map) {
  ASSERT_EQ(raw.offsets, dense.offsets);
  ASSERT_EQ(raw.item_keys.size(), dense.item_ids.size());
  ASSERT_EQ(raw.target_keys.size(), dense.target_ids.size());
  ASSERT_EQ(raw.eval_target_keys.size(), dense.eval_targets.size());
  auto key = [&](int32_t id) { return id == 0 ? kNoKey : id_map.at(static_cast<size_t>(id)); };
  for (size_t t = 0; t < dense.item_ids.size(); ++t) {
    ASSERT_EQ(raw.item_keys[t], key(dense.item_ids[t])) << t;
    ASSERT_EQ(raw.target_keys[t], key(dense.target_ids[t])) << t;
    ASSERT_EQ(raw.item_ids[t], dense.item_ids[t]) << t;
    ASSERT_EQ(raw.target_ids[t], dense.target_ids[t]) << t;
  }
  for (size_t b = 0; b < dense.eval_targets.size(); ++b) {
    ASSERT_EQ(raw.eval_target_keys[b], key(dense.eval_targets[b])) << b;
    ASSERT_EQ(raw.eval_targets[b], dense.eval_targets[b]) << b;
  }
  EXPECT_EQ(raw.actions, dense.actions);
  EXPECT_EQ(raw.timestamps, dense.timestamps);
  EXPECT_EQ(raw.query_timestamps, dense.query_timestamps);
  EXPECT_EQ(raw.user_ids, dense.user_ids);
  EXPECT_EQ(raw.num_candidates, dense.num_candidates);
  EXPECT_EQ(raw.contextual, dense.contextual);
}

TEST(RawIds, MovieLensSmallMatchesTheDensePathThroughTheIdMap) {
  if (!std::filesystem::exists(kSmall + "/ratings.csv")) GTEST_SKIP() << kSmall << " not found";
  TempDir cache;
  Config cfg;
  cfg.dataset.dataset_name = "ml-latest-small";
  cfg.dataset.dataset_path = kSmall;
  cfg.dataset.cache_dir = cache.path();
  const SequenceDataset dense = open_dataset(cfg);
  cfg.dataset.raw_ids = true;
  DatasetReport report;
  const SequenceDataset raw = open_dataset(cfg, false, &report);
  EXPECT_EQ(report.dir, cache.file("ml-latest-small-raw"));
  EXPECT_TRUE(raw.raw_ids());
  EXPECT_TRUE(raw.items.empty());
  EXPECT_EQ(raw.num_events(), 100004);
  EXPECT_EQ(raw.num_items, 9126);  // 9125 movies + padding, as the dense path
  EXPECT_EQ(raw.catalogue_keys.back(), 164979);

  // The dense path's item map, read from its file (index,raw_id).
  std::vector<int64_t> id_map(static_cast<size_t>(dense.num_items), kNoKey);
  {
    std::ifstream in(cache.file("ml-latest-small/item_ids.csv"));
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      const size_t comma = line.find(',');
      id_map.at(std::stoul(line.substr(0, comma))) = std::stoll(line.substr(comma + 1));
    }
  }
  ASSERT_EQ(dense.num_events(), raw.num_events());
  EXPECT_EQ(std::vector<int64_t>(raw.user_offsets.begin(), raw.user_offsets.end()),
            std::vector<int64_t>(dense.user_offsets.begin(), dense.user_offsets.end()));
  for (int64_t e = 0; e < dense.num_events(); ++e) {
    ASSERT_EQ(raw.item_keys[e], id_map[static_cast<size_t>(dense.items[e])]) << e;
    ASSERT_EQ(item_index(raw, e), dense.items[e]) << e;  // numeric ids: same order
  }
  EXPECT_EQ(std::vector<int64_t>(raw.catalogue_keys.begin(), raw.catalogue_keys.end()),
            std::vector<int64_t>(id_map.begin() + 1, id_map.end()));
  // No item id map in the raw cache; source.json says raw_ids and checksums its two files.
  EXPECT_FALSE(std::filesystem::exists(cache.file("ml-latest-small-raw/item_ids.csv")));
  EXPECT_TRUE(std::filesystem::exists(cache.file("ml-latest-small-raw/user_ids.csv")));
  const Json source = json::parse_file(cache.file("ml-latest-small-raw/source.json"));
  EXPECT_TRUE(source.at("raw_ids").get<bool>());
  EXPECT_EQ(source.at("cache_files").size(), 2u);

  // Leave-one-out batches, shuffled, in both splits.
  for (const char* mode : {"paper", "validation"}) {
    const DataSplits ds_dense = make_splits(dense, mode, 50);
    const DataSplits ds_raw = make_splits(raw, mode, 50);
    Batcher bd(dense, ds_dense.train, 64, true, 11), br(raw, ds_raw.train, 64, true, 11);
    ASSERT_EQ(bd.num_batches(), br.num_batches());
    SequenceBatch a, b;
    for (int64_t i = 0; i < bd.num_batches(); ++i) {
      bd.next(a);
      br.next(b);
      expect_batches_match(a, b, id_map);
    }
    Batcher td(dense, ds_dense.test, 100, false, 0), tr(raw, ds_raw.test, 100, false, 0);
    td.next(a);
    tr.next(b);
    expect_batches_match(a, b, id_map);
    // A data-parallel rank's share carries its samples' keys.
    SequenceBatch sa, sb;
    const std::vector<int64_t> pick = {5, 0, 99};
    select_samples(a, pick, sa);
    select_samples(b, pick, sb);
    expect_batches_match(sa, sb, id_map);
  }
  // Ranking samples (candidates are the tail of item_keys).
  DatasetArgs rargs;
  rargs.max_history_seqlen = 30;
  rargs.max_num_candidates = 5;
  rargs.ranking_train_windows = 2;
  const RankingSplits rd = make_ranking_splits(dense, rargs), rr = make_ranking_splits(raw, rargs);
  ASSERT_EQ(rd.train.samples.size(), rr.train.samples.size());
  Batcher kd = ranking_batcher(dense, rd.train, 32, true, 3);
  Batcher kr = ranking_batcher(raw, rr.train, 32, true, 3);
  SequenceBatch a, b;
  for (int64_t i = 0; i < 5; ++i) {
    kd.next(a);
    kr.next(b);
    expect_batches_match(a, b, id_map);
  }
  // The popularity baseline ranks the same in both modes.
  const DataSplits sd = make_splits(dense, "paper", 50), sr = make_splits(raw, "paper", 50);
  EXPECT_EQ(popularity_ranks(dense, sd.test, popularity_counts(dense, sd.train)),
            popularity_ranks(raw, sr.test, popularity_counts(raw, sr.train)));

  // The raw cache is reused, and a damaged one rebuilt (its CRC covers the key arrays).
  open_dataset(cfg, false, &report);
  EXPECT_TRUE(report.reused_cache);
  {
    std::fstream f(cache.file("ml-latest-small-raw/sequences.bin"),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  const SequenceDataset rebuilt = open_dataset(cfg, false, &report);
  EXPECT_FALSE(report.reused_cache);
  EXPECT_TRUE(contains(report.rebuild_reason, "sequences.bin has CRC-32C"))
      << report.rebuild_reason;
  EXPECT_EQ(rebuilt.item_keys[12345], raw.item_keys[12345]);
}

TEST(RawIds, SequenceFileVersion2RoundTripAndChecks) {
  RawData r;
  r.name = "tiny";
  r.num_actions = 3;
  r.events = {{4, 900, 10, 1, 1}, {4, 7, 5, 2, 2}, {8, 900, 1, 0, 3}, {8, 0, 2, 1, 4}};
  r.catalogue = {7, 900, 0, 55};  // 55 is never rated; 0 is a valid raw id (not padding)
  IdMaps maps;
  const SequenceDataset ds = build_dataset(r, &maps, "file", true);
  EXPECT_TRUE(maps.item_raw.empty());
  EXPECT_EQ(maps.user_raw, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(ds.num_items, 5);
  EXPECT_EQ(std::vector<int64_t>(ds.catalogue_keys.begin(), ds.catalogue_keys.end()),
            (std::vector<int64_t>{0, 7, 55, 900}));
  EXPECT_EQ(std::vector<int64_t>(ds.item_keys.begin(), ds.item_keys.end()),
            (std::vector<int64_t>{7, 900, 900, 0}));  // time-sorted per user

  TempDir dir;
  const std::string path = dir.file("sequences.bin");
  write_sequence_file(ds, path);
  const SequenceDataset back = read_sequence_file(path);
  EXPECT_TRUE(back.raw_ids());
  EXPECT_EQ(std::vector<int64_t>(back.item_keys.begin(), back.item_keys.end()),
            std::vector<int64_t>(ds.item_keys.begin(), ds.item_keys.end()));
  EXPECT_EQ(std::vector<int64_t>(back.catalogue_keys.begin(), back.catalogue_keys.end()),
            std::vector<int64_t>(ds.catalogue_keys.begin(), ds.catalogue_keys.end()));
  EXPECT_EQ(std::vector<int32_t>(back.actions.begin(), back.actions.end()),
            std::vector<int32_t>(ds.actions.begin(), ds.actions.end()));
  // Version 2 with the raw-key flag; a version/flag mismatch is named.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    bytes = os.str();
  }
  EXPECT_EQ(bytes[8], 2);
  bytes[8] = 1;  // claims dense ids
  dir.write("v1.bin", bytes);
  EXPECT_TRUE(contains(error_of([&] { read_sequence_file(dir.file("v1.bin")); }),
                       "v1.bin: header flags 3 do not match sequence file version 1"));

  // A negative numeric id cannot be a key (-1 is "no item"): named with its file line.
  r.sources = {{"ratings.csv", 0}};
  r.events[2].item = -3;
  EXPECT_EQ(error_of([&] { build_dataset(r, nullptr, "file", true); }),
            "ratings.csv:3: item id -3 is negative; DatasetArgs.raw_ids needs item ids >= 0 (-1 "
            "marks no item)");
}

TEST(RawIds, StringIdsAreHashedAndSyntheticIdsKept) {
  TempDir dir;
  std::string rows;
  const char* books[] = {"B1", "B2", "B3", "B4", "B5"};
  for (int u = 1; u <= 5; ++u)
    for (int i = 0; i < 5; ++i)
      rows += detail::cat("u", u, ",", books[i], ",5.0,", 10 * i + u, "\n");
  const std::string file = dir.write("ratings_Books.csv", rows);
  const RawData raw = read_amazon_books(file);
  IdMaps maps;
  const SequenceDataset dense = build_dataset(raw, &maps);
  const SequenceDataset keyed = build_dataset(raw, nullptr, "file", true);
  ASSERT_EQ(keyed.num_events(), dense.num_events());
  for (int64_t e = 0; e < dense.num_events(); ++e) {
    const std::string& name = raw.item_names.at(static_cast<size_t>(maps.item_raw[dense.items[e]]));
    ASSERT_EQ(keyed.item_keys[e], string_key(name)) << e;
  }
  EXPECT_EQ(keyed.catalogue_keys.size(), 5u);

  // Through the config: the Amazon reader in raw-id mode.
  TempDir cache;
  Config cfg;
  cfg.dataset.dataset_name = "amzn-books";
  cfg.dataset.dataset_path = file;
  cfg.dataset.cache_dir = cache.path();
  cfg.dataset.raw_ids = true;
  const SequenceDataset opened = open_dataset(cfg);
  EXPECT_EQ(opened.item_keys[0], keyed.item_keys[0]);

  // Synthetic: each generated id is its own key.
  Config syn;
  syn.dataset.raw_ids = true;
  syn.synthetic.num_users = 50;
  syn.synthetic.num_items = 100;
  const SequenceDataset sk = open_dataset(syn);
  syn.dataset.raw_ids = false;
  const SequenceDataset sd = open_dataset(syn);
  ASSERT_EQ(sk.num_events(), sd.num_events());
  for (int64_t e = 0; e < sd.num_events(); ++e) ASSERT_EQ(sk.item_keys[e], sd.items[e]);
  EXPECT_EQ(sk.catalogue_keys.size(), 100u);
}

}  // namespace
}  // namespace hstu
