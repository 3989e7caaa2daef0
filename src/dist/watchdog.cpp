// watchdog.cpp — the distributed deadline, the heartbeat and the watchdog thread.
#include "dist/watchdog.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "core/error.h"

namespace hstu::dist {
namespace {

constexpr double kDefaultTimeoutS = 600.0;
constexpr double kAbortGraceS = 30.0;  // how long the communicator's abort may take

std::atomic<int64_t> g_beat_ns{0};  // steady-clock time of the last heartbeat (0: none)
std::atomic<int64_t> g_beat_step{-1};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

double dist_timeout_seconds() {
  const char* v = std::getenv("HSTU_DIST_TIMEOUT");
  if (!v) return kDefaultTimeoutS;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  HSTU_CHECK(end != v && *end == '\0' && std::isfinite(s) && s > 0, "HSTU_DIST_TIMEOUT='", v,
             "' is not a positive number of seconds");
  return s;
}

void heartbeat(int64_t step) {
  g_beat_step.store(step, std::memory_order_relaxed);
  g_beat_ns.store(now_ns(), std::memory_order_relaxed);
}

int64_t last_heartbeat_step() {
  return g_beat_step.load(std::memory_order_relaxed);
}

Watchdog::Watchdog(int rank, double timeout_s, Hooks hooks, double poll_interval_s)
    : rank_(rank),
      timeout_s_(timeout_s),
      poll_s_(poll_interval_s),
      hooks_(std::move(hooks)),
      start_ns_(now_ns()) {
  HSTU_CHECK(timeout_s > 0 && poll_interval_s > 0,
             "watchdog: timeout and poll interval must be > 0");
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void Watchdog::loop() {
  const auto poll = std::chrono::duration<double>(poll_s_);
  while (!stop_.load()) {
    std::this_thread::sleep_for(poll);
    if (stop_.load()) return;
    if (hooks_.poll_error) {
      const std::string err = hooks_.poll_error();
      if (!err.empty()) fire(err);
    }
    const int64_t last = std::max(start_ns_, g_beat_ns.load(std::memory_order_relaxed));
    const double silent_s = static_cast<double>(now_ns() - last) * 1e-9;
    if (silent_s > timeout_s_) {
      char msg[256];
      std::snprintf(msg, sizeof msg,
                    "no progress for %.0f s (HSTU_DIST_TIMEOUT=%g s): a peer rank died or hangs",
                    silent_s, timeout_s_);
      fire(msg);
    }
  }
}

void Watchdog::fire(const std::string& reason) {
  const int64_t step = last_heartbeat_step();
  std::fprintf(stderr,
               "[rank %d] hstu watchdog: %s; last finished step %s; aborting the "
               "communicator and exiting with status %d\n",
               rank_, reason.c_str(), step < 0 ? "none" : std::to_string(step).c_str(),
               kWatchdogExitCode);
  std::fflush(stdout);
  std::fflush(stderr);
  if (hooks_.abort) {
    // The abort runs on its own thread so that one stuck in the driver cannot keep this rank
    // alive: after kAbortGraceS the process exits regardless.
    auto state = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
    auto done = std::make_shared<bool>(false);
    std::thread([abort = hooks_.abort, state, done] {
      abort();
      std::lock_guard<std::mutex> lock(state->first);
      *done = true;
      state->second.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lock(state->first);
    state->second.wait_for(lock, std::chrono::duration<double>(kAbortGraceS),
                           [&] { return *done; });
  }
  std::_Exit(kWatchdogExitCode);
}

}  // namespace hstu::dist
