// The built-in kernel summary: which kernels took the GPU's time, from CUPTI activity records
// (no external profiler needed). Collect around a region, then read the totals by kernel name.
// Without CUDA, available() is false and nothing is collected.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lmt {

struct KernelStat {
  std::string name;  // demangled, shortened
  int64_t calls = 0;
  double total_ms = 0;
};

class KernelProfile {
 public:
  static bool available();
  void start();  // enables kernel activity records (adds overhead: never inside timed regions)
  // Flushes the records and returns kernels by total time, largest first.
  std::vector<KernelStat> stop();
};

}  // namespace lmt
