// test_gin_parser.cpp — the gin parser on its own: every value kind, comments, multi-line
// collections, scopes, macros, imports, includes, and syntax errors with exact file:line:col.
//
// The parser is schema-free, so these tests use made-up class names (A.x) on purpose.
#include <gtest/gtest.h>

#include "common/config_test_util.h"
#include "config/gin.h"

namespace hstu {
namespace {

using gin::Value;
using Kind = gin::Value::Kind;
using test::error_of;

const Value& value_of(const std::vector<gin::Binding>& bs, const std::string& key) {
  for (const gin::Binding& b : bs) {
    if (b.key() == key) return b.value;
  }
  ADD_FAILURE() << "no binding " << key;
  static const Value none;
  return none;
}

TEST(GinParser, ScalarValues) {
  const auto bs = gin::parse_text(
      "A.i = 42\n"
      "A.neg = -7\n"
      "A.hex = 0x1F\n"
      "A.f = 1e-3\n"
      "A.f2 = -1.5\n"
      "A.f3 = .5\n"
      "A.f4 = 2.\n"
      "A.t = True\n"
      "A.fa = False\n"
      "A.n = None\n",
      "t.gin");
  ASSERT_EQ(bs.size(), 10u);
  EXPECT_EQ(value_of(bs, "A.i").kind, Kind::kInt);
  EXPECT_EQ(value_of(bs, "A.i").i, 42);
  EXPECT_EQ(value_of(bs, "A.neg").i, -7);
  EXPECT_EQ(value_of(bs, "A.hex").i, 31);
  EXPECT_EQ(value_of(bs, "A.f").kind, Kind::kFloat);
  EXPECT_DOUBLE_EQ(value_of(bs, "A.f").f, 1e-3);
  EXPECT_DOUBLE_EQ(value_of(bs, "A.f2").f, -1.5);
  EXPECT_DOUBLE_EQ(value_of(bs, "A.f3").f, 0.5);
  EXPECT_DOUBLE_EQ(value_of(bs, "A.f4").f, 2.0);
  EXPECT_EQ(value_of(bs, "A.t").kind, Kind::kBool);
  EXPECT_TRUE(value_of(bs, "A.t").b);
  EXPECT_FALSE(value_of(bs, "A.fa").b);
  EXPECT_EQ(value_of(bs, "A.n").kind, Kind::kNone);
  EXPECT_EQ(bs[3].loc.str(), "t.gin:4");
  EXPECT_EQ(bs[3].selector, "A");
  EXPECT_EQ(bs[3].field, "f");
}

TEST(GinParser, Strings) {
  const auto bs = gin::parse_text(
      "A.s1 = 'single'\n"
      "A.s2 = \"q\\\"\\n\\t\\\\\\x41\\u00e9\"\n"
      "A.s3 = 'con' \"cat\"\n"
      "A.raw = r'a\\b'\n"
      "A.hash = 'not # a comment'  # but this is\n"
      "A.triple = '''it's'''\n"
      "A.empty = \"\"\n",
      "t.gin");
  EXPECT_EQ(value_of(bs, "A.s1").s, "single");
  EXPECT_EQ(value_of(bs, "A.s2").s, "q\"\n\t\\A\xc3\xa9");
  EXPECT_EQ(value_of(bs, "A.s3").s, "concat");
  EXPECT_EQ(value_of(bs, "A.raw").s, "a\\b");
  EXPECT_EQ(value_of(bs, "A.hash").s, "not # a comment");
  EXPECT_EQ(value_of(bs, "A.triple").s, "it's");
  EXPECT_EQ(value_of(bs, "A.empty").kind, Kind::kString);
  EXPECT_EQ(value_of(bs, "A.empty").s, "");
}

TEST(GinParser, CollectionsNestedAndMultiLine) {
  const auto bs = gin::parse_text(
      "# a comment line\n"
      "A.l = [\n"
      "    1,      # first\n"
      "    2.5,\n"
      "    'x',\n"
      "    [3, (4,)],\n"
      "]\n"
      "A.tup = (1, 2)\n"
      "A.one = (5)\n"
      "A.empty = ()\n"
      "A.d = {\"k\": 1, 'j': [2, 3],}\n"
      "A.after = 7\n",
      "t.gin");
  const Value& l = value_of(bs, "A.l");
  ASSERT_EQ(l.kind, Kind::kList);
  ASSERT_EQ(l.items.size(), 4u);
  EXPECT_EQ(l.items[0].i, 1);
  EXPECT_DOUBLE_EQ(l.items[1].f, 2.5);
  EXPECT_EQ(l.items[2].s, "x");
  EXPECT_EQ(l.items[3].items[1].kind, Kind::kTuple);
  EXPECT_EQ(l.items[3].items[1].items[0].i, 4);
  EXPECT_EQ(value_of(bs, "A.tup").kind, Kind::kTuple);
  EXPECT_EQ(value_of(bs, "A.tup").items.size(), 2u);
  EXPECT_EQ(value_of(bs, "A.one").kind, Kind::kInt);  // parenthesised, not a tuple
  EXPECT_EQ(value_of(bs, "A.empty").kind, Kind::kTuple);
  EXPECT_TRUE(value_of(bs, "A.empty").items.empty());
  const Value& d = value_of(bs, "A.d");
  ASSERT_EQ(d.kind, Kind::kDict);
  ASSERT_EQ(d.keys.size(), 2u);
  EXPECT_EQ(d.keys[1].s, "j");
  EXPECT_EQ(d.items[1].items[1].i, 3);
  EXPECT_EQ(bs.back().loc.str(), "t.gin:12");  // lines inside the list were counted
}

TEST(GinParser, ScopesReferencesAndModulePaths) {
  const auto bs = gin::parse_text(
      "seqlen/RandomDistribution.dist_type = 'zipf'\n"
      "a/b/C.x = 1\n"
      "F.dist = @seqlen/RandomDistribution()\n"
      "F.cls = @Foo\n"
      "module.sub.C.y = 2\n",
      "t.gin");
  EXPECT_EQ(bs[0].scope, "seqlen");
  EXPECT_EQ(bs[0].selector, "RandomDistribution");
  EXPECT_EQ(bs[1].scope, "a/b");
  const Value& r = bs[2].value;
  EXPECT_EQ(r.kind, Kind::kReference);
  EXPECT_EQ(r.s, "RandomDistribution");
  EXPECT_EQ(r.scope, "seqlen");
  EXPECT_TRUE(r.call);
  EXPECT_FALSE(bs[3].value.call);
  EXPECT_EQ(bs[4].selector, "module.sub.C");
  EXPECT_EQ(bs[4].field, "y");
}

TEST(GinParser, MacrosAndImports) {
  const auto bs = gin::parse_text(
      "import gin.tf.external_configurables\n"
      "from __gin__ import dynamic_registration\n"
      "A.x = %LAYERS\n"  // used before its definition, as gin allows
      "A.l = [%LAYERS, %WIDTH]\n"
      "LAYERS = 4\n"
      "WIDTH = %BASE\n"
      "BASE = 256\n",
      "t.gin");
  ASSERT_EQ(bs.size(), 2u);  // macro definitions are not bindings
  EXPECT_EQ(bs[0].value.i, 4);
  EXPECT_EQ(bs[1].value.items[1].i, 256);
  EXPECT_EQ(error_of([] { gin::parse_text("A.x = 1\nA.y = %NOPE\n", "t.gin"); }),
            "t.gin:2:7: undefined macro %NOPE");
  EXPECT_EQ(error_of([] { gin::parse_text("X = %Y\nY = [%X]\nA.y = %X\n", "t.gin"); }),
            "t.gin:2:6: macro %X is defined in terms of itself");
}

TEST(GinParser, IncludesRelativeToTheIncludingFile) {
  test::TempDir dir;
  dir.write("base.gin", "A.base = 1\nSIZE = 64\n");
  dir.write("sub/mid.gin", "include '../base.gin'\nA.mid = 2\n");
  const std::string main = dir.write("main.gin",
                                     "A.first = 0\n"
                                     "include \"sub/mid.gin\"\n"
                                     "A.size = %SIZE\n");
  const auto bs = gin::parse_file(main);
  ASSERT_EQ(bs.size(), 4u);
  EXPECT_EQ(bs[1].key(), "A.base");
  EXPECT_EQ(bs[1].loc.str(), dir.path() + "/base.gin:1");
  EXPECT_EQ(bs[2].loc.str(), dir.path() + "/sub/mid.gin:2");
  EXPECT_EQ(bs[3].value.i, 64);

  const std::string missing = dir.write("missing.gin", "A.x = 1\ninclude 'nope.gin'\n");
  EXPECT_EQ(error_of([&] { gin::parse_file(missing); }),
            missing + ":2:1: cannot read included file 'nope.gin' (looked for " + dir.path() +
                "/nope.gin)");
  dir.write("cycle_a.gin", "include 'cycle_b.gin'\n");
  dir.write("cycle_b.gin", "\ninclude 'cycle_a.gin'\n");
  EXPECT_EQ(error_of([&] { gin::parse_file(dir.path() + "/cycle_a.gin"); }),
            dir.path() + "/cycle_b.gin:2:1: include cycle: 'cycle_a.gin' is already open");
}

TEST(GinParser, WindowsLineEndings) {
  const auto bs = gin::parse_text("A.x = 1\r\nA.y = [1,\r\n  2]  # c\r\nA.z = 's'\r\n", "t.gin");
  ASSERT_EQ(bs.size(), 3u);
  EXPECT_EQ(bs[1].value.items.size(), 2u);
  EXPECT_EQ(bs[2].value.s, "s");
  EXPECT_EQ(bs[2].loc.str(), "t.gin:4");
}

TEST(GinParser, MissingFileNamesThePath) {
  EXPECT_EQ(error_of([] { gin::parse_file("/nonexistent/hstu/x.gin"); }),
            "config file '/nonexistent/hstu/x.gin' does not exist");
}

TEST(GinParser, SyntaxErrorsNameFileLineColumn) {
  auto err = [](const std::string& text) {
    return error_of([&] { gin::parse_text(text, "bad.gin"); });
  };
  EXPECT_EQ(err("A.x = 1\nA.y 5\n"),
            "bad.gin:2:5: syntax error: expected '=' after 'A.y', found '5'");
  EXPECT_EQ(err("A.x = tru\n"),
            "bad.gin:1:7: syntax error: expected a value (strings need quotes; True/False/None are "
            "capitalised), found 'tru'");
  EXPECT_EQ(err("\n\nA.x = 'abc\n"),
            "bad.gin:3:7: syntax error: unterminated string (a closing quote is missing)");
  EXPECT_EQ(err("A.x = 1 2\n"),
            "bad.gin:1:9: syntax error: expected the end of the line after the value, found '2'");
  EXPECT_EQ(err("A.x = 12abc\n"), "bad.gin:1:7: syntax error: malformed number '12abc'");
  EXPECT_EQ(err("A.x =\n  5\n"),
            "bad.gin:1:6: syntax error: expected a value after '=', found the end of the line");
  EXPECT_EQ(err("A.x = [1, 2\nA.z = 3\n"),
            "bad.gin:2:1: syntax error: expected ',' or ']' to continue the '[' opened at 1:7, "
            "found 'A.z'");
  EXPECT_EQ(err("A.x = {'k' 1}\n"),
            "bad.gin:1:12: syntax error: expected ':' after the dict key, found '1}'");
  EXPECT_EQ(err("A..x = 1\n"),
            "bad.gin:1:1: syntax error: malformed key 'A..x' (expected [scope/]Class.field = "
            "value)");
  EXPECT_EQ(err("A.x = @Foo(1)\n"),
            "bad.gin:1:12: syntax error: expected ')' (references take no arguments), found '1)'");
  EXPECT_EQ(err("A.x = 99999999999999999999\n"),
            "bad.gin:1:7: number '99999999999999999999' is out of range");
  EXPECT_EQ(err("= 3\n"),
            "bad.gin:1:1: syntax error: expected a binding `Class.field = value`, `MACRO = value` "
            "or `include '...'`, found '='");
}

TEST(GinParser, LoneValuesGiveColumns) {
  EXPECT_EQ(gin::parse_value(" [1, 2] ", "x").items.size(), 2u);
  EXPECT_EQ(error_of([] { gin::parse_value("[1,", "--set A.x=[1,"); }),
            "--set A.x=[1, (column 4): syntax error: expected ']' to close the '[' opened at "
            "column 1, found the end of the file");
  EXPECT_EQ(error_of([] { gin::parse_value("%M", "--set A.x=%M"); }),
            "--set A.x=%M (column 1): undefined macro %M");
}

TEST(GinParser, ToStringReparsesToTheSameValue) {
  for (const std::string text :
       {"[1, -2, 0.1, 1e-300, 0.3333333333333333, 'a\"b\\\\c\\n', None, True, False]",
        "((1,), (), {'k': [2.0]})", "@scope/Name()", "@Name", "-0.0", "1e+300"}) {
    const std::string once = gin::to_string(gin::parse_value(text, "v"));
    EXPECT_EQ(gin::to_string(gin::parse_value(once, "v")), once) << text;
  }
  EXPECT_EQ(gin::to_string(gin::parse_value("(1,)", "v")), "(1,)");
  EXPECT_EQ(gin::to_string(gin::parse_value("2.", "v")), "2.0");
  EXPECT_EQ(gin::parse_value(gin::to_string(gin::parse_value("0.1", "v")), "v").f, 0.1);
}

TEST(GinParser, DeepNestingIsAnErrorNamingTheLine) {
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_EQ(gin::parse_text("A.x = " + ok + "\n", "t.gin").size(), 1u);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(error_of([&] { gin::parse_text("A.y = 1\nA.x = " + deep + "\n", "t.gin"); }),
            "t.gin:2:71: value nested more than 64 levels deep");
  std::string chain = "M0 = 1\n";  // each macro one level deeper than the last
  for (int k = 1; k <= 100; ++k) chain += detail::cat("M", k, " = [%M", k - 1, "]\n");
  EXPECT_EQ(error_of([&] { gin::parse_text(chain + "A.x = %M100\n", "t.gin"); }),
            "t.gin:102:7: macro %M100 is nested more than 64 levels deep");
}

TEST(GinParser, MacroExpansionSizeIsBounded) {
  std::string doubling = "M0 = 1\n";  // %M40 would be 2^40 values
  for (int k = 1; k <= 40; ++k) {
    doubling += detail::cat("M", k, " = (%M", k - 1, ", %M", k - 1, ")\n");
  }
  EXPECT_EQ(error_of([&] { gin::parse_text(doubling + "A.x = %M40\n", "t.gin"); }),
            "t.gin:42:7: macro %M40 expands to more than 262144 values (a macro that repeats "
            "itself?)");
  EXPECT_EQ(gin::parse_text(doubling + "A.x = %M10\n", "t.gin")[0].value.items.size(), 2u);
}

TEST(GinParser, ConfigFilesAndIncludesMustBeRegularFiles) {
  test::TempDir dir;
  dir.write("folder/x.gin", "A.x = 1\n");
  const std::string main = dir.write("main.gin", "A.y = 2\ninclude 'folder'\n");
  EXPECT_EQ(error_of([&] { gin::parse_file(main); }),
            main + ":2:1: included file '" + dir.path() + "/folder' is a directory");
  EXPECT_EQ(error_of([&] { gin::parse_file(dir.path() + "/folder"); }),
            "config file '" + dir.path() + "/folder' is a directory");
  EXPECT_EQ(error_of([] { gin::parse_file("/dev/null"); }),
            "config file '/dev/null' is not a regular file");
}

}  // namespace
}  // namespace hstu
