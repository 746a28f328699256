// allreduce mode: the all-reduce microbenchmark, in the manner of nccl-tests' all_reduce_perf.
//
// For each size (allreduce.sizes_mb, or else min_mb times powers of factor up to max_mb), in place
// on one buffer: `warmup` untimed all-reduces, then `iters` timed one by one with the backend's
// timers (CUDA events on the compute stream with nccl, the host clock with mpi). Reported per size:
//   time   median over the iterations on rank 0; min/max: the lowest and highest per-rank median
//   algbw  bytes / time;  busbw = algbw * 2 (n - 1) / n, what each link carries in a ring
//   #wrong elements (over all ranks) that differ from the exact sum after one more all-reduce of
//          a fresh pattern: rank r's element i is ((7 r + i) mod 5 - 2) / 2, so every partial sum
//          is a multiple of 1/2 of magnitude <= n, exact in fp32 and (n <= 128) in bf16.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "comm.hpp"
#include "gpu.hpp"
#include "modes.hpp"
#include "report.hpp"
#include "timing.hpp"

namespace lmt {
namespace {

constexpr double kMiB = 1 << 20;

double pattern(int rank, size_t i) { return double(int((size_t(rank) * 7 + i) % 5) - 2) * 0.5; }

// Byte sizes: whole elements, each size once, in increasing order (validate() checks that
// sizes_mb increases).
std::vector<size_t> sizes_bytes(const Config::Allreduce& a, size_t elem) {
  std::vector<double> mbs = a.sizes_mb;
  if (mbs.empty())
    for (double mb = a.min_mb; mb <= a.max_mb * (1 + 1e-12); mb *= a.factor) mbs.push_back(mb);
  std::vector<size_t> out;
  for (double mb : mbs) {
    size_t bytes = size_t(mb * kMiB) / elem * elem;
    if (out.empty() || bytes > out.back()) out.push_back(bytes);
  }
  return out;
}

CsvRow allreduce_columns(const Config& c) {
  CsvRow row = run_columns(c);
  for (auto name : {"date_utc", "world_size", "device_name", "size_bytes", "count", "type",
                    "redop", "time_us", "time_min_us", "time_max_us", "algbw_gbs", "busbw_gbs",
                    "wrong"})
    row.add(name, "");
  return row;
}

struct Measured {
  size_t bytes = 0, count = 0;
  double time_us = 0, min_us = 0, max_us = 0, algbw = 0, busbw = 0;
  unsigned long long wrong = 0;
};

class AllreduceBench {
 public:
  AllreduceBench(const Config& c, const Runtime& rt, Backend<float>& be, Communicator& comm)
      : c_(c), rt_(rt), be_(be), comm_(comm),
        t_(c.allreduce.dtype == "bf16" ? DType::bf16 : DType::f32) {}

  Measured run(void* buf, size_t bytes) {
    Measured m;
    m.bytes = bytes, m.count = bytes / dtype_size(t_);
    std::vector<double> ms = time_reps<float>(be_, c_.allreduce.warmup, c_.allreduce.iters,
                                              [&](std::vector<int>&) {
                                                comm_.all_reduce_async(buf, m.count, t_)->wait();
                                              }, nullptr, nullptr, [&] { comm_.synchronize(); });
    double median = summarize(ms).median * 1e3;
    std::vector<double> medians(size_t(rt_.world));
    MPI_CHECK(MPI_Allgather(&median, 1, MPI_DOUBLE, medians.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD));
    m.time_us = medians[0];
    m.min_us = *std::min_element(medians.begin(), medians.end());
    m.max_us = *std::max_element(medians.begin(), medians.end());
    m.algbw = double(bytes) / (m.time_us * 1e-6) / 1e9;
    m.busbw = m.algbw * 2.0 * double(rt_.world - 1) / double(rt_.world);
    m.wrong = check(buf, m.count);
    return m;
  }

