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

// The kernels of one namespace (attn:: for FlashAttention's): their times added, and how long at
// least one of them ran. The two differ where they ran side by side (the attention backward's dQ
// kernel beside its dK/dV kernel), and busy_ms is then the time the op held the GPU.
struct KernelGroup {
  std::string name;
  double total_ms = 0, busy_ms = 0;
};

// A region's kernels by total time, largest first; span_ms from the first kernel's start to the
// last one's end; busy_ms of that span with at least one kernel running (the rest: the GPU idle
// between kernels); groups by namespace, in name order.
struct KernelSummary {
  std::vector<KernelStat> kernels;
  double span_ms = 0, busy_ms = 0;
  std::vector<KernelGroup> groups;
};

// The namespace a kernel's shortened name begins with ("attn" of "attn::fwd_kernel<64>"), or ""
// where it has none (a "::" inside template arguments does not count).
std::string kernel_namespace(const std::string& name);

// The length of the union of [start, end) intervals (nanoseconds), in ms: in any order,
// overlapping or not.
double busy_ms(std::vector<std::pair<uint64_t, uint64_t>> intervals);

class KernelProfile {
 public:
  // A GPU is visible and CUPTI's activity records are ours to take: not where another tool holds
  // them (compute-sanitizer, Nsight Compute or Systems), nor without CUDA.
  static bool available();
  void start();  // enables kernel activity records (adds overhead: never inside timed regions)
  KernelSummary stop();  // flushes the records
};

}  // namespace lmt
