#include "host_threads.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace lmt {
namespace {

// The cores this process may run on.
size_t host_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return size_t(std::max(1, CPU_COUNT(&set)));
}

}  // namespace

void on_host_threads(size_t n, size_t most, const std::function<void(size_t)>& item) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < n;) item(i);
  };
  const size_t threads = std::min({n, most, host_cores()});
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace lmt
