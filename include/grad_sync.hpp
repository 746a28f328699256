// Gradient synchronisation across ranks: the hook backward calls, and the strategies behind it.
//
// Backward calls begin_step() before the first gradient, ready(group) as each ParamGroup's
// gradients become final (backward order), and finish() before the optimizer; after finish()
// every rank holds the sum of all ranks' gradients. (The model scales its loss gradient by
// 1/world, so the sum is the average over the global batch.)
//   naive    one all-reduce per parameter tensor, after backward
//   flat     one all-reduce over the whole flat buffer, after backward (no copy: it is one buffer)
//   overlap  an async all-reduce of each group's range as soon as backward finishes the group
//   bucketed contiguous buckets of >= ddp.bucket_mb, each launched async once complete
//   zero1    the same buckets, each reduced (not all-reduced) onto the ranks that own its
//            elements: each rank gets the sum of its own shard only, and runs the optimizer on it
//            (zero1.hpp, which also owns the sharded optimizer)
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm.hpp"
#include "params.hpp"

namespace lmt {

class GradSync {
 public:
  virtual ~GradSync() = default;
  // Exposed communication: pairs of backend marks (Backend::mark) around each wait for it, e.g.
  // around finish(). On the CPU the marks are the host clock, so a span is the time the host was
  // blocked; on the GPU they are CUDA events on the compute stream, whose waits for the comm
  // stream are stream waits, so a span is the time the compute stream stalled for communication
  // (host time would be ~0 there). The caller reads them with elapsed_ms and clears them.
  std::vector<std::pair<int, int>> exposed;
  virtual void begin_step() {}
  virtual void ready(int group) { (void)group; }
  virtual void finish() = 0;
};

// The flat gradient buffer as strategies see it: element ranges all-reduced in place.
struct GradBuffer {
  Communicator& comm;
  void* data;
  DType t;
  Handle all_reduce_async(size_t begin, size_t end) const {
    return comm.all_reduce_async(static_cast<char*>(data) + begin * dtype_size(t), end - begin, t);
  }
};

// Contiguous ranges of the flat buffer in backward order, each at least bucket_bytes unless it is
// the last; a parameter is never split, so one larger than a bucket is a bucket of its own.
std::vector<ParamGroup> make_buckets(const ParamLayout& layout, double bucket_bytes, DType t);

// The buckets of make_buckets, each launched (async) as soon as backward has finished every
// gradient in it; finish() launches any left and waits for all. Bucketed DDP all-reduces a
// bucket; zero1 overrides launch() to reduce-scatter it.
class BucketedSync : public GradSync {
 public:
  BucketedSync(const GradBuffer& g, const ParamLayout& layout, double bucket_bytes);
  void begin_step() override;
  void ready(int group) override;
  void finish() override;

 protected:
  virtual Handle launch(const ParamGroup& bucket) {
    return g_.all_reduce_async(bucket.begin, bucket.end);
  }
  size_t bucket_count() const { return buckets_.size(); }
  GradBuffer g_;

 private:
  void launch_up_to(size_t final_end);

  const ParamLayout& layout_;
  std::vector<ParamGroup> buckets_;
  std::vector<Handle> inflight_;
  size_t next_ = 0;  // first bucket not launched this step
};

std::unique_ptr<GradSync> make_grad_sync(Strategy strategy, const GradBuffer& grads,
                                         const ParamLayout& layout, double bucket_mb);

}  // namespace lmt
