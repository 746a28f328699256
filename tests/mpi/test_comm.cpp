// The MPI communicator: each collective, blocking and async, fp32 and fp64, odd counts.
#include <doctest/doctest.h>

#include <numeric>
#include <random>

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
  if (async) c.reduce_scatter_async(send.data(), recv.data(), n, t)->wait();
  else c.reduce_scatter(send.data(), recv.data(), n, t);
  for (size_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < R; ++r) want += value(r, size_t(me) * n + i);
    REQUIRE(double(recv[i]) == want);
  }
  std::vector<T> mine(n), all(n * size_t(R));
  for (size_t i = 0; i < n; ++i) mine[i] = T(value(me, i));
  if (async) c.all_gather_async(mine.data(), all.data(), n, t)->wait();
  else c.all_gather(mine.data(), all.data(), n, t);
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
