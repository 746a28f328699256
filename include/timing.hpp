// Repeated timings with a backend's timers (CUDA events on the GPU, the host clock on the CPU):
// the harness every benchmark mode times its measurement with.
#pragma once
#include <functional>
#include <vector>

#include "backend.hpp"

namespace lmt {

// Runs `body` warmup + steps times between marks; returns the timed repetitions' milliseconds.
// `phases` marks inside the body (if any) are returned per phase in `phase_ms`, and the start of
// each timed repetition (ms after the first) in `starts`. `settle` runs once after the last
// repetition, before any timer is read (e.g. a communicator's synchronize()).
template <typename T>
std::vector<double> time_reps(Backend<T>& be, int64_t warmup, int64_t steps,
                              const std::function<void(std::vector<int>&)>& body,
                              std::vector<std::vector<double>>* phase_ms = nullptr,
                              std::vector<double>* starts = nullptr,
                              const std::function<void()>& settle = {}) {
  std::vector<std::pair<int, int>> spans;
  std::vector<std::vector<int>> inner;
  be.clear_marks();
  for (int64_t i = 0; i < warmup + steps; ++i) {
    std::vector<int> marks;
    int a = be.mark();
    body(marks);
    int b = be.mark();
    if (i >= warmup) spans.push_back({a, b}), inner.push_back(marks);
  }
  if (settle) settle();
  std::vector<double> ms;
  for (size_t i = 0; i < spans.size(); ++i) {
    ms.push_back(be.elapsed_ms(spans[i].first, spans[i].second));
    if (starts) starts->push_back(be.elapsed_ms(spans[0].first, spans[i].first));
    if (!phase_ms) continue;
    std::vector<int> m = {spans[i].first};
    m.insert(m.end(), inner[i].begin(), inner[i].end());
    m.push_back(spans[i].second);
    phase_ms->resize(m.size() - 1);
    for (size_t p = 0; p + 1 < m.size(); ++p) (*phase_ms)[p].push_back(be.elapsed_ms(m[p], m[p + 1]));
  }
  return ms;
}

}  // namespace lmt
