// The communicator interface: the four collectives every strategy is built from.
//
// All reductions are sums, in place where the collective allows. Each collective has an async
// form returning a handle; the blocking form is the async one waited on. Implementations: MPI on
// host buffers (the CPU backend, and the host-staged baseline of the all-reduce benchmark).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <memory>

namespace lmt {

enum class DType { f32, f64 };
size_t dtype_size(DType t);
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }

class CommHandle {
 public:
  virtual ~CommHandle() = default;
  virtual void wait() = 0;
};
using Handle = std::unique_ptr<CommHandle>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // buf[0..count) = sum over ranks of buf[0..count)
  virtual Handle all_reduce_async(void* buf, size_t count, DType t) = 0;
  // recv[0..count) = sum over ranks of send[rank*count .. (rank+1)*count)
  virtual Handle reduce_scatter_async(const void* send, void* recv, size_t count, DType t) = 0;
  // recv[r*count .. (r+1)*count) = send[0..count) of rank r
  virtual Handle all_gather_async(const void* send, void* recv, size_t count, DType t) = 0;
  // buf[0..count) = buf of rank root
  virtual Handle broadcast_async(void* buf, size_t count, DType t, int root) = 0;

  void all_reduce(void* buf, size_t count, DType t) { all_reduce_async(buf, count, t)->wait(); }
  void reduce_scatter(const void* send, void* recv, size_t count, DType t) {
    reduce_scatter_async(send, recv, count, t)->wait();
  }
  void all_gather(const void* send, void* recv, size_t count, DType t) {
    all_gather_async(send, recv, count, t)->wait();
  }
  void broadcast(void* buf, size_t count, DType t, int root) {
    broadcast_async(buf, count, t, root)->wait();
  }
};

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);

}  // namespace lmt
