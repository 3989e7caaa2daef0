// test_chrome_trace.cpp — RAII scopes, runtime enable/disable, threads, and the written file.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/test_util.h"
#include "train/chrome_trace.h"
#include "train/json.h"

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
  const json::Value events = json::parse_file(path);
  ASSERT_TRUE(events.is_array());
  ASSERT_EQ(events.size(), 3u);
  const json::Value& inner = events.at(0);  // recorded when it ends: first
  const json::Value& outer = events.at(1);
  EXPECT_EQ(inner.at("name").as_string(), "forward \"quoted\"");
  EXPECT_EQ(outer.at("name").as_string(), "step");
  for (const json::Value& e : events.as_array()) {
    EXPECT_EQ(e.at("ph").as_string(), "X");
    EXPECT_GE(e.at("dur").as_double(), 0);
    EXPECT_TRUE(e.at("pid").is_int());
  }
  EXPECT_GE(inner.at("dur").as_double(), 2000);  // microseconds
  EXPECT_LE(outer.at("ts").as_double(), inner.at("ts").as_double());
  EXPECT_GE(outer.at("ts").as_double() + outer.at("dur").as_double(),
            inner.at("ts").as_double() + inner.at("dur").as_double());
  EXPECT_EQ(inner.at("tid").as_int(), 0);
  EXPECT_EQ(events.at(2).at("name").as_string(), "loader");
  EXPECT_EQ(events.at(2).at("tid").as_int(), 1);  // another thread, another track
}

TEST(ChromeTrace, DisabledByDefaultAndEmptyFileIsValid) {
  ChromeTrace trace;
  EXPECT_FALSE(trace.enabled());
  { ChromeTrace::Scope s(trace, "x"); }
  EXPECT_EQ(trace.size(), 0u);
  EXPECT_EQ(json::parse(trace.json()), json::Value::array());
  trace.record("manual", 5.0, 1.5);
  const json::Value e = json::parse(trace.json()).at(0);
  EXPECT_EQ(e.at("ts").as_double(), 5.0);
  EXPECT_EQ(e.at("dur").as_double(), 1.5);
}

}  // namespace
}  // namespace hstu
