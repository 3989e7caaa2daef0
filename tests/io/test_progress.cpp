// test_progress.cpp — progress line formatting (rates, ETA) with an injected clock, TTY redraw
// throttling and the plain every-N% lines of non-terminal output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "io/progress.h"

namespace hstu {
namespace {

TEST(Progress, Durations) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(44.6), "45s");
  EXPECT_EQ(format_duration(72), "1m12s");
  EXPECT_EQ(format_duration(3599.4), "59m59s");
  EXPECT_EQ(format_duration(3725), "1h02m");
  EXPECT_EQ(format_duration(90061), "1d01h");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(NAN), "?");
}

TEST(Progress, Rates) {
  EXPECT_EQ(format_rate(0), "0");
  EXPECT_EQ(format_rate(950.2), "950");
  EXPECT_EQ(format_rate(999.7), "1.0k");
  EXPECT_EQ(format_rate(41234), "41.2k");
  EXPECT_EQ(format_rate(1.234e6), "1.23M");
  EXPECT_EQ(format_rate(4.5e9), "4.50G");
  EXPECT_EQ(format_rate(INFINITY), "?");
}

// A clock the test moves by hand.
struct FakeClock {
  double t = 1000.0;
  ProgressBar::Clock fn() {
    return [this] { return t; };
  }
};

TEST(Progress, LineWithRateAndEta) {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar("epoch 3/101", 265, out, {.tty = false, .bar_width = 10}, clock.fn());
  clock.t += 96;  // 120 steps in 96 s: 145 left take 116 s; 3955200 tokens / 96 s = 41.2k tok/s
  bar.update(120, 3955200, 6.12345);
  EXPECT_EQ(bar.line(), "epoch 3/101 [####......] 45% 120/265 loss 6.123 41.2k tok/s ETA 1m56s");
  bar.update(120, 3955200, NAN);  // no loss shown
  EXPECT_EQ(bar.line(), "epoch 3/101 [####......] 45% 120/265 41.2k tok/s ETA 1m56s");
}

TEST(Progress, EtaUnknownBeforeTheFirstStep) {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar("epoch 1/1", 10, out, {.tty = false, .bar_width = 4}, clock.fn());
  EXPECT_EQ(bar.line(), "epoch 1/1 [....] 0% 0/10 ETA ?");
}

TEST(Progress, PlainLinesEveryNPercent) {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar("epoch 1/2", 100, out, {.tty = false, .plain_every_percent = 25, .bar_width = 4},
                  clock.fn());
  for (int i = 1; i <= 100; ++i) {
    clock.t += 0.5;
    bar.update(i, 1000 * i, 2.0);
  }
  bar.finish();
  bar.finish();  // once only
  EXPECT_EQ(out.str(),
            "epoch 1/2 [#...] 25% 25/100 loss 2 2.0k tok/s ETA 38s\n"
            "epoch 1/2 [##..] 50% 50/100 loss 2 2.0k tok/s ETA 25s\n"
            "epoch 1/2 [###.] 75% 75/100 loss 2 2.0k tok/s ETA 13s\n"
            "epoch 1/2 [####] 100% 100/100 loss 2 2.0k tok/s in 50s\n");
}

TEST(Progress, TtyRedrawsInPlaceAtMostTenTimesASecond) {
  FakeClock clock;
  std::ostringstream out;
  ProgressBar bar("e", 1000, out, {.tty = true, .bar_width = 2}, clock.fn());
  for (int i = 1; i <= 100; ++i) {  // 100 updates over 1 s
    clock.t += 0.01;
    bar.update(i, i, NAN);
  }
  const std::string s = out.str();
  const auto redraws = std::count(s.begin(), s.end(), '\r');
  EXPECT_GE(redraws, 9);
  EXPECT_LE(redraws, 11);
  EXPECT_EQ(s.find('\n'), std::string::npos);
  bar.finish();
  EXPECT_EQ(out.str().back(), '\n');
  // The final line, padded over the longer "... ETA 10s" drawn before it.
  const std::string final_line = "\re [..] 10% 100/1000 100 tok/s in 1s";
  const size_t at = out.str().rfind('\r');
  EXPECT_EQ(out.str().substr(at, final_line.size()), final_line) << out.str();
  EXPECT_EQ(out.str().find_first_not_of(' ', at + final_line.size()), out.str().size() - 1);
}

TEST(Progress, TtyPadsShorterLinesAndEndsAnAbandonedBar) {
  FakeClock clock;
  std::ostringstream out;
  {
    ProgressBar bar("e", 10, out, {.tty = true, .bar_width = 2}, clock.fn());
    clock.t += 1;
    bar.update(1, 123456, 1234.5);  // "... loss 1234 123.5k tok/s ETA 9s"
    const size_t first = out.str().size();
    clock.t += 1;
    bar.update(2, 2, NAN);  // a shorter line: padded to cover the old one
    EXPECT_EQ(out.str().size() - first, first);
  }
  EXPECT_EQ(out.str().back(), '\n');  // destroyed unfinished: the line is ended
}

}  // namespace
}  // namespace hstu
