// The NCCL communicator on device buffers: every collective (equal and uneven counts, in place
// where it allows) against exact sums in fp32, bf16 and fp64, ordered after and before the compute
// stream's work without host synchronisation. Skipped where no GPU is visible; needs one GPU per
// rank (mpirun -np 2 on a 2-GPU machine).
#include <doctest/doctest.h>

#include <string>

#include "comm.hpp"
#include "gpu.hpp"
#include "modes.hpp"

using namespace lmt;

#ifdef LMTRAIN_CUDA
namespace {

// Rank r's element i: a multiple of 1/2 in [-1, 1], so every partial sum over <= 128 ranks is
// exact in bf16, fp32 and fp64.
double value(int rank, size_t i) { return double(int((size_t(rank) * 7 + i) % 5) - 2) * 0.5; }

// Host bytes of values in type t.
std::vector<char> encode(const std::vector<double>& v, DType t) {
  std::vector<char> out(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) store(t, out.data(), i, v[i]);
  return out;
}

struct Gpu {
  Runtime rt = runtime_init(nullptr, nullptr);
  std::unique_ptr<Backend<float>> be = make_backend<float>("cuda", rt);
  std::unique_ptr<Communicator> comm = make_communicator<float>("cuda", rt, *be);
  std::vector<std::unique_ptr<BackendArray<float, char>>> arrays;

  char* device(const std::vector<char>& host) {
    arrays.push_back(std::make_unique<BackendArray<float, char>>(*be, host.size(), MemTag::workspace));
    be->upload_bytes(arrays.back()->data(), host.data(), host.size());
    return arrays.back()->data();
  }
  std::vector<char> host(const char* p, size_t bytes) {
    comm->synchronize();
    std::vector<char> out(bytes);
    be->download_bytes(out.data(), p, bytes);
    return out;
  }
};

void check_collectives(Gpu& g, DType t, bool uneven) {
  const int R = g.comm->size(), me = g.comm->rank();
  Counts counts = g.comm->equal(1013);
  if (uneven)
    for (int r = 0; r < R; ++r) counts[size_t(r)] = size_t(500 + 37 * r + (r % 2));
  const size_t total = displacement(counts, R), mine = counts[size_t(me)], at = displacement(counts, me);
  auto pattern = [&](int rank, size_t n, size_t offset = 0) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = value(rank, offset + i);
    return v;
  };
  const size_t es = dtype_size(t);

  // all_reduce, in place
  char* buf = g.device(encode(pattern(me, total), t));
  g.comm->all_reduce_async(buf, total, t)->wait();
  auto got = g.host(buf, total * es);
  for (size_t i = 0; i < total; ++i) {
    double want = 0;
    for (int r = 0; r < R; ++r) want += value(r, i);
    REQUIRE(load(t, got.data(), i) == want);
  }

  // reduce_scatter: this rank's part of every rank's buffer, summed
  char* send = g.device(encode(pattern(me, total), t));
  char* recv = g.device(encode(std::vector<double>(mine + 1, -7.0), t));
  g.comm->reduce_scatter_async(send, recv, counts, t)->wait();
  got = g.host(recv, (mine + 1) * es);
  for (size_t i = 0; i < mine; ++i) {
    double want = 0;
    for (int r = 0; r < R; ++r) want += value(r, at + i);
    REQUIRE(load(t, got.data(), i) == want);
  }
  CHECK(load(t, got.data(), mine) == -7.0);  // nothing written past this rank's part

  // all_gather, out of place and in place
  std::vector<double> expect(total);
  for (int r = 0; r < R; ++r)
    for (size_t i = 0; i < counts[size_t(r)]; ++i) {
      size_t j = displacement(counts, r) + i;
      expect[j] = value(r, j);
    }
  char* part = g.device(encode(pattern(me, mine, at), t));
  char* all = g.device(encode(std::vector<double>(total, -7.0), t));
  g.comm->all_gather_async(part, all, counts, t)->wait();
  got = g.host(all, total * es);
  for (size_t j = 0; j < total; ++j) REQUIRE(load(t, got.data(), j) == expect[j]);
  std::vector<double> own(total, -7.0);
  for (size_t i = 0; i < mine; ++i) own[at + i] = value(me, at + i);
  char* inplace = g.device(encode(own, t));
  g.comm->all_gather_async(inplace + at * es, inplace, counts, t)->wait();
  got = g.host(inplace, total * es);
  for (size_t j = 0; j < total; ++j) REQUIRE(load(t, got.data(), j) == expect[j]);

