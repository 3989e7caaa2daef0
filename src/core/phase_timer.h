// phase_timer.h — optional per-phase timing of a training step, on the device's own timeline.
//
// A step is cut into named segments by marks: phase(ctx, "fwd.attn") starts the segment
// "fwd.attn" and ends the one before it. On CUDA each mark records an event on the op stream, so
// a segment's time is the GPU time between two marks (kernel time plus any idle gap the host
// left, which is exactly what a step loses); on the CPU it is wall time (CPU ops are
// synchronous). A segment name may occur several times per step (once per layer); its times
// add up per step, and report() gives each name's median per-step total over the timed steps.
//
// The shaping decision: ops do not know about the timer. Ctx carries an optional PhaseTimer*;
// phase() is one null check when no timer is attached, so the marks stay in the model code at
// no cost to normal runs, and `hstu bench train --phases` attaches one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/nvtx.h"

namespace hstu {

class PhaseTimer {
 public:
  // capacity: the most marks one step may record.
  explicit PhaseTimer(Device device, int capacity = 4096);
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  void begin_step(void* stream);
  // Starts segment `name` (a string literal: it is kept by pointer until end_step).
  void mark(const char* name, void* stream);
  // Ends the last segment, waits for the device, and adds the step's totals.
  void end_step(void* stream);

  int64_t steps() const { return steps_; }
  // The segments of the last finished step in order: name, start and duration in ms from the
  // step's first mark (device time on CUDA, wall time on the CPU).
  struct Segment {
    const char* name;
    double start_ms, dur_ms;
  };
  const std::vector<Segment>& last_step() const { return last_; }

  // Spans on other streams (a communication stream's collectives), which overlap the step's
  // segments instead of cutting them: span_begin / span_end bracket work enqueued on `stream`
  // between begin_step and end_step (at most 256 per step). last_spans() gives the last step's,
  // placed on the same clock as last_step().
  void span_begin(const char* name, void* stream);
  void span_end(void* stream);
  const std::vector<Segment>& last_spans() const { return last_spans_; }
  // One row per name, largest median first: name, marks per step, median ms per step, share of
  // the summed medians; then the total.
  std::string report() const;

 private:
  Device device_;
  int capacity_;
  std::vector<void*> events_;                               // cudaEvent_t (CUDA)
  std::vector<double> host_ms_;                             // mark times (CPU)
  std::vector<const char*> names_;                          // the step's marks, in order
  std::map<std::string, std::vector<double>> per_step_ms_;  // name -> total of each step
  std::map<std::string, int64_t> marks_per_step_;
  std::vector<Segment> last_;
  static constexpr int kMaxSpans = 256;
  std::vector<void*> span_events_;    // cudaEvent_t [2 * kMaxSpans]: begin, end of each span
  std::vector<double> span_host_ms_;  // the same on the CPU
  std::vector<const char*> span_names_;
  std::vector<Segment> last_spans_;
  int64_t steps_ = 0;
};

// Starts segment `name`: an NVTX range (core/nvtx.h), and a timed segment when a timer is
// attached to ctx.
inline void phase(Ctx& ctx, const char* name) {
  nvtx::phase(name);
  if (ctx.phases) ctx.phases->mark(name, ctx.stream);
}

}  // namespace hstu
