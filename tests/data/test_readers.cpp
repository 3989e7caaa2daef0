// test_readers.cpp — the raw readers on small fixture files: field decoding, RFC-4180 quoting,
// contextual encoding, the Amazon filter, and the error / skip_malformed policy.
//
// Every error assertion checks the `file:line` prefix, since that is what users act on.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/data_test_util.h"
#include "data/readers.h"

namespace hstu {
namespace {

using test::error_of;
using test::TempDir;

void write_ml1m(const TempDir& dir, const std::string& ratings) {
  dir.write("ratings.dat", ratings);
  dir.write("users.dat", "1::F::1::10::48067\n2::M::56::16::70072\n3::M::25::15::55117\n");
  dir.write("movies.dat",
            "1::Toy Story (1995)::Animation|Children's|Comedy\n"
            "2::Caf\xe9 au lait (1993)::Comedy\n"  // latin-1 byte
            "3::Heat (1995)::Action\n"
            "7::Never Rated (1990)::Drama\n");
}

TEST(Readers, MovieLens1m) {
  TempDir dir;
  write_ml1m(dir, "1::1::5::978300760\n1::2::3::978302109\n2::3::4::978301968\n3::1::1::5\n");
  const RawData raw = read_movielens_1m(dir.path());
  EXPECT_EQ(raw.name, "ml-1m");
  EXPECT_EQ(raw.num_actions, 6);
  ASSERT_EQ(raw.events.size(), 4u);
  EXPECT_EQ(raw.events[1].user, 1);
  EXPECT_EQ(raw.events[1].item, 2);
  EXPECT_EQ(raw.events[1].action, 3);
  EXPECT_EQ(raw.events[1].timestamp, 978302109);
  EXPECT_EQ(raw.events[1].line, 2);
  EXPECT_EQ(raw.catalogue, (std::vector<int64_t>{1, 2, 3, 7}));
  ASSERT_EQ(raw.contextual_names.size(), 4u);
  EXPECT_EQ(raw.contextual_users, (std::vector<int64_t>{1, 2, 3}));
  // sex: F=1, M=2; age: 1=1, 56=2, 25=3 (first appearance).
  EXPECT_EQ(raw.contextual_cardinalities, (std::vector<int32_t>{3, 4, 4, 4}));
  EXPECT_EQ(raw.contextual_values, (std::vector<int32_t>{1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3}));
  EXPECT_EQ(raw.source_of(3), dir.file("ratings.dat"));
}

TEST(Readers, MovieLens1mMalformedNamesFileAndLine) {
  TempDir dir;
  write_ml1m(dir, "1::1::5::978300760\n1::2::9::978302109\n");
  const std::string msg = error_of([&] { read_movielens_1m(dir.path()); });
  EXPECT_NE(msg.find(dir.file("ratings.dat") + ":2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rating 9 is outside 1..5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"1::2::9::978302109\""), std::string::npos) << msg;
}

TEST(Readers, MissingFileNamesPathAndExpectation) {
  TempDir dir;
  dir.write("ratings.dat", "1::1::5::1\n");
  const std::string msg = error_of([&] { read_movielens_1m(dir.path()); });
  EXPECT_NE(msg.find(dir.file("users.dat")), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MovieLens-1M users"), std::string::npos) << msg;
  const std::string msg2 = error_of([&] { read_movielens_csv(dir.file("nope"), "ml-20m"); });
  EXPECT_NE(msg2.find(dir.file("nope/ratings.csv")), std::string::npos) << msg2;
}

void write_csv_fixture(const TempDir& dir, const std::string& ratings) {
  dir.write("ratings.csv", "userId,movieId,rating,timestamp\r\n" + ratings);
  dir.write("movies.csv",
            "movieId,title,genres\n"
            "1,Toy Story (1995),Adventure|Animation\n"
            "11,\"American President, The (1995)\",Comedy|Drama|Romance\n"
            "51372,\"\"\"Great Performances\"\" Cats (1998)\",Musical\n"
            "7789,\"11'09\"\"01 - September 11 (2002)\",Drama\n"
            "99,\"A title that spans\ntwo lines, oddly\",Drama\n"
            "120,Last (2000),Drama");  // no final newline
}

TEST(Readers, MovieLensCsvQuotingAndHalfStars) {
  TempDir dir;
  write_csv_fixture(dir, "1,31,2.5,1260759144\r\n1,1029,3.0,1260759179\r\n2,11,0.5,5\r\n");
  const RawData raw = read_movielens_csv(dir.path(), "ml-latest-small");
  EXPECT_EQ(raw.name, "ml-latest-small");
  EXPECT_EQ(raw.num_actions, 11);
  ASSERT_EQ(raw.events.size(), 3u);
  EXPECT_EQ(raw.events[0].action, 5);  // 2.5 stars
  EXPECT_EQ(raw.events[1].action, 6);
  EXPECT_EQ(raw.events[2].action, 1);
  EXPECT_EQ(raw.events[0].line, 2);  // line 1 is the header
  EXPECT_EQ(raw.catalogue, (std::vector<int64_t>{1, 11, 51372, 7789, 99, 120}));
}

TEST(Readers, MovieLensCsvMalformedRows) {
  TempDir dir;
  const std::string rows =
      "1,31,2.5,1260759144\n"
      "1,1029,3.0\n"   // line 3: 3 fields
      "1,abc,3.0,1\n"  // line 4: non-numeric id
      "1,5,6.0,1\n"    // line 5: rating out of range
      "2,7,4.0,1260759179\n";
  write_csv_fixture(dir, rows);
  const std::string msg = error_of([&] { read_movielens_csv(dir.path(), "ml-20m"); });
  EXPECT_NE(msg.find(dir.file("ratings.csv") + ":3: expected 4 fields, found 3"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("\"1,1029,3.0\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("skip_malformed"), std::string::npos) << msg;

  const RawData raw = read_movielens_csv(dir.path(), "ml-20m", /*skip_malformed=*/true);
  EXPECT_EQ(raw.num_malformed, 3);
  ASSERT_EQ(raw.malformed_examples.size(), 3u);
  EXPECT_NE(raw.malformed_examples[1].find("ratings.csv:4: movieId"), std::string::npos);
  EXPECT_NE(raw.malformed_examples[2].find("ratings.csv:5: rating"), std::string::npos);
  ASSERT_EQ(raw.events.size(), 2u);
  EXPECT_EQ(raw.events[1].line, 6);
}

TEST(Readers, CsvHeaderAndQuoteErrors) {
  TempDir dir;
  dir.write("ratings.csv", "user,movie,rating,time\n1,1,1,1\n");
  dir.write("movies.csv", "movieId,title,genres\n1,x,y\n");
  std::string msg = error_of([&] { read_movielens_csv(dir.path(), "ml-20m"); });
  EXPECT_NE(msg.find(dir.file("ratings.csv") + ":1: expected the header"), std::string::npos)
      << msg;

  dir.write("ratings.csv", "userId,movieId,rating,timestamp\n1,1,1,1\n");
  dir.write("movies.csv", "movieId,title,genres\n1,x,y\n2,\"bad\"quote,z\n3,ok,z\n");
  msg = error_of([&] { read_movielens_csv(dir.path(), "ml-20m"); });
  EXPECT_NE(msg.find(dir.file("movies.csv") + ":3: unexpected character after closing quote"),
            std::string::npos)
      << msg;
  const RawData raw = read_movielens_csv(dir.path(), "ml-20m", true);
  EXPECT_EQ(raw.num_malformed, 1);
  EXPECT_EQ(raw.catalogue, (std::vector<int64_t>{1, 3}));
}

TEST(Readers, LongBadLineIsTruncatedInTheMessage) {
  TempDir dir;
  write_csv_fixture(dir, "1,2,3.0,4," + std::string(500, 'x') + "\n");
  const std::string msg = error_of([&] { read_movielens_csv(dir.path(), "ml-20m"); });
  EXPECT_NE(msg.find("ratings.csv:2:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("xxx...\""), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 400u) << msg;
}

TEST(Readers, MovieLens100k) {
  TempDir dir;
  dir.write("u.data", "196\t242\t3\t881250949\n186\t302\t3\t891717742\n\n22\t377\t1\t878887116\n");
  RawData raw = read_movielens_100k(dir.path());
  EXPECT_EQ(raw.events.size(), 3u);
  EXPECT_EQ(raw.events[2].line, 4);  // blank lines are skipped but counted
  EXPECT_TRUE(raw.catalogue.empty());
  dir.write("u.item", "1|Toy Story (1995)|01-Jan-1995||http://x|0|0\n500|Other|x\n");
  raw = read_movielens_100k(dir.path());
  EXPECT_EQ(raw.catalogue, (std::vector<int64_t>{1, 500}));
  dir.write("u.data", "196 242 3 881250949\n");
  const std::string msg = error_of([&] { read_movielens_100k(dir.path()); });
  EXPECT_NE(msg.find("u.data:1: expected 4 fields, found 1"), std::string::npos) << msg;
}

TEST(Readers, AmazonBooksFilter) {
  TempDir dir;
  std::string rows;
  auto row = [&](int user, const char* item, int t) {
    rows += detail::cat("u", user, ",", item, ",5.0,", t, "\n");
  };
  const char* books[] = {"B1", "B2", "B3", "B4", "B5"};
  // u1..u5 read B1..B5, u1..u4 also B6. u6 has 5 raw rows, one of them the item "rare" (1 raw
  // row): the row filter keeps 4 of them, so u6 is dropped afterwards. u7 has a single row.
  for (int u = 1; u <= 5; ++u) {
    for (int i = 0; i < 5; ++i) row(u, books[i], 100 * u + i);
  }
  for (int u = 1; u <= 4; ++u) row(u, "B6", 1000 + u);
  row(6, "rare", 1);
  for (int i = 0; i < 3; ++i) row(6, books[i], 2000 + i);
  row(6, "B6", 3000);
  rows += "u7,B1,4.0,1\n";  // u7: a single row, removed by the row filter
  const std::string file = dir.write("ratings_Books.csv", rows);

  const RawData raw = read_amazon_books(file);
  EXPECT_EQ(raw.item_names, (std::vector<std::string>{"B1", "B2", "B3", "B4", "B5", "B6"}));
  EXPECT_EQ(raw.user_names, (std::vector<std::string>{"u1", "u2", "u3", "u4", "u5"}));
  EXPECT_EQ(raw.catalogue.size(), 6u);
  EXPECT_EQ(raw.events.size(), 29u);  // 25 + 4
  EXPECT_EQ(raw.num_filtered, 6);     // u6's five rows and u7's row
  for (const RawEvent& ev : raw.events) {
    EXPECT_LT(ev.user, 5);
    EXPECT_EQ(ev.action, 5);
  }

  dir.write("bad.csv", rows + "u1,B1,7.0,5\n");
  const std::string msg = error_of([&] { read_amazon_books(dir.file("bad.csv")); });
  const int64_t bad_line = std::count(rows.begin(), rows.end(), '\n') + 1;
  EXPECT_NE(msg.find(detail::cat("bad.csv:", bad_line, ": rating is not an integer in 1..5")),
            std::string::npos)
      << msg;
}

TEST(Readers, DispatchByName) {
  TempDir dir;
  write_csv_fixture(dir, "1,31,2.5,1260759144\n");
  EXPECT_EQ(read_raw("ml-20m", dir.path()).events.size(), 1u);
  EXPECT_EQ(read_raw("ml-latest", dir.path()).name, "ml-latest");
  EXPECT_TRUE(is_raw_dataset("amzn-books"));
  EXPECT_FALSE(is_raw_dataset("synthetic"));
  std::string msg = error_of([&] { read_raw("ml-2m", dir.path()); });
  EXPECT_NE(msg.find("unknown dataset name \"ml-2m\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("ml-latest-small"), std::string::npos) << msg;
  msg = error_of([&] { read_raw("ml-1m", ""); });
  EXPECT_NE(msg.find("dataset_path"), std::string::npos) << msg;
  EXPECT_EQ(raw_source_files("ml-20m", dir.path()),
            (std::vector<std::string>{dir.file("ratings.csv"), dir.file("movies.csv")}));
}

}  // namespace
}  // namespace hstu
