// The MPI communicator: each collective, blocking and async, fp32, fp64 and bf16, odd counts,
// uneven per-rank counts and in-place all-gather.
#include <doctest/doctest.h>

#include <numeric>
#include <random>
#include <string>

#include "comm.hpp"

using namespace lmt;

namespace {

// Rank r's element i: a value whose sum over ranks is exact in fp32 and known in closed form.
double value(int rank, size_t i) { return double((rank + 1) * 3 + int(i % 97)) * 0.25; }

template <typename T> void check_all(Communicator& c, bool async) {
  const int R = c.size(), me = c.rank();
  const size_t n = 1013;  // odd, and not a multiple of any world size we run
  DType t = dtype_of<T>();
  std::vector<T> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = T(value(me, i));
  if (async) c.all_reduce_async(buf.data(), n, t)->wait();
  else c.all_reduce(buf.data(), n, t);
  for (size_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < R; ++r) want += value(r, i);
    REQUIRE(double(buf[i]) == want);
  }
  std::vector<T> send(n * size_t(R)), recv(n);
  for (size_t i = 0; i < send.size(); ++i) send[i] = T(value(me, i));
  if (async) c.reduce_scatter_async(send.data(), recv.data(), c.equal(n), t)->wait();
  else c.reduce_scatter(send.data(), recv.data(), c.equal(n), t);
  for (size_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < R; ++r) want += value(r, size_t(me) * n + i);
    REQUIRE(double(recv[i]) == want);
  }
  std::vector<T> mine(n), all(n * size_t(R));
  for (size_t i = 0; i < n; ++i) mine[i] = T(value(me, i));
  if (async) c.all_gather_async(mine.data(), all.data(), c.equal(n), t)->wait();
  else c.all_gather(mine.data(), all.data(), c.equal(n), t);
  for (int r = 0; r < R; ++r)
    for (size_t i = 0; i < n; ++i) REQUIRE(double(all[size_t(r) * n + i]) == value(r, i));
  const int root = R - 1;
  for (size_t i = 0; i < n; ++i) buf[i] = T(value(me, i));
  if (async) c.broadcast_async(buf.data(), n, t, root)->wait();
  else c.broadcast(buf.data(), n, t, root);
  for (size_t i = 0; i < n; ++i) REQUIRE(double(buf[i]) == value(root, i));
}

}  // namespace

TEST_CASE("mpi communicator: all_reduce, reduce_scatter, all_gather, broadcast give exact sums") {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  SUBCASE("fp32 blocking") { check_all<float>(*comm, false); }
  SUBCASE("fp64 blocking") { check_all<double>(*comm, false); }
  SUBCASE("fp32 async") { check_all<float>(*comm, true); }
  SUBCASE("fp64 async") { check_all<double>(*comm, true); }
}

TEST_CASE("mpi communicator: several async all-reduces in flight complete independently") {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  std::vector<std::vector<double>> bufs(5, std::vector<double>(37, double(comm->rank() + 1)));
  std::vector<Handle> handles;
  for (auto& b : bufs) handles.push_back(comm->all_reduce_async(b.data(), b.size(), DType::f64));
  for (auto it = handles.rbegin(); it != handles.rend(); ++it) (*it)->wait();
  const double want = comm->size() * (comm->size() + 1) / 2.0;
  for (auto& b : bufs)
    for (double x : b) CHECK(x == want);
}

TEST_CASE("mpi communicator: uneven reduce_scatter and in-place all_gather cover every element once") {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const int R = comm->size(), me = comm->rank();
  Counts counts;
  for (int r = 0; r < R; ++r) counts.push_back(size_t(7 * r + 3 + (r % 2)));  // all different
  counts[size_t(R / 2)] = 0;                                                    // and one empty
  size_t total = displacement(counts, R);
  std::vector<double> send(total), recv(counts[size_t(me)] + 1, -1.0);
  for (size_t i = 0; i < total; ++i) send[i] = value(me, i);
  comm->reduce_scatter(send.data(), recv.data(), counts, DType::f64);
  const size_t at = displacement(counts, me);
  for (size_t i = 0; i < counts[size_t(me)]; ++i) {
    double want = 0;
    for (int r = 0; r < R; ++r) want += value(r, at + i);
    REQUIRE(recv[i] == want);
  }
  CHECK(recv[counts[size_t(me)]] == -1.0);  // nothing written past this rank's count
  // In place: each rank fills only its own part, the gather fills the rest.
  std::vector<double> buf(total, -1.0);
  for (size_t i = 0; i < counts[size_t(me)]; ++i) buf[at + i] = value(me, at + i);
  comm->all_gather(buf.data() + at, buf.data(), counts, DType::f64);
  for (int r = 0; r < R; ++r)
    for (size_t i = 0; i < counts[size_t(r)]; ++i) {
      size_t j = displacement(counts, r) + i;
      REQUIRE(buf[j] == value(r, j));
    }
}

