// phase_timer.cpp — see phase_timer.h.
#include "core/phase_timer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "core/cuda_check.h"
#include "core/error.h"

namespace hstu {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

PhaseTimer::PhaseTimer(Device device, int capacity) : device_(device), capacity_(capacity) {
  HSTU_CHECK(capacity >= 2, "PhaseTimer capacity must be >= 2");
  names_.reserve(static_cast<size_t>(capacity));
  host_ms_.reserve(static_cast<size_t>(capacity));
#if defined(HSTU_WITH_CUDA)
  if (device == Device::kCUDA) {
    events_.resize(static_cast<size_t>(capacity));
    for (auto& e : events_) {
      cudaEvent_t ev;
      HSTU_CUDA_CHECK(cudaEventCreate(&ev));
      e = ev;
    }
    span_events_.resize(2 * kMaxSpans);
    for (auto& e : span_events_) {
      cudaEvent_t ev;
      HSTU_CUDA_CHECK(cudaEventCreate(&ev));
      e = ev;
    }
  }
#else
  HSTU_CHECK(device == Device::kCPU, "PhaseTimer: CUDA timing needs a CUDA build");
#endif
}

PhaseTimer::~PhaseTimer() {
#if defined(HSTU_WITH_CUDA)
  for (void* e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  for (void* e : span_events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
#endif
}

void PhaseTimer::begin_step(void* stream) {
  names_.clear();
  host_ms_.clear();
  span_names_.clear();
  span_host_ms_.clear();
  mark("(step start)", stream);
}

void PhaseTimer::mark(const char* name, void* stream) {
  HSTU_CHECK(static_cast<int>(names_.size()) < capacity_, "PhaseTimer: more than ", capacity_,
             " marks in one step");
#if defined(HSTU_WITH_CUDA)
  if (device_ == Device::kCUDA)
    HSTU_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events_[names_.size()]),
                                    static_cast<cudaStream_t>(stream)));
#endif
  (void)stream;
  if (device_ == Device::kCPU) host_ms_.push_back(now_ms());
  names_.push_back(name);
}

void PhaseTimer::span_begin(const char* name, void* stream) {
  HSTU_CHECK(static_cast<int>(span_names_.size()) < kMaxSpans, "PhaseTimer: more than ", kMaxSpans,
             " spans in one step");
#if defined(HSTU_WITH_CUDA)
  if (device_ == Device::kCUDA)
    HSTU_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(span_events_[2 * span_names_.size()]),
                                    static_cast<cudaStream_t>(stream)));
#endif
  (void)stream;
  if (device_ == Device::kCPU) span_host_ms_.push_back(now_ms());
  span_names_.push_back(name);
}

void PhaseTimer::span_end(void* stream) {
  HSTU_CHECK(!span_names_.empty(), "PhaseTimer: span_end without span_begin");
#if defined(HSTU_WITH_CUDA)
  if (device_ == Device::kCUDA)
    HSTU_CUDA_CHECK(
        cudaEventRecord(static_cast<cudaEvent_t>(span_events_[2 * span_names_.size() - 1]),
                        static_cast<cudaStream_t>(stream)));
#endif
  (void)stream;
  if (device_ == Device::kCPU) span_host_ms_.push_back(now_ms());
}

void PhaseTimer::end_step(void* stream) {
  mark("(step end)", stream);
  const size_t n = names_.size();
  std::vector<double> t(n, 0.0);  // ms since the step's first mark
#if defined(HSTU_WITH_CUDA)
  if (device_ == Device::kCUDA) {
    HSTU_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(events_[n - 1])));
    for (size_t i = 1; i < n; ++i) {
      float ms = 0;
      HSTU_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(events_[0]),
                                           static_cast<cudaEvent_t>(events_[i])));
      t[i] = ms;
    }
  }
#endif
  if (device_ == Device::kCPU)
    for (size_t i = 1; i < n; ++i) t[i] = host_ms_[i] - host_ms_[0];
  std::map<std::string, double> step;
  std::map<std::string, int64_t> count;
  last_.clear();
  for (size_t i = 1; i < n; ++i) {  // segment i-1 runs from mark i-1 to mark i
    step[names_[i - 1]] += t[i] - t[i - 1];
    ++count[names_[i - 1]];
    last_.push_back({names_[i - 1], t[i - 1], t[i] - t[i - 1]});
  }
  last_spans_.clear();
  for (size_t k = 0; k < span_names_.size(); ++k) {
    double begin = 0, end = 0;
#if defined(HSTU_WITH_CUDA)
    if (device_ == Device::kCUDA) {
      const auto ev = [&](size_t i) { return static_cast<cudaEvent_t>(span_events_[i]); };
      HSTU_CUDA_CHECK(cudaEventSynchronize(ev(2 * k + 1)));
      float b = 0, e = 0;
      HSTU_CUDA_CHECK(cudaEventElapsedTime(&b, static_cast<cudaEvent_t>(events_[0]), ev(2 * k)));
      HSTU_CUDA_CHECK(
          cudaEventElapsedTime(&e, static_cast<cudaEvent_t>(events_[0]), ev(2 * k + 1)));
      begin = b;
      end = e;
    }
#endif
    if (device_ == Device::kCPU && 2 * k + 1 < span_host_ms_.size()) {
      begin = span_host_ms_[2 * k] - host_ms_[0];
      end = span_host_ms_[2 * k + 1] - host_ms_[0];
    }
    last_spans_.push_back({span_names_[k], begin, end - begin});
  }
  for (const auto& [name, ms] : step) per_step_ms_[name].push_back(ms);
  marks_per_step_ = count;
  ++steps_;
}

std::string PhaseTimer::report() const {
  struct Row {
    std::string name;
    int64_t marks;
    double ms;
  };
  std::vector<Row> rows;
  double total = 0;
  for (const auto& [name, v] : per_step_ms_) {
    const auto it = marks_per_step_.find(name);
    rows.push_back({name, it == marks_per_step_.end() ? 0 : it->second, median(v)});
    total += rows.back().ms;
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ms > b.ms; });
  std::ostringstream os;
  char line[160];
  std::snprintf(line, sizeof line, "%-28s %6s %10s %7s\n", "phase", "x/step", "ms/step", "share");
  os << line;
  for (const Row& r : rows) {
    std::snprintf(line, sizeof line, "%-28s %6lld %10.3f %6.1f%%\n", r.name.c_str(),
                  static_cast<long long>(r.marks), r.ms, total > 0 ? 100.0 * r.ms / total : 0.0);
    os << line;
  }
  std::snprintf(line, sizeof line, "%-28s %6s %10.3f  (%lld steps, %s time)\n", "total", "", total,
                static_cast<long long>(steps_), device_ == Device::kCUDA ? "GPU" : "wall");
  os << line;
  return os.str();
}

}  // namespace hstu
