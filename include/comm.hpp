// The communicator interface: the four collectives every strategy is built from.
//
// All reductions are sums, in place where the collective allows. Each collective has an async
// form returning a handle; the blocking form is the async one waited on. reduce_scatter and
// all_gather take a count per rank (ZeRO-1's shards of a buffer that the world size need not
// divide), all_gatherv a place per rank too (ZeRO-1 gathers its shards piece by piece); the
// equal-count and end-to-end forms are shorthands for them. Implementations: MPI on host buffers
// (the CPU backend, and the host-staged baseline of the all-reduce benchmark), NCCL on device
// buffers (nccl_comm.cpp, with CUDA).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace lmt {

// bf16: the top half of an fp32 (storage only: sums are formed in fp32 and rounded to nearest even).
enum class DType { f32, f64, bf16 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "fp32", "fp64", "bf16"
uint16_t to_bf16(float x);      // bf16 bits of x, rounded to nearest even
float from_bf16(uint16_t bits);  // exact
// Element i of a host buffer of type t, written from / read as a double (rounded to nearest even
// where t is narrower).
void store(DType t, void* buf, size_t i, double v);
double load(DType t, const void* buf, size_t i);
template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }

// Elements per rank of a buffer laid out in rank order: rank r's part starts at displacement(r).
using Counts = std::vector<size_t>;
size_t displacement(const Counts& counts, int rank);
Counts displacements(const Counts& counts);  // displacement(r) for every rank

// One collective's time, in ms from the moment trace_from_here() was called: on MPI a host call
// (a launch or a wait: without a progress thread MPI moves data only inside its calls), on NCCL
// the collective on the comm stream (from events around it).
struct CommSpan {
  const char* what;  // "all_reduce", "reduce_scatter", "all_gather", "broadcast" (MPI: "wait" too)
  double begin_ms, end_ms;
};

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
  // recv[0..counts[rank]) = sum over ranks of send[displacement(rank) ..][0..counts[rank])
  virtual Handle reduce_scatter_async(const void* send, void* recv, const Counts& counts,
                                      DType t) = 0;
  // recv[displs[r] ..][0..counts[r]) = send[0..counts[r]) of rank r (the parts must not
  // overlap); in place when send == recv + displs[rank] elements.
  virtual Handle all_gatherv_async(const void* send, void* recv, const Counts& counts,
                                   const Counts& displs, DType t) = 0;
  // buf[0..count) = buf of rank root
  virtual Handle broadcast_async(void* buf, size_t count, DType t, int root) = 0;

  // Blocks the host until every collective launched so far has completed (a device communicator
  // polls for errors meanwhile, so a failed peer aborts the job instead of hanging it). Handles'
  // wait() may only order device work; call this before the host reads what a collective wrote.
  virtual void synchronize() {}
  // Communication time since the last call, in ms (then restarts from zero): NCCL, the comm
  // stream's time inside collectives (from events around each, waiting for peers included);
  // MPI, the host's time inside MPI calls (launches and waits: without a progress thread, MPI
  // moves data only there). Synchronizes first on a device.
  virtual double take_comm_ms() = 0;
  // Tracing (bench --trace): from now on each collective's span is kept too, relative to now (on
  // a device, to an event recorded now on the compute stream). take_comm_spans() returns the
  // spans kept so far and forgets them (on a device, those that take_comm_ms() has read).
  virtual void trace_from_here() = 0;
  virtual std::vector<CommSpan> take_comm_spans() = 0;

  Counts equal(size_t count) const { return Counts(size_t(size()), count); }
  void all_reduce(void* buf, size_t count, DType t) { all_reduce_async(buf, count, t)->wait(); }
  void reduce_scatter(const void* send, void* recv, const Counts& counts, DType t) {
    reduce_scatter_async(send, recv, counts, t)->wait();
  }
  // all_gatherv with the parts end to end in rank order, at displacement(r).
  Handle all_gather_async(const void* send, void* recv, const Counts& counts, DType t) {
    return all_gatherv_async(send, recv, counts, displacements(counts), t);
  }
  void all_gather(const void* send, void* recv, const Counts& counts, DType t) {
    all_gather_async(send, recv, counts, t)->wait();
  }
  void broadcast(void* buf, size_t count, DType t, int root) {
    broadcast_async(buf, count, t, root)->wait();
  }
};

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);

int rank_in(MPI_Comm comm);  // this process's rank in `comm`

// A buffer that the ranks of `comm` hold in parts on the host, whole on rank 0: rank r's part is
// counts[r] elements of elem_bytes, placed at displacement(r) of `whole` (rank 0's only, whose
// own part may already be there: part == whole). Every other rank sends its part point to point,
// in pieces that fit an MPI count, one rank after another: rank 0 needs host memory for the
// whole, the others for nothing more. Collective.
void gather_to_root(MPI_Comm comm, const void* part, void* whole, const Counts& counts,
                    size_t elem_bytes);

}  // namespace lmt
