// chrome_trace.cpp — event recording and the Chrome-trace JSON writer.
#include "io/chrome_trace.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "io/atomic_file.h"
#include "io/json.h"

namespace hstu {

namespace {
double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

ChromeTrace::ChromeTrace(bool enabled) : enabled_(enabled), origin_s_(steady_s()) {}

double ChromeTrace::now_us() const {
  return (steady_s() - origin_s_) * 1e6;
}

void ChromeTrace::record(std::string name, double begin_us, double dur_us) {
  const std::thread::id self = std::this_thread::get_id();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(threads_.begin(), threads_.end(), self);
  if (it == threads_.end()) it = threads_.insert(threads_.end(), self);
  events_.push_back({std::move(name), begin_us, dur_us, static_cast<int>(it - threads_.begin())});
}

void ChromeTrace::record_on(const std::string& track, std::string name, double begin_us,
                            double dur_us) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(tracks_.begin(), tracks_.end(), track);
  if (it == tracks_.end()) it = tracks_.insert(tracks_.end(), track);
  events_.push_back(
      {std::move(name), begin_us, dur_us, kTrackTid + static_cast<int>(it - tracks_.begin())});
}

size_t ChromeTrace::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

std::string ChromeTrace::json() const {
  const int pid = static_cast<int>(::getpid());
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = "[";
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    out += i ? ",\n" : "\n";
    out += json::dump({{"name", e.name},
                       {"ph", "X"},
                       {"ts", e.ts_us},
                       {"dur", e.dur_us},
                       {"pid", pid},
                       {"tid", e.tid}});
  }
  for (size_t i = 0; i < tracks_.size(); ++i) {  // the tracks' row names (metadata events)
    out += events_.empty() && i == 0 ? "\n" : ",\n";
    out += json::dump({{"name", "thread_name"},
                       {"ph", "M"},
                       {"pid", pid},
                       {"tid", kTrackTid + static_cast<int>(i)},
                       {"args", {{"name", tracks_[i]}}}});
  }
  out += "\n]\n";
  return out;
}

void ChromeTrace::write(const std::string& path) const {
  atomic_write_file(path, json());
}

ChromeTrace::Scope::Scope(ChromeTrace& trace, const char* name)
    : trace_(trace.enabled() ? &trace : nullptr), name_(name) {
  if (trace_) begin_us_ = trace_->now_us();
}

ChromeTrace::Scope::~Scope() {
  if (trace_) trace_->record(name_, begin_us_, trace_->now_us() - begin_us_);
}

}  // namespace hstu
