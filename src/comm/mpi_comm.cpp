// Communicator over MPI nonblocking collectives, on host buffers.
#include <climits>

#include "comm.hpp"
#include "runtime.hpp"

namespace lmt {

size_t dtype_size(DType t) { return t == DType::f64 ? 8 : 4; }

namespace {

MPI_Datatype mpi_type(DType t) { return t == DType::f64 ? MPI_DOUBLE : MPI_FLOAT; }

int mpi_count(size_t count) {
  LMT_ASSERT(count <= size_t(INT_MAX), "MPI collectives take at most INT_MAX elements");
  return int(count);
}

class MpiHandle : public CommHandle {
 public:
  MPI_Request req = MPI_REQUEST_NULL;
  void wait() override { MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE)); }
};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Handle all_reduce_async(void* buf, size_t count, DType t) override {
    auto h = std::make_unique<MpiHandle>();
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, mpi_count(count), mpi_type(t), MPI_SUM, comm_,
                             &h->req));
    return h;
  }
  Handle reduce_scatter_async(const void* send, void* recv, size_t count, DType t) override {
    auto h = std::make_unique<MpiHandle>();
    MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, mpi_count(count), mpi_type(t), MPI_SUM, comm_,
                                        &h->req));
    return h;
  }
  Handle all_gather_async(const void* send, void* recv, size_t count, DType t) override {
    auto h = std::make_unique<MpiHandle>();
    MPI_CHECK(MPI_Iallgather(send, mpi_count(count), mpi_type(t), recv, mpi_count(count),
                             mpi_type(t), comm_, &h->req));
    return h;
  }
  Handle broadcast_async(void* buf, size_t count, DType t, int root) override {
    auto h = std::make_unique<MpiHandle>();
    MPI_CHECK(MPI_Ibcast(buf, mpi_count(count), mpi_type(t), root, comm_, &h->req));
    return h;
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) {
  return std::make_unique<MpiCommunicator>(comm);
}

}  // namespace lmt
