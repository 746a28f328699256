// The tagged allocator's sparse allocations on the CPU backend: only the asked-for ranges, widened
// to whole pages, are memory (read- and writable, zeroed) and counted; the rest of the range is
// address space that no access may use; release gives it all back.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "backend.hpp"

using namespace lmt;

namespace {

// The byte ranges of [base, base + size) that this process may read and write, from the
// kernel's own map of it (/proc/self/maps), relative to base.
Ranges accessible(const void* base, size_t size) {
  const uintptr_t from = reinterpret_cast<uintptr_t>(base), to = from + size;
  std::ifstream maps("/proc/self/maps");
  Ranges out;
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    uintptr_t b = 0, e = 0;
    char dash = 0;
    std::string perms;
    in >> std::hex >> b >> dash >> e >> perms;
    if (e <= from || b >= to || perms.substr(0, 2) != "rw") continue;
    out.push_back({std::max(b, from) - from, std::min(e, to) - from});
  }
  return merged(out);
}

}  // namespace

TEST_CASE("memory: ranges are sorted, joined and widened to whole granules") {
  CHECK(merged({{7, 9}, {0, 3}, {3, 5}, {8, 12}, {20, 20}}) == Ranges{{0, 5}, {7, 12}});
  CHECK(granules({{1, 2}, {9, 10}, {10, 11}, {31, 33}}, 10) == Ranges{{0, 20}, {30, 40}});
  CHECK(covered(Ranges{{0, 20}, {30, 40}}) == 30);
  CHECK(in_bytes({{1, 3}}, 4) == Ranges{{4, 12}});
  CHECK(is_whole({{0, 5}}, 5));
  CHECK(!is_whole({{0, 4}}, 5));
}

TEST_CASE("memory: a sparse allocation backs and counts only its ranges' pages, zeroed; release "
          "frees them") {
  auto be = make_cpu_backend<float>();
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  CHECK(be->sparse_granule() == page);
  const size_t bytes = 11 * page + 123;  // the last page only partly in the allocation
  // Pages 0; 3, 4 and 5 (two ranges that meet in page 5); 11, the last.
  const Ranges backed{{100, 200}, {3 * page + 5, 5 * page + 7}, {5 * page + 9, 5 * page + 10},
                      {11 * page + 50, 11 * page + 123}};
  const Ranges pages{{0, page}, {3 * page, 6 * page}, {11 * page, 12 * page}};
  char* p = static_cast<char*>(be->allocate_sparse(bytes, MemTag::params, backed));
  const size_t held = 5 * page;
  CHECK(be->memory().current[size_t(MemTag::params)] == held);
  CHECK(be->memory().total == held);
  CHECK(be->memory().peak == held);
  // Exactly those pages may be touched: every other page faults (the kernel's map says so; no
  // access is tried, which would kill the test).
  CHECK(accessible(p, 12 * page) == pages);
  for (auto [b, e] : backed) {
    size_t zeros = 0;
    for (size_t i = b; i < e; ++i) zeros += p[i] == 0;
    CHECK(zeros == e - b);
    for (size_t i = b; i < e; ++i) p[i] = char(i * 7 + 1);
  }
  for (auto [b, e] : backed)
    for (size_t i = b; i < e; ++i) REQUIRE(p[i] == char(i * 7 + 1));
  // A plain allocation beside it is counted whole, under its own tag.
  void* q = be->allocate(1000, MemTag::workspace);
  CHECK(be->memory().total == held + 1000);
  be->release(p);
  CHECK(be->memory().current[size_t(MemTag::params)] == 0);
  CHECK(be->memory().total == 1000);
  CHECK(accessible(p, 12 * page).empty());  // the address space is gone too
  be->release(q);
  CHECK(be->memory().total == 0);
  CHECK(be->memory().peak == held + 1000);
}
