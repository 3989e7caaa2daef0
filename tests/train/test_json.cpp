// test_json.cpp — JSON writer/parser: round trips (escapes, unicode, exact int64, doubles),
// formatting, and parser errors with file:line:col.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "common/test_util.h"
#include "train/json.h"

namespace hstu::json {
namespace {

using test::error_of;

Value sample() {
  return Value::object({
      {"null", nullptr},
      {"t", true},
      {"f", false},
      {"int_max", INT64_MAX},
      {"int_min", INT64_MIN},
      {"zero", 0},
      {"doubles",
       Value::array({0.1, -0.0, 2.0, 1e20, 5e-324, 1.7976931348623157e308, 1.0 / 3, -123.456e-7})},
      {"escapes", "quote\" backslash\\ slash/ \b\f\n\r\t ctrl\x01\x1f del\x7f"},
      {"unicode", "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80"},  // héllo ✓ 😀
      {"nested", Value::object({{"a", Value::array({})},
                                {"b", Value::object()},
                                {"c", Value::array({Value::array({1, 2}), "x"})}})},
      {"", "empty key"},
  });
}

TEST(Json, RoundTripCompactAndPretty) {
  const Value v = sample();
  for (int indent : {-1, 0, 2, 4}) {
    const std::string text = v.dump(indent);
    const Value back = parse(text);
    EXPECT_EQ(back, v) << text;
    EXPECT_EQ(back.dump(indent), text);
  }
  EXPECT_EQ(v.dump().find('\n'), std::string::npos);
}

TEST(Json, DoublesRoundTripBitExactly) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof(d));
    if (!std::isfinite(d)) continue;
    const Value back = parse(Value(d).dump());
    ASSERT_TRUE(back.type() == Type::kDouble) << Value(d).dump();
    const double e = back.as_double();
    ASSERT_EQ(std::memcmp(&d, &e, sizeof(d)), 0) << Value(d).dump();
  }
}

TEST(Json, NumberFormsAndKinds) {
  EXPECT_EQ(Value(INT64_MAX).dump(), "9223372036854775807");
  EXPECT_EQ(Value(INT64_MIN).dump(), "-9223372036854775808");
  EXPECT_EQ(parse("9223372036854775807").as_int(), INT64_MAX);
  EXPECT_EQ(parse("-9223372036854775808").as_int(), INT64_MIN);
  EXPECT_EQ(parse("9223372036854775808").type(), Type::kDouble);  // beyond int64
  EXPECT_EQ(parse("2").type(), Type::kInt);
  EXPECT_EQ(parse("2.0").type(), Type::kDouble);
  EXPECT_EQ(parse("2e0").type(), Type::kDouble);
  EXPECT_EQ(parse("-0").as_int(), 0);
  EXPECT_EQ(Value(2.0).dump(), "2.0");
  EXPECT_EQ(Value(0.1).dump(), "0.1");
  EXPECT_EQ(Value(-0.0).dump(), "-0.0");
  EXPECT_EQ(Value(1e20).dump(), "1e+20");
  EXPECT_EQ(Value(6.25f).dump(), "6.25");
  EXPECT_EQ(Value(uint64_t{7}).dump(), "7");
  EXPECT_EQ(parse("1E-2").as_double(), 0.01);
  EXPECT_EQ(parse("3").as_double(), 3.0);  // an integer reads as a double too
  EXPECT_NE(error_of([] { Value v(UINT64_MAX); }).find("exceeds int64"), std::string::npos);
  // Non-finite doubles have no JSON form: they are written as null.
  EXPECT_EQ(Value::array({std::nan(""), INFINITY, -INFINITY}).dump(), "[null,null,null]");
}

TEST(Json, StringEscapesAndUnicode) {
  EXPECT_EQ(Value("a\"b\\c\n\x01\x7f").dump(), R"("a\"b\\c\n\u0001)"
                                               "\x7f\"");
  EXPECT_EQ(parse(R"("\u00e9\ud83d\ude00\u0041\/")").as_string(),
            "\xc3\xa9\xf0\x9f\x98\x80"
            "A/");
  EXPECT_EQ(parse(R"("\u00E9")").as_string(), "\xc3\xa9");
  EXPECT_EQ(parse("\"\xe2\x9c\x93\"").as_string(), "\xe2\x9c\x93");  // raw UTF-8 passes through
  EXPECT_NE(error_of([] { Value("bad \xff").dump(); }).find("invalid UTF-8"), std::string::npos);
}

