// watchdog.h — no rank of a distributed job waits forever: the deadline of distributed waits
// (HSTU_DIST_TIMEOUT), the training loop's heartbeat, and the watchdog thread that ends a rank
// whose communicator failed or that made no progress within the deadline.
//
// NCCL has no timeout of its own: when a peer dies, the others' collectives wait forever. The NCCL
// communicator (nccl_comm.h) runs a Watchdog that polls the communicator's asynchronous error and
// the time since the last heartbeat; when either trips it prints `[rank r] ...` with the last
// step, aborts the communicator (which ends the collectives still running on the device) and
// exits the process with kWatchdogExitCode, so the launcher (`hstu launch`, srun
// --kill-on-bad-exit, mpirun) ends the job.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

namespace hstu::dist {

// The exit status of a rank the watchdog ended.
constexpr int kWatchdogExitCode = 1;

// Seconds a distributed wait may take before it is an error: communicator start-up, the bootstrap
// rendezvous, and the silence between two heartbeats. HSTU_DIST_TIMEOUT (a positive number of
// seconds) or 600 (PyTorch's NCCL default); a bad value is an error naming the variable.
double dist_timeout_seconds();

// Tells the watchdogs that this rank is making progress; `step` is the training step just done.
// The trainer calls it after every step and around long host work (evaluation, checkpoints), at
// least once per HSTU_DIST_TIMEOUT. Cheap (two relaxed atomic stores); any thread.
void heartbeat(int64_t step);
// The step of the last heartbeat (-1 before the first).
int64_t last_heartbeat_step();

class Watchdog {
 public:
  struct Hooks {
    // A non-empty message when the communicator has failed (polled from the watchdog thread).
    std::function<std::string()> poll_error;
    // Aborts the communicator (from the watchdog thread). Given a bounded time before the exit.
    std::function<void()> abort;
  };
  // Starts the thread. Its deadline counts from now or the last heartbeat, whichever is later.
  Watchdog(int rank, double timeout_s, Hooks hooks, double poll_interval_s = 0.25);
  ~Watchdog();  // stops the thread (without firing)
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void loop();
  [[noreturn]] void fire(const std::string& reason);

  int rank_;
  double timeout_s_, poll_s_;
  Hooks hooks_;
  int64_t start_ns_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace hstu::dist