  // all_gatherv, in place and out of place, the parts in reverse rank order with a gap of 3
  // before each (the gaps keep their -7) and, with several ranks, the last rank's part empty
  Counts vc = counts, displs = Counts(size_t(R));
  if (R > 1) vc[size_t(R - 1)] = 0;
  size_t end = 0;
  for (int r = R - 1; r >= 0; --r) displs[size_t(r)] = end + 3, end += 3 + vc[size_t(r)];
  std::vector<double> placed(end, -7.0), want(end, -7.0);
  for (int r = 0; r < R; ++r)
    for (size_t i = 0; i < vc[size_t(r)]; ++i)
      want[displs[size_t(r)] + i] = value(r, displs[size_t(r)] + i);
  const size_t vmine = vc[size_t(me)], vat = displs[size_t(me)];
  for (size_t i = 0; i < vmine; ++i) placed[vat + i] = want[vat + i];
  for (bool in_place : {true, false}) {
    INFO("all_gatherv in place: ", in_place);
    char* gv = g.device(encode(in_place ? placed : std::vector<double>(end, -7.0), t));
    char* send = in_place ? gv + vat * es
                          : g.device(encode(std::vector<double>(want.begin() + long(vat),
                                                                want.begin() + long(vat + vmine)), t));
    g.comm->all_gatherv_async(send, gv, vc, displs, t)->wait();
    got = g.host(gv, end * es);
    for (size_t j = 0; j < end; ++j) REQUIRE(load(t, got.data(), j) == want[j]);
  }

  // broadcast from the last rank
  char* b = g.device(encode(pattern(me, total), t));
  g.comm->broadcast_async(b, total, t, R - 1)->wait();
  got = g.host(b, total * es);
  for (size_t i = 0; i < total; ++i) REQUIRE(load(t, got.data(), i) == value(R - 1, i));
}

bool enough_gpus() { return runtime_init(nullptr, nullptr).local_world <= gpu_count(); }

}  // namespace
#endif

TEST_CASE("nccl communicator: every collective on device buffers gives exact sums" *
          doctest::skip(gpu_count() == 0)) {
#ifdef LMTRAIN_CUDA
  if (!enough_gpus()) {
    MESSAGE("more ranks on this node than GPUs: not run");
    return;
  }
  Gpu g;
  for (DType t : {DType::f32, DType::bf16, DType::f64})
    for (bool uneven : {false, true}) {
      INFO(dtype_name(t), uneven ? " uneven" : " equal");
      check_collectives(g, t, uneven);
    }
  CHECK(g.comm->take_comm_ms() > 0);  // the comm stream's events timed the collectives
  CHECK(g.comm->take_comm_ms() == 0);  // and were read once
  CHECK(g.comm->take_comm_spans().empty());  // not tracing: no spans kept

  // Tracing: each collective's span on the comm stream, from an event on the compute stream.
  g.comm->trace_from_here();
  char* d = g.device(encode(std::vector<double>(4099, 1.0), DType::f32));
  g.comm->all_reduce_async(d, 4099, DType::f32)->wait();
  g.comm->broadcast_async(d, 4099, DType::f32, 0)->wait();
  const double busy = g.comm->take_comm_ms();
  auto spans = g.comm->take_comm_spans();
  REQUIRE(spans.size() == 2);
  CHECK(std::string(spans[0].what) == "all_reduce");
  CHECK(std::string(spans[1].what) == "broadcast");
  CHECK(spans[0].begin_ms >= 0);
  CHECK(spans[0].end_ms >= spans[0].begin_ms);
  CHECK(spans[1].begin_ms >= spans[0].end_ms);  // one stream: in launch order
  CHECK(spans[0].end_ms - spans[0].begin_ms + spans[1].end_ms - spans[1].begin_ms ==
        doctest::Approx(busy).epsilon(1e-3));
  CHECK(g.comm->take_comm_spans().empty());
#endif
}

TEST_CASE("nccl communicator: collectives wait for the compute stream and the compute stream waits "
          "for them, without host synchronisation" * doctest::skip(gpu_count() == 0)) {
#ifdef LMTRAIN_CUDA
  if (!enough_gpus()) {
    MESSAGE("more ranks on this node than GPUs: not run");
    return;
  }
  Gpu g;
  const int R = g.comm->size(), me = g.comm->rank();
  const size_t n = size_t(1) << 24;  // large: a missing dependency shows as a race
  std::vector<float> zeros(n, 0.0f);
  auto* x = reinterpret_cast<float*>(g.device(encode(std::vector<double>(n, 0.0), DType::f32)));
  auto* y = reinterpret_cast<float*>(g.device(encode(std::vector<double>(n, 0.0), DType::f32)));
  auto* mine =
      reinterpret_cast<float*>(g.device(encode(std::vector<double>(n, me + 1), DType::f32)));
  for (int rep = 0; rep < 3; ++rep) {
    // compute stream: x = 0, then x = 1 + me; comm: sum; compute stream: y = x; all enqueued at
    // once (copies on the compute stream, not kernels, but ordered as the kernels are)
    g.be->upload(x, zeros.data(), n);
    g.be->copy_bytes(x, mine, n * sizeof(float));
    g.comm->all_reduce_async(x, n, DType::f32)->wait();
    g.be->copy_bytes(y, x, n * sizeof(float));
    std::vector<float> out(n);
    g.be->download(out.data(), y, n);  // the compute stream: after the copy after the wait
    const float want = float(R * (R + 1) / 2);  // sum of (r + 1)
    size_t wrong = 0;
    for (float v : out) wrong += v != want;
    REQUIRE(wrong == 0);
  }
#endif
}
