// progress.h — the terminal progress bar of a training epoch:
//   epoch 3/101 [#########...........] 45% 120/265 loss 6.123 41.2k tok/s ETA 1m12s
//
// On a terminal the line is redrawn in place with '\r', at most once per redraw interval; in a
// log file (not a TTY) a plain line is printed each time progress crosses a multiple of N%, so
// logs stay readable. Rates and ETA are averages since the bar started, read from an injectable
// clock so tests can drive time.
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <string>

namespace hstu {

// "45s", "1m12s", "2h03m", "3d04h"; "?" for a negative or non-finite duration.
std::string format_duration(double seconds);
// "950", "41.2k", "1.23M", "4.56G".
std::string format_rate(double per_second);

struct ProgressOptions {
  std::optional<bool> tty;          // redraw in place; unset: whether stdout is a terminal
  double redraw_interval_s = 0.1;   // TTY: minimum time between redraws
  double plain_every_percent = 10;  // not a TTY: a line at each multiple of this (below 100%)
  int bar_width = 20;
};

class ProgressBar {
 public:
  using Clock = std::function<double()>;  // monotonic time in seconds
  static double steady_seconds();

  // label: e.g. "epoch 3/101"; total: the steps of this epoch.
  ProgressBar(std::string label, int64_t total, std::ostream& out = std::cout,
              ProgressOptions options = {}, Clock clock = steady_seconds);
  // On a terminal, ends a bar left mid-line (an error unwinding past it prints cleanly).
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // done: steps completed (shown clamped to total); tokens: tokens processed since the start;
  // loss: the latest (e.g. running-mean) loss, NaN to leave it out.
  void update(int64_t done, int64_t tokens, double loss);
  // Prints the final line (elapsed time instead of ETA) and a newline; later calls do nothing.
  void finish();
  // The line as drawn for the latest update.
  std::string line() const;

 private:
  void draw();

  std::string label_;
  int64_t total_;
  std::ostream& out_;
  ProgressOptions opt_;
  Clock clock_;
  bool tty_;
  double start_, now_;
  double last_draw_ = 0;
  double next_percent_;
  int64_t done_ = 0, tokens_ = 0;
  double loss_;
  size_t drawn_len_ = 0;  // TTY: length of the line on screen (0 = none)
  bool finished_ = false;
};

}  // namespace hstu
