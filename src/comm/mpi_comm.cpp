// Communicator over MPI nonblocking collectives, on host buffers.
//
// bf16 has no MPI type: it travels as 16-bit words and is summed by a user-defined operation
// (each partial sum formed in fp32 and rounded to bf16, as NCCL's bf16 sum rounds).
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <utility>

#include "comm.hpp"
#include "runtime.hpp"
#include "watchdog.hpp"

namespace lmt {
namespace {

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(from_bf16(a[i]) + from_bf16(b[i]));
}

MPI_Datatype mpi_type(DType t) {
  return t == DType::f64 ? MPI_DOUBLE : t == DType::bf16 ? MPI_UINT16_T : MPI_FLOAT;
}

int mpi_count(size_t count) {
  LMT_ASSERT(count <= size_t(INT_MAX), "MPI collectives take at most INT_MAX elements");
  return int(count);
}

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The host time in MPI calls since take_comm_ms(), and each call's span once tracing.
struct CommClock {
  double ms = 0;
  bool tracing = false;
  Clock::time_point origin;
  std::vector<CommSpan> spans;
};

// Adds the host time of its scope to the clock (and its span, when tracing).
class Timed {
 public:
  Timed(CommClock* clock, const char* what) : clock_(clock), what_(what), t0_(Clock::now()) {}
  ~Timed() {
    const Clock::time_point t1 = Clock::now();
    clock_->ms += ms_between(t0_, t1);
    if (clock_->tracing)
      clock_->spans.push_back({what_, ms_between(clock_->origin, t0_), ms_between(clock_->origin, t1)});
  }

 private:
  CommClock* clock_;
  const char* what_;
  Clock::time_point t0_;
};

// MPI reads the count and displacement arrays until the collective completes: the handle
// keeps them.
class MpiHandle : public CommHandle {
 public:
  explicit MpiHandle(CommClock* clock) : clock_(clock) {}
  MPI_Request req = MPI_REQUEST_NULL;
  std::vector<int> counts, displs;
  void wait() override {
    Timed timed(clock_, "wait");
    wait_for_peers(&req, "an MPI collective");
  }

 private:
  CommClock* clock_;
};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
    MPI_CHECK(MPI_Op_create(bf16_sum, /*commute=*/1, &bf16_sum_));
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Op_free(&bf16_sum_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Handle all_reduce_async(void* buf, size_t count, DType t) override {
    Timed timed(&clock_, "all_reduce");
    auto h = std::make_unique<MpiHandle>(&clock_);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, mpi_count(count), mpi_type(t), sum(t), comm_,
                             &h->req));
    return h;
  }
  Handle reduce_scatter_async(const void* send, void* recv, const Counts& counts,
                              DType t) override {
    Timed timed(&clock_, "reduce_scatter");
    auto h = with_counts(counts);
    MPI_CHECK(MPI_Ireduce_scatter(send, recv, h->counts.data(), mpi_type(t), sum(t), comm_,
                                  &h->req));
    return h;
  }
  Handle all_gatherv_async(const void* send, void* recv, const Counts& counts,
                           const Counts& displs, DType t) override {
    Timed timed(&clock_, "all_gather");
    auto h = with_counts(counts, displs);
    const bool in_place = send == static_cast<const char*>(recv) +
                                      size_t(h->displs[size_t(rank_)]) * dtype_size(t);
    MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, h->counts[size_t(rank_)],
                              mpi_type(t), recv, h->counts.data(), h->displs.data(), mpi_type(t),
                              comm_, &h->req));
    return h;
  }
  double take_comm_ms() override { return std::exchange(clock_.ms, 0.0); }
  void trace_from_here() override {
    clock_.tracing = true;
    clock_.origin = Clock::now();
    clock_.spans.clear();
  }
  std::vector<CommSpan> take_comm_spans() override { return std::exchange(clock_.spans, {}); }

  Handle broadcast_async(void* buf, size_t count, DType t, int root) override {
    Timed timed(&clock_, "broadcast");
    auto h = std::make_unique<MpiHandle>(&clock_);
    MPI_CHECK(MPI_Ibcast(buf, mpi_count(count), mpi_type(t), root, comm_, &h->req));
    return h;
  }

 private:
  MPI_Op sum(DType t) const { return t == DType::bf16 ? bf16_sum_ : MPI_SUM; }
  // A handle holding counts and displs (end to end in rank order if not given) as MPI's ints.
  std::unique_ptr<MpiHandle> with_counts(const Counts& counts, const Counts& displs = {}) {
    LMT_ASSERT(counts.size() == size_t(size_) && (displs.empty() || displs.size() == counts.size()),
               "one count (and displacement) per rank");
    auto h = std::make_unique<MpiHandle>(&clock_);
    const Counts at = displs.empty() ? displacements(counts) : displs;
    for (int r = 0; r < size_; ++r) {
      h->counts.push_back(mpi_count(counts[size_t(r)]));
      h->displs.push_back(mpi_count(at[size_t(r)]));
    }
    return h;
  }

  MPI_Comm comm_;
  CommClock clock_;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) {
  return std::make_unique<MpiCommunicator>(comm);
}

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}

void gather_to_root(MPI_Comm comm, const void* part, void* whole, const Counts& counts,
                    size_t elem_bytes) {
  constexpr size_t kPiece = size_t(1) << 30;  // bytes: a large model's part outgrows an MPI count
  const int rank = rank_in(comm);
  const size_t mine = counts[size_t(rank)] * elem_bytes;
  if (rank == 0 && mine && part != whole) std::memcpy(whole, part, mine);  // part 0 comes first
  for (int r = 1; r < int(counts.size()); ++r) {
    if (rank != 0 && rank != r) continue;
    char* to = rank == 0 ? static_cast<char*>(whole) + displacement(counts, r) * elem_bytes
                         : nullptr;
    const char* from = static_cast<const char*>(part);
    const size_t n = counts[size_t(r)] * elem_bytes;
    for (size_t at = 0; at < n; at += kPiece) {
      const int len = int(std::min(kPiece, n - at));
      MPI_Request req;
      if (rank == 0)
        MPI_CHECK(MPI_Irecv(to + at, len, MPI_BYTE, r, 0, comm, &req));
      else
        MPI_CHECK(MPI_Isend(from + at, len, MPI_BYTE, 0, 0, comm, &req));
      wait_for_peers(&req, "a gather to rank 0");
    }
  }
}

}  // namespace lmt
