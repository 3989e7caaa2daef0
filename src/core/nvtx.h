// nvtx.h — NVTX ranges, so Nsight Systems and Nsight Compute (`ncu --nvtx --nvtx-include ...`)
// show the structure of a run: the loop's "train_step" / "eval" / "checkpoint" ranges and,
// inside a step, one range per phase mark (phase_timer.h: "fwd.attn", "opt.dense", ...).
//
// NVTX3 is header-only and ships with the CUDA toolkit; without a profiler attached each call is
// a check of a function pointer. A build without CUDA compiles these to nothing.
//
// Phase marks cut a step into consecutive segments rather than nesting, so the range of the
// current phase stays open until the next mark or until the enclosing Range ends (a thread-local
// flag says whether one is open).
#pragma once

#if defined(HSTU_WITH_CUDA)
#include <nvtx3/nvToolsExt.h>
#endif

namespace hstu::nvtx {

#if defined(HSTU_WITH_CUDA)
inline thread_local bool phase_open = false;

// Ends the open phase range (if any) and opens `name`'s.
inline void phase(const char* name) {
  if (phase_open) nvtxRangePop();
  nvtxRangePushA(name);
  phase_open = true;
}

// A range for the lifetime of the object; it also closes a phase range left open inside it.
class Range {
 public:
  explicit Range(const char* name) { nvtxRangePushA(name); }
  ~Range() {
    if (phase_open) nvtxRangePop();
    phase_open = false;
    nvtxRangePop();
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;
};
#else
inline void phase(const char*) {}
class Range {
 public:
  explicit Range(const char*) {}
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;
};
#endif

}  // namespace hstu::nvtx
