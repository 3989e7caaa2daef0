// test_preprocess.cpp — grouping, stable time sort, id remapping, the id-map files, the
// sequences.bin round trip, its corruption errors and the open_dataset cache.
//
// Corruption is produced by editing the written bytes, so the tests exercise exactly the
// checks a damaged cache file would hit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/data_test_util.h"
#include "data/preprocess.h"
#include "io/json.h"

namespace hstu {
namespace {

using test::error_of;
using test::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Raw events with timestamp ties; raw user 5 comes first in the file.
RawData tie_data() {
  RawData raw;
  raw.name = "ties";
  raw.num_actions = 6;
  raw.events = {
      {5, 10, 100, 1, 1}, {5, 20, 50, 2, 2},  {2, 40, 7, 3, 3},
      {5, 30, 100, 4, 4}, {5, 40, 100, 5, 5}, {2, 20, 7, 1, 6},
  };
  raw.catalogue = {40, 99, 30, 20, 10};  // 99 is never rated
  raw.contextual_names = {"sex"};
  raw.contextual_cardinalities = {3};
  raw.contextual_users = {5, 8};  // user 8 has no events; user 2 has no row
  raw.contextual_values = {2, 1};
  return raw;
}

TEST(Preprocess, StableSortAndRemap) {
  IdMaps maps;
  const SequenceDataset ds = build_dataset(tie_data(), &maps);
  EXPECT_EQ(ds.num_items, 6);  // 10, 20, 30, 40, 99 + padding
  EXPECT_EQ(maps.item_raw, (std::vector<int64_t>{0, 10, 20, 30, 40, 99}));
  EXPECT_EQ(maps.user_raw, (std::vector<int64_t>{2, 5}));
  ASSERT_EQ(ds.num_users(), 2);
  // User 0 = raw 2: both at t=7, file order 40 then 20. User 1 = raw 5: 20 (t=50), then the
  // t=100 ties in file order 10, 30, 40.
  EXPECT_EQ(std::vector<int32_t>(ds.items.begin(), ds.items.end()),
            (std::vector<int32_t>{4, 2, 2, 1, 3, 4}));
  EXPECT_EQ(std::vector<int32_t>(ds.actions.begin(), ds.actions.end()),
            (std::vector<int32_t>{3, 1, 2, 1, 4, 5}));
  EXPECT_EQ(std::vector<int64_t>(ds.user_offsets.begin(), ds.user_offsets.end()),
            (std::vector<int64_t>{0, 2, 6}));
  EXPECT_EQ(std::vector<int32_t>(ds.contextual_values.begin(), ds.contextual_values.end()),
            (std::vector<int32_t>{0, 2}));
}

TEST(Preprocess, IdMapFiles) {
  TempDir dir;
  IdMaps maps;
  const RawData raw = tie_data();
  build_dataset(raw, &maps);
  write_id_maps(raw, maps, dir.path());
  EXPECT_EQ(read_file(dir.file("item_ids.csv")), "index,raw_id\n1,10\n2,20\n3,30\n4,40\n5,99\n");
  EXPECT_EQ(read_file(dir.file("user_ids.csv")), "index,raw_id\n0,2\n1,5\n");

  RawData named;  // string ids are written by name, CSV-quoted when needed
  named.name = "named";
  named.events = {{1, 0, 1, 0, 1}, {0, 1, 2, 0, 2}};
  named.user_names = {"a,b", "c"};
  named.item_names = {"x\"y", "z"};
  build_dataset(named, &maps);
  write_id_maps(named, maps, dir.path());
  EXPECT_EQ(read_file(dir.file("item_ids.csv")), "index,raw_id\n1,\"x\"\"y\"\n2,z\n");
  EXPECT_EQ(read_file(dir.file("user_ids.csv")), "index,raw_id\n0,\"a,b\"\n1,c\n");
}

TEST(Preprocess, BinaryRoundTrip) {
  TempDir dir;
  const SequenceDataset ds = build_dataset(tie_data());
  const std::string path = dir.file("sequences.bin");
  write_sequence_file(ds, path);
  EXPECT_EQ(read_file(path).substr(0, 8), "HSTUSEQ1");
  const SequenceDataset back = read_sequence_file(path);
  EXPECT_EQ(back.name, "ties");
  EXPECT_EQ(back.num_items, ds.num_items);
  EXPECT_EQ(back.num_actions, ds.num_actions);
  EXPECT_EQ(back.contextual_names, ds.contextual_names);
  EXPECT_EQ(back.contextual_cardinalities, ds.contextual_cardinalities);
  auto eq = [](auto a, auto b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); };
  EXPECT_TRUE(eq(back.user_offsets, ds.user_offsets));
  EXPECT_TRUE(eq(back.items, ds.items));
  EXPECT_TRUE(eq(back.actions, ds.actions));
  EXPECT_TRUE(eq(back.timestamps, ds.timestamps));
  EXPECT_TRUE(eq(back.contextual_values, ds.contextual_values));