 private:
  // One all-reduce of the pattern; elements (summed over ranks) that differ from the exact sum.
  unsigned long long check(void* buf, size_t count) {
    std::vector<char> host(count * dtype_size(t_));
    for (size_t i = 0; i < count; ++i) store(t_, host.data(), i, pattern(rt_.rank, i));
    be_.upload_bytes(buf, host.data(), host.size());
    comm_.all_reduce_async(buf, count, t_)->wait();
    comm_.synchronize();
    be_.download_bytes(host.data(), buf, host.size());
    unsigned long long wrong = 0, total = 0;
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int r = 0; r < rt_.world; ++r) want += pattern(r, i);
      wrong += load(t_, host.data(), i) != want;
    }
    MPI_CHECK(MPI_Allreduce(&wrong, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    return total;
  }
  const Config& c_;
  const Runtime& rt_;
  Backend<float>& be_;
  Communicator& comm_;
  const DType t_;
};

}  // namespace

int run_allreduce(const CommandLine& cl, const Runtime& rt) {
  const Config& c = cl.config;
  const Config::Allreduce& a = c.allreduce;
  const bool nccl = a.backend == "nccl";
  std::unique_ptr<Backend<float>> be;
  const DType t = a.dtype == "bf16" ? DType::bf16 : DType::f32;
  const std::vector<size_t> sizes = sizes_bytes(a, dtype_size(t));
  agree(rt, [&] {
    if (rt.world < 2)  // a lone rank's "all-reduce" moves nothing: its bandwidths would mislead
      throw UsageError("run.mode = \"allreduce\" on 1 rank has no peer to reduce with: launch 2 "
                       "or more (mpirun -np N)");
    if (nccl && gpu_count() == 0) {
      auto it = c.origin.find("allreduce.backend");
      throw UsageError(strf("%s: allreduce.backend = \"nccl\" needs a GPU per rank: no GPU is "
                            "visible (or this build has no CUDA); allreduce.backend = \"mpi\" "
                            "runs on host buffers", it == c.origin.end() ? "default"
                            : it->second.c_str()));
    }
    if (!cl.csv_path.empty() && rt.is_root()) check_csv(cl.csv_path, allreduce_columns(c).header);
  });
  be = make_backend<float>(nccl ? "cuda" : "cpu", rt);
  std::unique_ptr<BackendArray<float, char>> buf;
  agree(rt, [&] { buf = std::make_unique<BackendArray<float, char>>(*be, sizes.back(), MemTag::workspace); });
  std::unique_ptr<Communicator> comm = make_communicator<float>(nccl ? "cuda" : "cpu", rt, *be,
                                                                c.ddp.comm_ctas);
  AllreduceBench bench(c, rt, *be, *comm);

  const char* type = t == DType::bf16 ? "bfloat16" : "float";
  if (rt.is_root()) {
    printf("# lmtrain allreduce: %d ranks, %s on %s buffers (%s), in place, warm-up %lld, %lld "
           "timed per size\n#\n", rt.world, a.backend.c_str(), nccl ? "device" : "host",
           be->device_name().c_str(), (long long)a.warmup, (long long)a.iters);
    printf("# %12s %12s %8s %6s %10s %8s %8s %7s %10s %10s\n", "size", "count", "type", "redop",
           "time", "algbw", "busbw", "#wrong", "min time", "max time");
    printf("# %12s %12s %8s %6s %10s %8s %8s %7s %10s %10s\n", "(B)", "(elements)", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)");
    fflush(stdout);
  }
  unsigned long long wrong = 0;
  double busbw_sum = 0;
  for (size_t bytes : sizes) {
    Measured m = bench.run(buf->data(), bytes);
    wrong += m.wrong;
    busbw_sum += m.busbw;
    if (!rt.is_root()) continue;
    printf("  %12zu %12zu %8s %6s %10.1f %8.2f %8.2f %7llu %10.1f %10.1f\n", m.bytes, m.count,
           type, "sum", m.time_us, m.algbw, m.busbw, m.wrong, m.min_us, m.max_us);
    fflush(stdout);
    if (cl.csv_path.empty()) continue;
    CsvRow row = allreduce_columns(c);
    row.set("date_utc", utc_now());
    row.set("world_size", std::to_string(rt.world));
    row.set("device_name", be->device_name());
    row.set("size_bytes", std::to_string(m.bytes));
    row.set("count", std::to_string(m.count));
    row.set("type", type);
    row.set("redop", "sum");
    row.set("time_us", strf("%.3f", m.time_us));
    row.set("time_min_us", strf("%.3f", m.min_us));
    row.set("time_max_us", strf("%.3f", m.max_us));
    row.set("algbw_gbs", strf("%.4f", m.algbw));
    row.set("busbw_gbs", strf("%.4f", m.busbw));
    row.set("wrong", std::to_string(m.wrong));
    append_csv(cl.csv_path, row);
  }
  if (rt.is_root()) {
    printf("# Out of bounds values : %llu %s\n", wrong, wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %.4f GB/s\n", busbw_sum / double(sizes.size()));
    if (!cl.csv_path.empty()) printf("# %zu csv rows appended to %s\n", sizes.size(), cl.csv_path.c_str());
  }
  return wrong ? 1 : 0;
}

}  // namespace lmt
