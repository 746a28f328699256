// CUPTI activity records of kernels (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL): CUPTI asks us for
// buffers, fills them with one record per kernel (name, start, end), hands them back; we total
// the durations by kernel name and keep the intervals for the region's span and busy time.
#include "kernel_profile.hpp"

#include <algorithm>

namespace lmt {

double busy_ms(std::vector<std::pair<uint64_t, uint64_t>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  uint64_t total = 0, end = 0;  // end: how far the union reaches so far
  for (auto [b, e] : intervals) {
    b = std::max(b, end);  // what lies before was counted
    if (e > b) total += e - b;
    end = std::max(end, e);
  }
  return double(total) * 1e-6;
}

std::string kernel_namespace(const std::string& name) {
  const size_t colons = name.find("::");
  return colons < name.find('<') ? name.substr(0, colons) : "";
}

}  // namespace lmt

#ifdef LMTRAIN_CUDA
#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "check.hpp"

#define CUPTI_CHECK(call)                                                 \
  do {                                                                    \
    CUptiResult cupti_rc_ = (call);                                       \
    if (cupti_rc_ != CUPTI_SUCCESS) {                                     \
      const char* msg = nullptr;                                          \
      cuptiGetResultString(cupti_rc_, &msg);                              \
      LMT_FATAL(std::string(#call) + " failed: " + (msg ? msg : "?"));   \
    }                                                                     \
  } while (0)

namespace lmt {
namespace {

std::mutex g_mutex;
std::map<std::string, KernelStat> g_stats;  // by mangled name, filled from CUPTI's thread
std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> g_spans;  // [start, end), ns

std::string pretty(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : mangled;
  std::free(d);
  // Keep the function's name: drop namespaces of ours and the parameter list.
  for (const char* noise : {"(anonymous namespace)::", "lmt::cuda::", "void "})
    for (size_t at; (at = s.find(noise)) != std::string::npos;) s.erase(at, strlen(noise));
  size_t paren = s.find('(');
  if (paren != std::string::npos && paren > 0) s = s.substr(0, paren);
  return s.size() > 90 ? s.substr(0, 87) + "..." : s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
    KernelStat& s = g_stats[k->name];
    s.calls += 1;
    s.total_ms += double(k->end - k->start) * 1e-6;
    g_spans[k->name].push_back({uint64_t(k->start), uint64_t(k->end)});
  }
  std::free(buffer);
}

}  // namespace

bool KernelProfile::available() {
  static const bool ours = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return false;
    // Under compute-sanitizer, Nsight Compute or Nsight Systems their tool holds CUPTI.
    const CUptiResult rc = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) return false;
    CUPTI_CHECK(rc);
    return true;
  }();
  return ours;
}

void KernelProfile::start() {
  LMT_ASSERT(available(), "KernelProfile::start without available()");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stats.clear();
    g_spans.clear();
  }
  CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
}

KernelSummary KernelProfile::stop() {
  cudaDeviceSynchronize();
  CUPTI_CHECK(cuptiActivityFlushAll(1));
  CUPTI_CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  std::map<std::string, KernelStat> merged;  // several mangled names can print alike
  using Spans = std::vector<std::pair<uint64_t, uint64_t>>;
  std::map<std::string, std::pair<double, Spans>> groups;  // by namespace: total ms, spans
  KernelSummary out;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (auto& [mangled, s] : g_stats) {
      const std::string name = pretty(mangled.c_str()), space = kernel_namespace(name);
      KernelStat& m = merged[name];
      m.calls += s.calls, m.total_ms += s.total_ms;
      if (space.empty()) continue;
      auto& [total, spans] = groups[space];
      total += s.total_ms;
      spans.insert(spans.end(), g_spans[mangled].begin(), g_spans[mangled].end());
    }
    Spans all;
    for (auto& [mangled, spans] : g_spans) all.insert(all.end(), spans.begin(), spans.end());
    if (!all.empty()) {
      uint64_t first = all[0].first, last = all[0].second;
      for (auto [b, e] : all) first = std::min(first, b), last = std::max(last, e);
      out.span_ms = double(last - first) * 1e-6;
      out.busy_ms = busy_ms(std::move(all));
    }
  }
  for (auto& [name, s] : merged) out.kernels.push_back({name, s.calls, s.total_ms});
  for (auto& [space, g] : groups) out.groups.push_back({space, g.first, busy_ms(g.second)});
  std::sort(out.kernels.begin(), out.kernels.end(),
            [](auto& a, auto& b) { return a.total_ms > b.total_ms; });
  return out;
}

}  // namespace lmt

#else

namespace lmt {
bool KernelProfile::available() { return false; }
void KernelProfile::start() {}
KernelSummary KernelProfile::stop() { return {}; }
}  // namespace lmt

#endif
