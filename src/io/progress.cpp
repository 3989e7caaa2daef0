// progress.cpp — progress line formatting and TTY / plain-log drawing.
#include "io/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"

namespace hstu {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long s = std::llround(seconds);
  char buf[48];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  } else if (s < 86400) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, s % 3600 / 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lldd%02lldh", s / 86400, s % 86400 / 3600);
  }
  return buf;
}

std::string format_rate(double per_second) {
  if (!std::isfinite(per_second) || per_second < 0) return "?";
  char buf[32];
  if (per_second < 999.5) {
    std::snprintf(buf, sizeof(buf), "%.0f", per_second);
  } else if (per_second < 999.95e3) {
    std::snprintf(buf, sizeof(buf), "%.1fk", per_second / 1e3);
  } else if (per_second < 999.995e6) {
    std::snprintf(buf, sizeof(buf), "%.2fM", per_second / 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2fG", per_second / 1e9);
  }
  return buf;
}

double ProgressBar::steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::ostream& out,
                         ProgressOptions options, Clock clock)
    : label_(std::move(label)),
      total_(total),
      out_(out),
      opt_(options),
      clock_(std::move(clock)),
      tty_(options.tty.value_or(::isatty(STDOUT_FILENO) != 0)),
      start_(clock_()),
      now_(start_),
      next_percent_(options.plain_every_percent),
      loss_(std::numeric_limits<double>::quiet_NaN()) {
  HSTU_CHECK(total >= 0, "progress bar total ", total, " is negative");
  HSTU_CHECK(options.plain_every_percent > 0, "progress bar: plain_every_percent must be > 0");
  HSTU_CHECK(options.bar_width >= 1, "progress bar: bar_width must be >= 1");
}

ProgressBar::~ProgressBar() {
  if (drawn_len_ > 0 && !finished_) out_ << '\n' << std::flush;
}

std::string ProgressBar::line() const {
  const int64_t done = std::clamp<int64_t>(done_, 0, total_);
  const double frac = total_ == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total_);
  const auto filled = static_cast<size_t>(frac * opt_.bar_width);
  const double elapsed = now_ - start_;
  std::string s = label_;
  s += " [";
  s.append(filled, '#');
  s.append(static_cast<size_t>(opt_.bar_width) - filled, '.');
  char buf[96];
  std::snprintf(buf, sizeof(buf), "] %d%% %lld/%lld", static_cast<int>(frac * 100),
                static_cast<long long>(done), static_cast<long long>(total_));
  s += buf;
  if (!std::isnan(loss_)) {
    std::snprintf(buf, sizeof(buf), " loss %.4g", loss_);
    s += buf;
  }
  if (elapsed > 0) {
    s += ' ';
    s += format_rate(static_cast<double>(tokens_) / elapsed);
    s += " tok/s";
  }
  if (finished_) {
    s += " in ";
    s += format_duration(elapsed);
  } else {
    const double eta =
        done == 0 ? std::numeric_limits<double>::quiet_NaN()
                  : elapsed * static_cast<double>(total_ - done) / static_cast<double>(done);
    s += " ETA ";
    s += format_duration(eta);
  }
  return s;
}

void ProgressBar::draw() {
  const std::string s = line();
  if (tty_) {
    out_ << '\r' << s;
    if (s.size() < drawn_len_) out_ << std::string(drawn_len_ - s.size(), ' ');
    drawn_len_ = std::max<size_t>(s.size(), 1);
  } else {
    out_ << s << '\n';
  }
  out_ << std::flush;
  last_draw_ = now_;
}

void ProgressBar::update(int64_t done, int64_t tokens, double loss) {
  if (finished_) return;
  now_ = clock_();
  done_ = done;
  tokens_ = tokens;
  loss_ = loss;
  if (tty_) {
    if (drawn_len_ == 0 || now_ - last_draw_ >= opt_.redraw_interval_s) draw();
    return;
  }
  const double percent =
      total_ == 0 ? 100.0 : 100.0 * static_cast<double>(done) / static_cast<double>(total_);
  if (percent >= next_percent_ && percent < 100.0) {
    draw();
    next_percent_ = (std::floor(percent / opt_.plain_every_percent) + 1) * opt_.plain_every_percent;
  }
}

void ProgressBar::finish() {
  if (finished_) return;
  now_ = clock_();
  finished_ = true;
  draw();
  if (tty_) out_ << '\n' << std::flush;
}

}  // namespace hstu
