// test_chrome_trace.cpp — RAII scopes, runtime enable/disable, threads, and the written file.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/test_util.h"
#include "io/chrome_trace.h"
#include "io/json.h"

namespace hstu {
namespace {

TEST(ChromeTrace, ScopesNestAndFileIsAChromeTraceArray) {
  ChromeTrace trace(true);
  {
    ChromeTrace::Scope outer(trace, "step");
    {
      ChromeTrace::Scope inner(trace, "forward \"quoted\"");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  trace.set_enabled(false);
  { ChromeTrace::Scope off(trace, "not recorded"); }
  trace.set_enabled(true);
  std::thread([&] { ChromeTrace::Scope other(trace, "loader"); }).join();
  ASSERT_EQ(trace.size(), 3u);

  test::TempDir dir;
  const std::string path = dir.file("trace.json");
  trace.write(path);
  const Json events = json::parse_file(path);
  ASSERT_TRUE(events.is_array());
  ASSERT_EQ(events.size(), 3u);
  const Json& inner = events.at(0);  // recorded when it ends: first
  const Json& outer = events.at(1);
  EXPECT_EQ(inner.at("name"), "forward \"quoted\"");
  EXPECT_EQ(outer.at("name"), "step");
  for (const Json& e : events) {
    EXPECT_EQ(e.at("ph"), "X");
    EXPECT_GE(json::double_at(e, "dur"), 0);
    EXPECT_TRUE(e.at("pid").is_number_integer());
  }
  const auto at = [](const Json& e, const char* key) { return json::double_at(e, key); };
  EXPECT_GE(at(inner, "dur"), 2000);  // microseconds
  EXPECT_LE(at(outer, "ts"), at(inner, "ts"));
  EXPECT_GE(at(outer, "ts") + at(outer, "dur"), at(inner, "ts") + at(inner, "dur"));
  EXPECT_EQ(json::int_at(inner, "tid"), 0);
  EXPECT_EQ(events.at(2).at("name"), "loader");
  EXPECT_EQ(json::int_at(events.at(2), "tid"), 1);  // another thread, another track
}

TEST(ChromeTrace, DisabledByDefaultAndEmptyFileIsValid) {
  ChromeTrace trace;
  EXPECT_FALSE(trace.enabled());
  { ChromeTrace::Scope s(trace, "x"); }
  EXPECT_EQ(trace.size(), 0u);
  EXPECT_EQ(json::parse(trace.json()), Json::array());
  trace.record("manual", 5.0, 1.5);
  const Json e = json::parse(trace.json()).at(0);
  EXPECT_EQ(json::double_at(e, "ts"), 5.0);
  EXPECT_EQ(json::double_at(e, "dur"), 1.5);
}

}  // namespace
}  // namespace hstu
