// step_graph.cpp — see step_graph.h.
#include "core/step_graph.h"

#include <cstdio>
#include <exception>

#include "core/cuda_check.h"

namespace hstu {

StepGraph::~StepGraph() {
#if defined(HSTU_WITH_CUDA)
  // An executable graph still running is freed when its launch completes.
  for (void* e : execs_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e));
#endif
}

void StepGraph::run(Ctx& ctx, const std::function<void()>& body) {
  const bool first = stats_.graph_steps + stats_.direct_steps == 0;
  const bool direct = !enabled_ || ctx.cpu() || ctx.phases || first || !stats_.failure.empty();
  if (!direct && capture(ctx, body)) {
    ++stats_.graph_steps;
    return;
  }
  body();
  ++stats_.direct_steps;
}

bool StepGraph::capture(Ctx& ctx, const std::function<void()>& body) {
#if defined(HSTU_WITH_CUDA)
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  std::string error;
  cudaGraph_t graph = nullptr;
  if (!stream) {
    error = "the context runs on the legacy default stream, which cannot be captured";
  } else {
    HSTU_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cuda_capturing() = true;
    try {
      body();
    } catch (const std::exception& e) {
      error = e.what();
    }
    cuda_capturing() = false;
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    if (error.empty() && end != cudaSuccess)
      error = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  }
  if (!error.empty()) {
    // Nothing captured ran; the caller runs the step directly (and repeats a genuine error).
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    stats_.failure = error;
    std::fprintf(stderr,
                 "hstu: warning: the training step could not be captured as a CUDA graph (%s); "
                 "its kernels are launched directly from now on\n",
                 error.c_str());
    return false;
  }
  // The most recently used graph first: an update succeeds when the nodes match.
  cudaGraphExec_t exec = nullptr;
  for (size_t i = 0; i < execs_.size() && !exec; ++i) {
    const auto candidate = static_cast<cudaGraphExec_t>(execs_[i]);
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(candidate, graph, &info) == cudaSuccess) {
      exec = candidate;
      execs_.erase(execs_.begin() + static_cast<std::ptrdiff_t>(i));
      ++stats_.updates;
    } else {
      (void)cudaGetLastError();
    }
  }
  if (!exec) {
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    HSTU_CUDA_CHECK(err);
    ++stats_.instantiations;
    if (execs_.size() >= kMaxGraphs) {  // a launch still in flight completes first
      cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(execs_.back()));
      execs_.pop_back();
    }
  } else {
    cudaGraphDestroy(graph);
  }
  execs_.insert(execs_.begin(), exec);
  HSTU_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  return true;
#else
  (void)ctx;
  (void)body;
  return false;
#endif
}

std::string StepGraph::describe() const {
  const Stats& s = stats_;
  const int64_t total = s.graph_steps + s.direct_steps;
  if (s.graph_steps == 0)
    return "CUDA graph: not used" + (s.failure.empty() ? std::string() : " (" + s.failure + ")");
  char line[192];
  std::snprintf(line, sizeof line,
                "CUDA graph: %lld of %lld steps (%lld instantiation%s, %lld in-place update%s)",
                static_cast<long long>(s.graph_steps), static_cast<long long>(total),
                static_cast<long long>(s.instantiations), s.instantiations == 1 ? "" : "s",
                static_cast<long long>(s.updates), s.updates == 1 ? "" : "s");
  return line;
}

}  // namespace hstu