TEST(Json, PrettyLayoutAndInsertionOrder) {
  Value v;
  v["zeta"] = 1;
  v["alpha"] = Value::array({1, "two"});
  v["mid"] = Value::object();
  v["alpha"].push_back(nullptr);
  EXPECT_EQ(v.dump(), R"({"zeta":1,"alpha":[1,"two",null],"mid":{}})");
  EXPECT_EQ(v.dump(2),
            "{\n  \"zeta\": 1,\n  \"alpha\": [\n    1,\n    \"two\",\n    null\n  ],\n"
            "  \"mid\": {}\n}");
  EXPECT_EQ(v.size(), 3u);
  EXPECT_EQ(v.at("alpha").at(1).as_string(), "two");
  EXPECT_EQ(v.find("nope"), nullptr);
}

TEST(Json, AccessorTypeErrors) {
  const Value v = parse(R"({"s": "x", "n": 1.5})");
  EXPECT_NE(error_of([&] { v.at("s").as_int(); }).find("is a string, expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { v.at("n").as_int(); }).find("is a double"), std::string::npos);
  EXPECT_NE(error_of([&] { v.at("missing"); }).find("no key \"missing\""), std::string::npos);
  EXPECT_NE(error_of([&] { v.at("s").at(0); }).find("expected an array"), std::string::npos);
  EXPECT_NE(error_of([] {
              Value::object({{"a", 1}, {"a", 2}});
            }).find("duplicate key"),
            std::string::npos);
}

// Expects parse(text, "state.json") to fail with "state.json:<where>: " and `what` in the message.
void expect_error(const std::string& text, const std::string& where, const std::string& what) {
  const std::string msg = error_of([&] { parse(text, "state.json"); });
  EXPECT_NE(msg.find("state.json:" + where + ": "), std::string::npos) << text << " -> " << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << text << " -> " << msg;
}

TEST(Json, ParserErrorsNameLineAndColumn) {
  expect_error("{\n  \"a\": 1,\n  \"b\": tru\n}", "3:8", "invalid literal");
  expect_error("[1,2,]", "1:6", "expected a JSON value, found ']'");
  expect_error("{\"a\":1,}", "1:8", "expected a string key");
  expect_error("{\"a\" 1}", "1:6", "expected ':'");
  expect_error("{\"a\":1 \"b\":2}", "1:8", "expected ',' or '}'");
  expect_error("[1 2]", "1:4", "expected ',' or ']'");
  expect_error("{\"a\":1,\n\"a\":2}", "2:1", "duplicate key \"a\"");
  expect_error("012", "1:2", "leading zero");
  expect_error("1.", "1:3", "digit after '.'");
  expect_error("1e+", "1:4", "digit in exponent");
  expect_error("-", "1:2", "invalid number");
  expect_error("+1", "1:1", "expected a JSON value");
  expect_error("1e999", "1:1", "out of double range");
  expect_error("NaN", "1:1", "expected a JSON value");
  expect_error("\"abc", "1:5", "unterminated string");
  expect_error("\"a\nb\"", "1:3", "control character");
  expect_error("\"\\x\"", "1:2", "invalid escape");
  expect_error("\"\\u12G4\"", "1:6", "invalid hex digit");
  expect_error("\"\\udc00\"", "1:2", "lone low surrogate");
  expect_error("\"\\ud800x\"", "1:2", "high surrogate without a low one");
  expect_error("\"\xc3\x28\"", "1:2", "invalid UTF-8");
  expect_error("\"\xed\xa0\x80\"", "1:2", "invalid UTF-8");  // an encoded surrogate
  expect_error("\"\xc0\xaf\"", "1:2", "invalid UTF-8");      // overlong
  expect_error("1 2", "1:3", "unexpected content after");
  expect_error("", "1:1", "found end of input");
  expect_error("  \n ", "2:2", "found end of input");
  expect_error("// c\n1", "1:1", "expected a JSON value");
  expect_error(std::string(1000, '['), "1:514", "nested deeper than 512");
}

TEST(Json, ParseFile) {
  test::TempDir dir;
  const std::string path = dir.file("state.json");
  test::write_file(path, "{\"step\": 12,\n \"x\": [}");
  const std::string msg = error_of([&] { parse_file(path); });
  EXPECT_NE(msg.find(path + ":2:8: "), std::string::npos) << msg;
  test::write_file(path, sample().dump(2));
  EXPECT_EQ(parse_file(path), sample());
  EXPECT_NE(error_of([&] { parse_file(dir.file("missing.json")); }).find("missing.json"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu::json