TEST_CASE("mpi communicator: all_gatherv puts each rank's part at its place, gaps untouched") {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const int R = comm->size(), me = comm->rank();
  // Parts in reverse rank order with a gap before each, one rank's part empty: only the parts'
  // elements may change.
  Counts counts, displs = Counts(size_t(R));
  for (int r = 0; r < R; ++r) counts.push_back(size_t(5 * r + 2 + (r % 3)));
  counts[size_t(R - 1)] = 0;
  size_t end = 0;
  for (int r = R - 1; r >= 0; --r) displs[size_t(r)] = end + 3, end += 3 + counts[size_t(r)];
  auto part_of = [&](size_t j) {  // the rank whose part holds element j, or -1
    for (int r = 0; r < R; ++r)
      if (j >= displs[size_t(r)] && j < displs[size_t(r)] + counts[size_t(r)]) return r;
    return -1;
  };
  for (bool in_place : {false, true}) {
    INFO("in place: ", in_place);
    std::vector<double> buf(end + 4, -1.0), mine(counts[size_t(me)]);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = value(me, displs[size_t(me)] + i);
    if (in_place) std::copy(mine.begin(), mine.end(), buf.begin() + long(displs[size_t(me)]));
    comm->all_gatherv_async(in_place ? buf.data() + displs[size_t(me)] : mine.data(), buf.data(),
                            counts, displs, DType::f64)->wait();
    for (size_t j = 0; j < buf.size(); ++j) {
      const int r = part_of(j);
      REQUIRE(buf[j] == (r < 0 ? -1.0 : value(r, j)));
    }
  }
}

TEST_CASE("mpi communicator: bf16 all_reduce sums exactly representable values exactly") {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  const int R = comm->size(), me = comm->rank();
  const size_t n = 515;
  // Small integers times powers of two: every partial sum has at most 8 significant bits.
  auto v = [](int rank, size_t i) { return float((rank + 1) * int(1 + i % 5)) * 0.5f; };
  std::vector<uint16_t> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = to_bf16(v(me, i));
  comm->all_reduce(buf.data(), n, DType::bf16);
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < R; ++r) want += v(r, i);
    REQUIRE(from_bf16(buf[i]) == want);
  }
  CHECK(to_bf16(1.0f + 1.0f / 256) == to_bf16(1.0f));        // ties round to even
  CHECK(from_bf16(to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
}

TEST_CASE("mpi communicator: once tracing, each MPI call is a span from the origin, in order") {
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  std::vector<float> buf(257, 1.0f);
  comm->all_reduce(buf.data(), buf.size(), DType::f32);
  CHECK(comm->take_comm_spans().empty());  // not tracing yet: nothing kept
  comm->take_comm_ms();
  comm->trace_from_here();
  comm->all_reduce_async(buf.data(), buf.size(), DType::f32)->wait();
  comm->broadcast(buf.data(), buf.size(), DType::f32, 0);
  const double busy = comm->take_comm_ms();
  auto spans = comm->take_comm_spans();
  REQUIRE(spans.size() == 4);  // each collective's launch, then its wait
  const char* want[] = {"all_reduce", "wait", "broadcast", "wait"};
  double sum = 0, last = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    CHECK(std::string(spans[i].what) == want[i]);
    CHECK(spans[i].begin_ms >= last);
    CHECK(spans[i].end_ms >= spans[i].begin_ms);
    last = spans[i].end_ms, sum += spans[i].end_ms - spans[i].begin_ms;
  }
  CHECK(sum == doctest::Approx(busy).epsilon(1e-9));  // the spans are the time take_comm_ms() sums
  CHECK(comm->take_comm_spans().empty());             // and were handed out once
  CHECK(buf[0] == float(comm->size() * comm->size()));  // two all-reduces of ones
}
