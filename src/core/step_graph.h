// step_graph.h — runs the device work of a training step as one CUDA graph.
//
// Each step's work is captured from ctx.stream into a graph (stream capture records the launches
// instead of running them), and the one executable graph is updated in place with it
// (cudaGraphExecUpdate), then launched. So the step's few hundred kernels, memsets and the side
// stream's fork and join go to the GPU as one launch, and the device runs them without the
// per-kernel launch gaps of a stream.
//
// The shaping decision: capture every step and update, rather than replay one frozen graph. The
// step's kernels take per-step values by value (learning rate, Adam bias corrections, dropout and
// negative-sampling seeds, loss scale 1 / supervised) and a jagged batch changes the token count
// and the grids with it, so a frozen graph would be wrong for the next batch. An update keeps an
// instantiated graph as long as the step has the same nodes in the same order (the usual case:
// only parameters, grid sizes and cuBLASLt's kernel choices change). A few node layouts recur (a
// library picks a different number of kernels at some token counts; a step without supervised
// tokens skips the model), so the executable graphs of the last four layouts are kept and tried
// in turn, and only a layout not among them is instantiated (milliseconds of host time).
//
// Where capture is not possible the step runs directly on the stream: on the CPU, when disabled
// (TrainerArgs.cuda_graph = False), while phases are timed (ctx.phases: events between kernels),
// on the first step (it creates lazily built state: cuBLASLt plans, the side stream), and for
// good after a capture fails (a warning names the failing call). Nothing is lost either way: a
// failed capture ran nothing, so the step then runs directly.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/context.h"

namespace hstu {

class StepGraph {
 public:
  struct Stats {
    int64_t graph_steps = 0;     // steps launched as a graph
    int64_t direct_steps = 0;    // steps run directly on the stream
    int64_t instantiations = 0;  // graphs instantiated (first capture, or the nodes changed)
    int64_t updates = 0;         // steps that updated the instantiated graph in place
    std::string failure;         // why capture was given up ("" = it was not)
  };

  explicit StepGraph(bool enabled) : enabled_(enabled) {}
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Enqueues `body` (the step's device work on ctx.stream): captured and launched as a graph when
  // possible, else run directly. Returns once the work is queued.
  void run(Ctx& ctx, const std::function<void()>& body);
  const Stats& stats() const { return stats_; }
  // One line for logs: "CUDA graph: 19 of 20 steps (1 instantiation, 18 in-place updates)".
  std::string describe() const;

 private:
  bool capture(Ctx& ctx, const std::function<void()>& body);

  // Executable graphs of the step's node layouts seen lately, most recently used first.
  static constexpr size_t kMaxGraphs = 4;

  bool enabled_;
  std::vector<void*> execs_;  // cudaGraphExec_t
  Stats stats_;
};

}  // namespace hstu
