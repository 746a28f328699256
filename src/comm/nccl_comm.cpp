// Communicator over NCCL, on device buffers.
//
// Ordering without host blocking: each collective first makes the communicator's own stream wait
// for an event recorded on the compute stream (so it reads finished gradients), then runs there;
// its handle's wait() makes the compute stream wait for an event recorded after it. Each
// collective is also bracketed by timing events on the comm stream: take_comm_ms() sums them.
// Host-blocking waits (synchronize) poll ncclCommGetAsyncError and the communication watchdog
// (watchdog.hpp: past run.comm_timeout_s the job aborts naming the ranks that did not arrive),
// so a failed, stopped or vanished peer aborts the whole job (MPI_Abort) instead of hanging it.
#ifdef LMTRAIN_CUDA
#include <chrono>
#include <thread>
#include <utility>

#include "gpu.hpp"
#include "watchdog.hpp"

namespace lmt {
namespace {

ncclDataType_t nccl_type(DType t) {
  return t == DType::f64 ? ncclFloat64 : t == DType::bf16 ? ncclBfloat16 : ncclFloat32;
}

bool all_equal(const Counts& c) {
  for (size_t x : c)
    if (x != c[0]) return false;
  return true;
}

class NcclHandle : public CommHandle {
 public:
  explicit NcclHandle(cudaStream_t compute) : compute_(compute) {
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  ~NcclHandle() override { cudaEventDestroy(done); }
  void wait() override { CUDA_CHECK(cudaStreamWaitEvent(compute_, done, 0)); }
  cudaEvent_t done = nullptr;

 private:
  cudaStream_t compute_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const Runtime& rt, cudaStream_t compute, int max_ctas)
      : comm_(nccl_bootstrap(rt, max_ctas)), compute_(compute), rank_(rt.rank), size_(rt.world) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  }
  ~NcclCommunicator() override {
    synchronize();
    ncclCommDestroy(comm_);
    for (auto* list : {&timed_, &spare_})
      for (auto [a, b] : *list) cudaEventDestroy(a), cudaEventDestroy(b);
    cudaEventDestroy(ready_);
    if (origin_) cudaEventDestroy(origin_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Handle all_reduce_async(void* buf, size_t count, DType t) override {
    return launch("all_reduce", [&] {
      NCCL_CHECK(ncclAllReduce(buf, buf, count, nccl_type(t), ncclSum, comm_, stream_));
    });
  }
  // Equal counts use NCCL's own collective; uneven ones a group of one reduce per root.
  Handle reduce_scatter_async(const void* send, void* recv, const Counts& counts,
                              DType t) override {
    return launch("reduce_scatter", [&] {
      if (all_equal(counts)) {
        NCCL_CHECK(ncclReduceScatter(send, recv, counts[0], nccl_type(t), ncclSum, comm_, stream_));
        return;
      }
      NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < size_; ++r)  // every rank skips the same empty parts
        if (counts[size_t(r)])
          NCCL_CHECK(ncclReduce(at(send, displacement(counts, r), t), recv, counts[size_t(r)],
                                nccl_type(t), ncclSum, r, comm_, stream_));
      NCCL_CHECK(ncclGroupEnd());
    });
  }
  // Equal counts end to end use NCCL's all-gather; anything else a group of one broadcast per
  // root, to the root's place.
  Handle all_gatherv_async(const void* send, void* recv, const Counts& counts,
                           const Counts& displs, DType t) override {
    LMT_ASSERT(counts.size() == size_t(size_) && displs.size() == counts.size(),
               "one count and displacement per rank");
    return launch("all_gather", [&] {
      if (all_equal(counts) && displs == displacements(counts)) {
        NCCL_CHECK(ncclAllGather(send, recv, counts[0], nccl_type(t), comm_, stream_));
        return;
      }
      NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < size_; ++r) {  // every rank skips the same empty parts
        if (!counts[size_t(r)]) continue;
        void* part = at(recv, displs[size_t(r)], t);
        NCCL_CHECK(ncclBroadcast(r == rank_ ? send : part, part, counts[size_t(r)], nccl_type(t),
                                 r, comm_, stream_));
      }
      NCCL_CHECK(ncclGroupEnd());
    });
  }
  Handle broadcast_async(void* buf, size_t count, DType t, int root) override {
    return launch("broadcast", [&] {
      NCCL_CHECK(ncclBroadcast(buf, buf, count, nccl_type(t), root, comm_, stream_));
    });
  }

