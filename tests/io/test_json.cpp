// test_json.cpp — hstu's JSON helpers (not nlohmann/json itself): numbers keep their kind and
// bits through dump -> parse (int64 extremes, doubles incl. 0.1, 1e300, -0.0 and denormals),
// non-finite doubles are written as null, and errors name the file, position, key and types.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "common/test_util.h"
#include "io/json.h"

namespace hstu {
namespace {

using test::error_of;

// dump -> parse of a one-member object, as trainer_state.json stores values.
Json round_trip(const Json& v, int indent) {
  return json::parse(json::dump({{"v", v}}, indent)).at("v");
}

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

TEST(Json, IntegersRoundTripExactlyAndStayIntegers) {
  for (const int64_t i :
       {INT64_MIN, int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{1} << 53 | 1, INT64_MAX}) {
    for (const int indent : {-1, 2}) {
      const Json back = round_trip(i, indent);
      EXPECT_TRUE(back.is_number_integer()) << i;
      EXPECT_EQ(json::int_at(json::parse(json::dump({{"i", i}}, indent)), "i"), i);
      EXPECT_EQ(back, Json(i));
    }
  }
  EXPECT_EQ(json::dump(Json(INT64_MIN)), "-9223372036854775808");
  EXPECT_EQ(json::dump(Json(2.0)), "2.0");  // a double stays a double
  EXPECT_TRUE(round_trip(2.0, -1).is_number_float());
}

TEST(Json, DoublesRoundTripBitExactly) {
  const double denormal_min = std::numeric_limits<double>::denorm_min();
  for (const double d :
       {0.1, 1e300, -0.0, 0.0, denormal_min, -denormal_min, 4.9406564584124654e-320,
        2.2250738585072009e-308, 1.0 / 3, 1e-7, 123456789.0, std::numeric_limits<double>::max(),
        std::numeric_limits<double>::min()}) {
    const Json back = round_trip(d, 2);
    ASSERT_TRUE(back.is_number_float()) << d;
    EXPECT_TRUE(same_bits(back.get<double>(), d)) << json::dump(d);
  }
  EXPECT_EQ(json::dump(Json(-0.0)), "-0.0");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof(d));
    if (!std::isfinite(d)) continue;
    const Json back = round_trip(d, -1);
    ASSERT_TRUE(back.is_number_float() && same_bits(back.get<double>(), d)) << json::dump(d);
  }
}

TEST(Json, NonFiniteDoublesAreWrittenAsNull) {
  const Json v = Json::array({std::nan(""), INFINITY, -INFINITY});
  EXPECT_EQ(json::dump(v), "[null,null,null]");
  EXPECT_EQ(json::parse(json::dump(v)), Json::array({nullptr, nullptr, nullptr}));
}

TEST(Json, DumpLayoutAndInsertionOrder) {
  Json v;
  v["zeta"] = 1;
  v["alpha"] = {1, "two"};
  v["mid"] = Json::object();
  EXPECT_EQ(json::dump(v), R"({"zeta":1,"alpha":[1,"two"],"mid":{}})");
  EXPECT_EQ(json::dump(v, 2),
            "{\n  \"zeta\": 1,\n  \"alpha\": [\n    1,\n    \"two\"\n  ],\n"
            "  \"mid\": {}\n}");
  EXPECT_EQ(json::parse(json::dump(v, 2)), v);
  EXPECT_NE(error_of([] { json::dump(Json("bad \xff")); }).find("cannot write JSON: invalid UTF-8"),
            std::string::npos);
}

// Expects parse(text, "state.json") to fail with "state.json:<where>: " and `what`.
void expect_error(const std::string& text, const std::string& where, const std::string& what) {
  const std::string msg = error_of([&] { json::parse(text, "state.json"); });
  EXPECT_NE(msg.find("state.json" + where + ": "), std::string::npos) << text << " -> " << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << text << " -> " << msg;
  EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;
}

TEST(Json, ParseErrorsNameFileLineAndColumn) {
  expect_error("{\n  \"a\": 1,\n  \"b\": tru\n}", ":3:11", "invalid literal");
  expect_error("[1,2,]", ":1:6", "unexpected ']'");
  expect_error("{\"a\":1,}", ":1:8", "expected string literal");
  expect_error("  \n ", ":2:2", "unexpected end of input");
  expect_error("1 2", ":1:3", "expected end of input");
  expect_error("// c\n1", ":1:1", "");  // no comments
  expect_error("1e999", "", "number overflow");
  expect_error("{\"a\":1,\n\"b\":{\"a\":2,\"a\":3}}", "", "duplicate key \"a\"");
  EXPECT_EQ(json::parse("{\"a\":{\"a\":1},\"b\":{\"a\":2}}").size(), 2u);  // same key, two objects
}

TEST(Json, ParseFileNamesThePath) {
  test::TempDir dir;
  const std::string path = dir.file("state.json");
  test::write_file(path, "{\"step\": 12,\n \"x\": [}");
  const std::string msg = error_of([&] { json::parse_file(path); });
  EXPECT_NE(msg.find(path + ":2:8: "), std::string::npos) << msg;
  test::write_file(path, "{\"step\": 12}");
  EXPECT_EQ(json::int_at(json::parse_file(path), "step"), 12);
  EXPECT_NE(error_of([&] {
              json::parse_file(dir.file("missing.json"));
            }).find("cannot open " + dir.file("missing.json")),
            std::string::npos);
}

TEST(Json, TypedMembersNameTheKeyAndTypes) {
  const Json st = json::parse(R"({"s": "x", "d": 1.5, "i": 7, "big": 9223372036854775808,
                                  "a": [1]})");
  EXPECT_EQ(json::int_at(st, "i"), 7);
  EXPECT_EQ(json::double_at(st, "i"), 7.0);  // an integer reads as a double too
  EXPECT_EQ(json::double_at(st, "d"), 1.5);
  EXPECT_EQ(json::array_at(st, "a").size(), 1u);
  EXPECT_EQ(json::string_at(st, "s"), "x");
  EXPECT_EQ(&json::at(st, "s"), &st["s"]);
  const auto expect_throw = [&](auto get, const std::string& what) {
    const std::string msg = error_of([&] { get(); });
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  expect_throw([&] { json::int_at(st, "s"); }, "JSON key \"s\" is a string, expected an integer");
  expect_throw([&] { json::int_at(st, "d"); }, "JSON key \"d\" is a double, expected an integer");
  expect_throw([&] { json::int_at(st, "big"); }, "\"big\" holds 9223372036854775808, beyond int64");
  expect_throw([&] { json::double_at(st, "a"); }, "\"a\" is an array, expected a number");
  expect_throw([&] { json::array_at(st, "i"); }, "\"i\" is an integer, expected an array");
  expect_throw([&] { json::string_at(st, "d"); }, "\"d\" is a double, expected a string");
  expect_throw([&] { json::at(st, "missing"); }, "JSON object has no key \"missing\"");
  expect_throw([&] { json::int_at(st["a"], "step"); },
               "JSON value is an array, expected an object with key \"step\"");
}

}  // namespace
}  // namespace hstu
