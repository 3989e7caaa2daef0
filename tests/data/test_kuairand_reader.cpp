// test_kuairand_reader.cpp — the KuaiRand reader on fixture files the test writes itself.
//
// Asserts:
//  - columns are found by header name (a reordered header with an extra column reads the same),
//    the action bitmask and timestamp = time_ms / 1000 are decoded, quoted range values with
//    commas are one contextual value, contextual codes are 1..K by first appearance;
//  - within a file events are stable-sorted by time_ms, so after preprocessing a user's events
//    in the same second keep millisecond order, and ties keep file order;
//  - a user present in only one period is kept; a user without a features row gets 0s;
//  - the 27K layout (two parts per period) and the data/ subfolder are found;
//  - read_raw / raw_source_files know the three names;
//  - malformed rows (field count, non-numeric id, flag not 0/1, duplicate user) and a header
//    missing a column raise errors naming file:line; skip_malformed skips and counts rows; a
//    missing file names its path.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/data_test_util.h"
#include "data/preprocess.h"
#include "data/readers.h"

namespace hstu {
namespace {

using test::error_of;
using test::TempDir;

const char* kLogHeader =
    "user_id,video_id,date,hourmin,time_ms,is_click,is_like,is_follow,is_comment,is_forward,"
    "is_hate,long_view,play_time_ms,duration_ms,profile_stay_time,comment_stay_time,"
    "is_profile_enter,is_rand,tab\n";
const char* kFeatureHeader =
    "user_id,user_active_degree,is_lowactive_period,is_live_streamer,is_video_author,"
    "follow_user_num,follow_user_num_range,fans_user_num,fans_user_num_range,friend_user_num,"
    "friend_user_num_range,register_days,register_days_range,onehot_feat0\n";

// One log row in the real column order.
std::string row(int user, int video, int64_t ms, const std::string& flags8) {
  // flags8: is_click is_like is_follow is_comment is_forward is_hate long_view is_profile_enter
  const auto f = [&](int i) { return std::string(1, flags8[i]); };
  return std::to_string(user) + "," + std::to_string(video) + ",20220408,1000," +
         std::to_string(ms) + "," + f(0) + "," + f(1) + "," + f(2) + "," + f(3) + "," + f(4) + "," +
         f(5) + "," + f(6) + ",1000,2000,0,0," + f(7) + ",0,1\n";
}

void write_features(const TempDir& dir, const std::string& name) {
  dir.write(name, std::string(kFeatureHeader) +
                      "7,high_active,0,0,0,12,\"(10,50]\",3,\"[1,10)\",0,0,40,31-60,2\n"
                      "5,full_active,0,0,1,3,\"(0,10]\",3,\"[1,10)\",9,\"[5,30)\",40,31-60,1\n"
                      "9,high_active,0,0,0,12,\"(10,50]\",0,0,0,0,400,366-730,0\n");
}

// Pure layout: user 5 in both periods, user 7 only in period 1, user 8 only in period 2 and
// without a features row; user 9 has features but no events.
void write_pure(const TempDir& dir) {
  dir.write("log_standard_4_08_to_4_21_pure.csv",
            std::string(kLogHeader) +
                row(5, 100, 1649400000900, "10000010") +  // same second as the next, later ms
                row(5, 101, 1649400000100, "11000000") + row(7, 102, 1649400005000, "00000100") +
                row(5, 103, 1649400000900, "00000001"));  // tie with line 2: file order
  dir.write("log_standard_4_22_to_5_08_pure.csv", std::string(kLogHeader) +
                                                      row(5, 104, 1650600000000, "11111111") +
                                                      row(8, 100, 1650600001234, "00100000"));
  write_features(dir, "user_features_pure.csv");
}

TEST(KuaiRandReader, DecodesPureLayout) {
  TempDir dir;
  write_pure(dir);
  const RawData raw = read_raw("kuairand-pure", dir.path());
  EXPECT_EQ(raw.name, "kuairand-pure");
  EXPECT_EQ(raw.num_actions, 256);
  ASSERT_EQ(raw.events.size(), 6u);
  // Period 1 sorted by time_ms (stable): lines 3, 2, 5, 4.
  EXPECT_EQ(raw.events[0].line, 3);
  EXPECT_EQ(raw.events[0].item, 101);
  EXPECT_EQ(raw.events[0].action, 1 | 2);
  EXPECT_EQ(raw.events[1].line, 2);
  EXPECT_EQ(raw.events[1].action, 1 | 64);
  EXPECT_EQ(raw.events[1].timestamp, 1649400000);
  EXPECT_EQ(raw.events[2].line, 5);
  EXPECT_EQ(raw.events[2].action, 128);
  EXPECT_EQ(raw.events[3].user, 7);
  EXPECT_EQ(raw.events[3].action, 32);
  EXPECT_EQ(raw.events[4].action, 255);
  EXPECT_EQ(raw.events[5].action, 4);
  EXPECT_EQ(raw.source_of(3), dir.file("log_standard_4_08_to_4_21_pure.csv"));
  EXPECT_EQ(raw.source_of(4), dir.file("log_standard_4_22_to_5_08_pure.csv"));

  EXPECT_EQ(raw.contextual_names,
            (std::vector<std::string>{"user_active_degree", "follow_user_num_range",
                                      "fans_user_num_range", "friend_user_num_range",
                                      "register_days_range"}));
  EXPECT_EQ(raw.contextual_users, (std::vector<int64_t>{7, 5, 9}));
  // Degrees high=1 full=2; follow (10,50]=1 (0,10]=2; fans [1,10)=1 0=2; friend 0=1 [5,30)=2;
  // register 31-60=1 366-730=2.
  EXPECT_EQ(raw.contextual_values,
            (std::vector<int32_t>{1, 1, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1, 2, 1, 2}));
  EXPECT_EQ(raw.contextual_cardinalities, (std::vector<int32_t>{3, 3, 3, 3, 3}));

  // Preprocessed: users 5, 7, 8 (9 has no events); 5's events in millisecond order, both
  // periods; 8 keeps its one period-2 event and has no features.
  const SequenceDataset ds = build_dataset(raw);
  ASSERT_EQ(ds.num_users(), 3);
  EXPECT_EQ(ds.seq_len(0), 4);
  EXPECT_EQ(ds.seq_len(1), 1);
  EXPECT_EQ(ds.seq_len(2), 1);
  const std::vector<int32_t> actions0(ds.actions.begin(), ds.actions.begin() + 4);
  EXPECT_EQ(actions0, (std::vector<int32_t>{3, 65, 128, 255}));
  const std::vector<int32_t> ctx(ds.contextual_values.begin(), ds.contextual_values.end());
  EXPECT_EQ(ctx, (std::vector<int32_t>{2, 2, 1, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0}));
}

TEST(KuaiRandReader, ColumnsByNameAnd27kPartsInDataFolder) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("data"));
  // Reordered columns and an extra one.
  const std::string header =
      "extra,time_ms,is_profile_enter,long_view,is_hate,is_forward,"
      "is_comment,is_follow,is_like,is_click,video_id,user_id\n";
  dir.write("data/log_standard_4_08_to_4_21_27k_part1.csv",
            header + "x,1649400000000,1,0,0,0,0,0,0,1,50,2\n");
  dir.write("data/log_standard_4_08_to_4_21_27k_part2.csv",
            header + "y,1649400001000,0,0,0,0,0,0,1,0,51,3\n");
  dir.write("data/log_standard_4_22_to_5_08_27k_part1.csv", header);
  dir.write("data/log_standard_4_22_to_5_08_27k_part2.csv",
            header + "z,1650600000000,0,1,0,0,0,0,0,0,52,2\n");
  write_features(dir, "data/user_features_27k.csv");
  const RawData raw = read_raw("kuairand-27k", dir.path());
  ASSERT_EQ(raw.events.size(), 3u);
  EXPECT_EQ(raw.events[0].user, 2);
  EXPECT_EQ(raw.events[0].item, 50);
  EXPECT_EQ(raw.events[0].action, 1 | 128);
  EXPECT_EQ(raw.events[1].action, 2);
  EXPECT_EQ(raw.events[2].action, 64);
  EXPECT_EQ(raw.sources.size(), 4u);
  const std::vector<std::string> files = raw_source_files("kuairand-27k", dir.path());
  ASSERT_EQ(files.size(), 5u);
  EXPECT_EQ(files[0], dir.file("data/log_standard_4_08_to_4_21_27k_part1.csv"));
  EXPECT_EQ(files[4], dir.file("data/user_features_27k.csv"));
  EXPECT_TRUE(is_raw_dataset("kuairand-1k"));
}