  // Without actions or contextual features.
  const SequenceDataset plain = test::make_dataset({{{1, 2, 3}}, {{3}}}, 4);
  write_sequence_file(plain, path);
  const SequenceDataset plain_back = read_sequence_file(path);
  EXPECT_TRUE(plain_back.actions.empty());
  EXPECT_TRUE(eq(plain_back.items, plain.items));
}

TEST(Preprocess, CorruptedFilesAreNamed) {
  TempDir dir;
  const std::string path = dir.file("sequences.bin");
  write_sequence_file(build_dataset(tie_data()), path);
  const std::string good = read_file(path);

  dir.write("sequences.bin", good.substr(0, good.size() - 8));
  std::string msg = error_of([&] { read_sequence_file(path); });
  EXPECT_NE(msg.find(path + ": truncated"), std::string::npos) << msg;

  dir.write("sequences.bin", good.substr(0, 40));
  msg = error_of([&] { read_sequence_file(path); });
  EXPECT_NE(msg.find(path + ": truncated"), std::string::npos) << msg;

  std::string flipped = good;
  flipped[good.size() - 20] ^= 0x10;
  dir.write("sequences.bin", flipped);
  msg = error_of([&] { read_sequence_file(path); });
  EXPECT_NE(msg.find(path + ": checksum mismatch"), std::string::npos) << msg;

  std::string magic = good;
  magic[0] = 'X';
  dir.write("sequences.bin", magic);
  msg = error_of([&] { read_sequence_file(path); });
  EXPECT_NE(msg.find("not an hstu sequence file"), std::string::npos) << msg;

  msg = error_of([&] { read_sequence_file(dir.file("missing.bin")); });
  EXPECT_NE(msg.find(dir.file("missing.bin") + ": cannot open"), std::string::npos) << msg;
}

TEST(Preprocess, InvalidContentFailsValidationOnLoad) {
  TempDir dir;
  const std::string path = dir.file("sequences.bin");
  // A well-formed file (checksum matches) whose content breaks the invariants.
  write_sequence_file(test::make_dataset({{{1, 7}}}, 4), path);
  std::string msg = error_of([&] { read_sequence_file(path); });
  EXPECT_NE(msg.find(path + ": event 1 has item id 7 outside [1, 4)"), std::string::npos) << msg;

  write_sequence_file(test::make_dataset({{{1, 2}, {30, 20}}}, 4), path);
  msg = error_of([&] { read_sequence_file(path); });
  EXPECT_NE(msg.find(path + ": user 0 is not sorted by time"), std::string::npos) << msg;

  SequenceDataset bad = test::make_dataset({{{1, 2}}, {{3}}}, 4);
  std::vector<int64_t> offsets = {0, 2, 1};
  bad.user_offsets = offsets;
  write_sequence_file(bad, path);
  msg = error_of([&] { read_sequence_file(path); });
  EXPECT_NE(msg.find(path + ": user offsets decrease at user 1"), std::string::npos) << msg;
}

void write_small_movielens(const TempDir& dir) {
  dir.write("ratings.csv",
            "userId,movieId,rating,timestamp\n"
            "7,3,4.0,300\n7,1,5.0,100\n7,2,3.5,200\n9,3,1.0,50\n9,5,2.0,50\n");
  dir.write("movies.csv", "movieId,title,genres\n1,A,x\n2,B,x\n3,C,x\n4,\"D, the\",x\n5,E,x\n");
}

TEST(Preprocess, PreprocessAndCache) {
  TempDir raw_dir, cache;
  write_small_movielens(raw_dir);
  Config cfg;
  cfg.dataset.dataset_name = "ml-latest-small";
  cfg.dataset.dataset_path = raw_dir.path();
  cfg.dataset.cache_dir = cache.path();
  DatasetReport report;
  const SequenceDataset ds = open_dataset(cfg, false, &report);
  EXPECT_FALSE(report.reused_cache);
  EXPECT_EQ(report.dir, cache.file("ml-latest-small"));
  EXPECT_EQ(ds.num_items, 6);
  EXPECT_EQ(ds.num_users(), 2);
  EXPECT_EQ(std::vector<int32_t>(ds.items.begin(), ds.items.end()),
            (std::vector<int32_t>{1, 2, 3, 3, 5}));
  EXPECT_EQ(std::vector<int32_t>(ds.actions.begin(), ds.actions.end()),
            (std::vector<int32_t>{10, 7, 8, 2, 4}));
  for (const char* f : {"sequences.bin", "item_ids.csv", "user_ids.csv", "source.json"}) {
    EXPECT_TRUE(std::filesystem::exists(cache.file(std::string("ml-latest-small/") + f))) << f;
  }

  const SequenceDataset again = open_dataset(cfg, false, &report);
  EXPECT_TRUE(report.reused_cache);
  EXPECT_EQ(again.num_events(), 5);

  // Changing a raw file (size) invalidates the cache; so does another option.
  raw_dir.write("ratings.csv",
                "userId,movieId,rating,timestamp\n7,3,4.0,300\n7,1,5.0,100\n9,3,1.0,50\n");
  EXPECT_EQ(open_dataset(cfg, false, &report).num_events(), 3);
  EXPECT_FALSE(report.reused_cache);
  open_dataset(cfg, true, &report);
  EXPECT_FALSE(report.reused_cache);
  open_dataset(cfg, true, &report);
  EXPECT_TRUE(report.reused_cache);

  // load_preprocessed reads what preprocess_raw wrote.
  TempDir out;
  preprocess_raw(cfg.dataset, out.path());
  EXPECT_EQ(load_preprocessed(out.path()).num_events(), 3);
}

// The cache is checked against its own content: a damaged, truncated or missing sequences.bin or
// id map (or a source.json without checksums) is preprocessed again, with the reason reported.
TEST(Preprocess, CacheChecksumsRebuildADamagedCache) {
  TempDir raw_dir, cache;
  write_small_movielens(raw_dir);
  Config cfg;
  cfg.dataset.dataset_name = "ml-latest-small";
  cfg.dataset.dataset_path = raw_dir.path();
  cfg.dataset.cache_dir = cache.path();
  DatasetReport report;
  const std::vector<int32_t> want = [&] {
    const SequenceDataset ds = open_dataset(cfg, false, &report);
    return std::vector<int32_t>(ds.items.begin(), ds.items.end());
  }();
  const std::string dir = cache.file("ml-latest-small");
  const Json source = json::parse_file(dir + "/source.json");
  ASSERT_TRUE(source.contains("cache_files")) << json::dump(source);
  EXPECT_EQ(json::array_at(source, "cache_files").size(), 3u);

  auto flip_last_byte = [](const std::string& path) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0x20));
  };
  struct Damage {
    std::string what, reason;
    std::function<void()> apply;
  };
  const std::vector<Damage> damages = {
      {"flipped byte in sequences.bin", "sequences.bin has CRC-32C",
       [&] { flip_last_byte(dir + "/sequences.bin"); }},
      {"truncated sequences.bin", "sequences.bin has",
       [&] { std::filesystem::resize_file(dir + "/sequences.bin", 40); }},
      {"missing item_ids.csv", "item_ids.csv is missing",
       [&] { std::filesystem::remove(dir + "/item_ids.csv"); }},
      {"damaged user_ids.csv", "user_ids.csv has CRC-32C",
       [&] { flip_last_byte(dir + "/user_ids.csv"); }},
      {"source.json without checksums", "no checksums",
       [&] {
         Json old = json::parse_file(dir + "/source.json");
         old.erase("cache_files");
         std::ofstream(dir + "/source.json") << json::dump(old, 2);
       }},
      {"damaged source.json", "source.json is damaged",
       [&] { std::ofstream(dir + "/source.json") << "{\"format_version\": "; }},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    d.apply();
    const SequenceDataset ds = open_dataset(cfg, false, &report);
    EXPECT_FALSE(report.reused_cache);
    EXPECT_NE(report.rebuild_reason.find(d.reason), std::string::npos) << report.rebuild_reason;
    EXPECT_EQ(std::vector<int32_t>(ds.items.begin(), ds.items.end()), want);
    open_dataset(cfg, false, &report);  // rebuilt: reused from now on
    EXPECT_TRUE(report.reused_cache);
    EXPECT_EQ(report.rebuild_reason, "");
  }
}

TEST(Preprocess, OpenDatasetSyntheticAndErrors) {
  Config cfg;
  cfg.synthetic.num_users = 50;
  cfg.synthetic.num_items = 100;
  cfg.synthetic.num_clusters = 5;
  const SequenceDataset ds = open_dataset(cfg);
  EXPECT_EQ(ds.name, "synthetic");
  EXPECT_EQ(ds.num_users(), 50);
  EXPECT_EQ(ds.num_items, 101);

  cfg.dataset.dataset_name = "ml-99";
  EXPECT_NE(error_of([&] { open_dataset(cfg); }).find("unknown dataset name"), std::string::npos);
  TempDir empty, cache;
  cfg.dataset.dataset_name = "ml-1m";
  cfg.dataset.dataset_path = empty.path();
  cfg.dataset.cache_dir = cache.path();
  const std::string msg = error_of([&] { open_dataset(cfg); });
  EXPECT_NE(msg.find(empty.file("ratings.dat") + ": cannot open"), std::string::npos) << msg;
}

}  // namespace
}  // namespace hstu