  void synchronize() override {
    const auto t0 = std::chrono::steady_clock::now();
    auto last_look = t0;
    for (;;) {
      cudaError_t st = cudaStreamQuery(stream_);
      if (st == cudaSuccess) return;
      if (st != cudaErrorNotReady) CUDA_CHECK(st);
      ncclResult_t async = ncclSuccess;
      NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        LMT_FATAL(strf("NCCL collective failed: %s (a peer rank failed or left)",
                       ncclGetErrorString(async)));
      }
      const auto now = std::chrono::steady_clock::now();
      if (now - last_look > std::chrono::milliseconds(10)) {
        last_look = now;
        peers_overdue(std::chrono::duration<double>(now - t0).count(), "an NCCL collective");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  double take_comm_ms() override {
    synchronize();
    double ms = 0;
    for (size_t i = 0; i < timed_.size(); ++i) {
      auto [a, b] = timed_[i];
      float x = 0;
      CUDA_CHECK(cudaEventElapsedTime(&x, a, b));
      ms += x;
      if (!origin_) continue;
      float from = 0, to = 0;
      CUDA_CHECK(cudaEventElapsedTime(&from, origin_, a));
      CUDA_CHECK(cudaEventElapsedTime(&to, origin_, b));
      spans_.push_back({timed_what_[i], from, to});
    }
    spare_.insert(spare_.end(), timed_.begin(), timed_.end());
    timed_.clear();
    timed_what_.clear();
    return ms;
  }
  void trace_from_here() override {
    if (!origin_) CUDA_CHECK(cudaEventCreate(&origin_));
    CUDA_CHECK(cudaEventRecord(origin_, compute_));
    spans_.clear();
  }
  std::vector<CommSpan> take_comm_spans() override { return std::exchange(spans_, {}); }

 private:
  static void* at(const void* base, size_t elements, DType t) {
    return static_cast<char*>(const_cast<void*>(base)) + elements * dtype_size(t);
  }
  template <typename F> Handle launch(const char* what, F&& collective) {
    CUDA_CHECK(cudaEventRecord(ready_, compute_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
    auto [start, end] = timing_pair(what);
    CUDA_CHECK(cudaEventRecord(start, stream_));
    collective();
    CUDA_CHECK(cudaEventRecord(end, stream_));
    auto h = std::make_unique<NcclHandle>(compute_);
    CUDA_CHECK(cudaEventRecord(h->done, stream_));
    return h;
  }
  // Timing events are reused once take_comm_ms() has read them.
  std::pair<cudaEvent_t, cudaEvent_t> timing_pair(const char* what) {
    if (spare_.empty()) {
      cudaEvent_t a, b;
      CUDA_CHECK(cudaEventCreate(&a));
      CUDA_CHECK(cudaEventCreate(&b));
      spare_.push_back({a, b});
    }
    timed_.push_back(spare_.back());
    timed_what_.push_back(what);
    spare_.pop_back();
    return timed_.back();
  }

  ncclComm_t comm_;
  cudaStream_t compute_, stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timed_, spare_;  // (start, end) per collective
  std::vector<const char*> timed_what_;  // the collective of each timed_ pair
  cudaEvent_t origin_ = nullptr;         // on the compute stream, once trace_from_here()
  std::vector<CommSpan> spans_;          // from origin_, of the pairs take_comm_ms() has read
  int rank_, size_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const Runtime& rt, cudaStream_t compute,
                                                     int max_ctas) {
  return std::make_unique<NcclCommunicator>(rt, compute, max_ctas);
}

}  // namespace lmt
#endif
