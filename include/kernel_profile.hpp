// The built-in kernel summary: which kernels took the GPU's time, from CUPTI activity records
// (no external profiler needed). Collect around a region, then read the totals by kernel name.
// Without CUDA, available() is false and nothing is collected.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lmt {

struct KernelStat {
  std::string name;  // demangled, shortened
  int64_t calls = 0;
  double total_ms = 0;
};

// A region's kernels by total time, largest first; span_ms from the first kernel's start to the
// last one's end; busy_ms of that span with at least one kernel running (the rest: the GPU idle
// between kernels).
struct KernelSummary {
  std::vector<KernelStat> kernels;
  double span_ms = 0, busy_ms = 0;
};

// The length of the union of [start, end) intervals (nanoseconds), in ms: in any order,
// overlapping or not.
double busy_ms(std::vector<std::pair<uint64_t, uint64_t>> intervals);

class KernelProfile {
 public:
  static bool available();
  void start();  // enables kernel activity records (adds overhead: never inside timed regions)
  KernelSummary stop();  // flushes the records
};

}  // namespace lmt