TEST(KuaiRandReader, MalformedRowsNameFileAndLine) {
  struct Case {
    std::string bad_row, what;
  };
  const Case cases[] = {
      {"5,100,20220408,1000,1649400000000,1,0,0,0,0,0,1,1000,2000,0,0,0,0\n", "expected 19 fields"},
      {"5,abc,20220408,1000,1649400000000,1,0,0,0,0,0,1,1000,2000,0,0,0,0,1\n",
       "video_id is not a non-negative integer"},
      {"5,100,20220408,1000,16494e9,1,0,0,0,0,0,1,1000,2000,0,0,0,0,1\n", "time_ms"},
      {"5,100,20220408,1000,1649400000000,1,2,0,0,0,0,1,1000,2000,0,0,0,0,1\n",
       "is_like is not 0 or 1"},
      {"-5,100,20220408,1000,1649400000000,1,0,0,0,0,0,1,1000,2000,0,0,0,0,1\n", "user_id"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir;
    write_pure(dir);
    const std::string path =
        dir.write("log_standard_4_22_to_5_08_pure.csv",
                  std::string(kLogHeader) + row(5, 104, 1650600000000, "11111111") + c.bad_row);
    const std::string msg = error_of([&] { read_raw("kuairand-pure", dir.path()); });
    EXPECT_NE(msg.find(path + ":3:"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.what), std::string::npos) << msg;
    EXPECT_NE(msg.find("skip_malformed"), std::string::npos) << msg;
    // Skipped and counted instead.
    const RawData raw = read_raw("kuairand-pure", dir.path(), true);
    EXPECT_EQ(raw.num_malformed, 1);
    EXPECT_EQ(raw.events.size(), 5u);
    ASSERT_EQ(raw.malformed_examples.size(), 1u);
    EXPECT_NE(raw.malformed_examples[0].find(path + ":3:"), std::string::npos);
  }
}

TEST(KuaiRandReader, BadFeaturesHeaderAndMissingFiles) {
  TempDir dir;
  write_pure(dir);
  // A duplicate user row in the features file.
  const std::string features =
      dir.write("user_features_pure.csv", std::string(kFeatureHeader) +
                                              "5,full_active,0,0,1,3,0,3,0,9,0,40,31-60,1\n"
                                              "5,full_active,0,0,1,3,0,3,0,9,0,40,31-60,1\n");
  std::string msg = error_of([&] { read_raw("kuairand-pure", dir.path()); });
  EXPECT_NE(msg.find(features + ":3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("already has a row at line 2"), std::string::npos) << msg;
  // An unquoted range with a comma shifts the fields: wrong count.
  dir.write("user_features_pure.csv",
            std::string(kFeatureHeader) + "5,full_active,0,0,1,3,(0,10],3,0,9,0,40,31-60,1\n");
  msg = error_of([&] { read_raw("kuairand-pure", dir.path()); });
  EXPECT_NE(msg.find(features + ":2: expected 14 fields"), std::string::npos) << msg;
  // A header without a needed column (not skippable).
  const std::string log = dir.write("log_standard_4_08_to_4_21_pure.csv",
                                    "user_id,video_id,time_ms,is_click,is_like\n1,2,3,0,0\n");
  msg = error_of([&] { read_raw("kuairand-pure", dir.path(), true); });
  EXPECT_NE(msg.find(log + ":1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is_follow, is_comment, is_forward, is_hate, long_view, is_profile_enter"),
            std::string::npos)
      << msg;
  // A missing file.
  std::filesystem::remove(log);
  msg = error_of([&] { read_raw("kuairand-pure", dir.path()); });
  EXPECT_NE(msg.find(log + ": cannot open"), std::string::npos) << msg;
  EXPECT_NE(msg.find("KuaiRand standard log"), std::string::npos) << msg;
  TempDir empty;
  msg = error_of([&] { read_raw("kuairand-1k", empty.path()); });
  EXPECT_NE(msg.find(empty.file("log_standard_4_08_to_4_21_1k.csv")), std::string::npos) << msg;
}

}  // namespace
}  // namespace hstu
