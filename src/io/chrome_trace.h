// chrome_trace.h — a minimal Chrome-trace recorder (chrome://tracing, Perfetto): complete ("X")
// events from RAII scopes, kept in memory and written as one JSON array at the end.
//
// Recording is switched on and off at runtime (e.g. only for steps 100..200); a Scope made
// while the trace is off costs one atomic load and records nothing. Times are host wall-clock
// microseconds since the trace was created; GPU work shows up only where the caller syncs.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace hstu {

class ChromeTrace {
 public:
  explicit ChromeTrace(bool enabled = false);

  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // Microseconds since the trace was created.
  double now_us() const;
  // Records [begin_us, begin_us + dur_us) on the calling thread (whether or not enabled).
  void record(std::string name, double begin_us, double dur_us);
  // Records on a named track (e.g. "GPU"): a row of its own below the threads' rows.
  void record_on(const std::string& track, std::string name, double begin_us, double dur_us);
  size_t size() const;

  // The JSON array, one event per line.
  std::string json() const;
  // Writes json() to path atomically.
  void write(const std::string& path) const;

  // Times its own lifetime as one event when the trace is enabled at construction.
  class Scope {
   public:
    Scope(ChromeTrace& trace, const char* name);  // name must outlive the scope
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ChromeTrace* trace_;  // null when the trace was disabled
    const char* name_;
    double begin_us_ = 0;
  };

 private:
  struct Event {
    std::string name;
    double ts_us, dur_us;
    int tid;
  };

  std::atomic<bool> enabled_;
  double origin_s_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::thread::id> threads_;  // tid = index of the recording thread here
  std::vector<std::string> tracks_;       // tid = kTrackTid + index of the track here
  static constexpr int kTrackTid = 1000;
};

}  // namespace hstu
