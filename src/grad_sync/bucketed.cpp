// bucketed: the flat buffer cut into contiguous buckets of at least ddp.bucket_mb (backward
// order, parameters never split); a bucket's async all-reduce starts as soon as backward has
// finished every gradient in it, and finish() waits for all of them.
#include "grad_sync.hpp"

namespace lmt {

std::vector<ParamGroup> make_buckets(const ParamLayout& layout, double bucket_bytes, DType t) {
  std::vector<ParamGroup> buckets;
  for (auto& p : layout.params) {  // params are in flat order: each extends the open bucket
    if (buckets.empty() || double((buckets.back().end - buckets.back().begin) * dtype_size(t)) >=
                               bucket_bytes)
      buckets.push_back({p.offset, p.offset});
    buckets.back().end = p.offset + p.numel;
  }
  return buckets;
}

BucketedSync::BucketedSync(const GradBuffer& g, const ParamLayout& layout, double bucket_bytes)
    : g_(g), layout_(layout), buckets_(make_buckets(layout, bucket_bytes, g.t)) {}

void BucketedSync::begin_step() {
  inflight_.clear();
  next_ = 0;
}

// Groups finish in flat order, so everything below this group's end is final.
void BucketedSync::ready(int group) { launch_up_to(layout_.groups[size_t(group)].end); }

void BucketedSync::finish() {
  launch_up_to(layout_.total);
  for (auto& h : inflight_) h->wait();
  inflight_.clear();
}

void BucketedSync::launch_up_to(size_t final_end) {
  for (; next_ < buckets_.size() && buckets_[next_].end <= final_end; ++next_)
    inflight_.push_back(launch(buckets_[next_]));
}

std::unique_ptr<GradSync> make_bucketed_sync(const GradBuffer& g, const ParamLayout& layout,
                                             double bucket_bytes) {
  return std::make_unique<BucketedSync>(g, layout, bucket_bytes);
}

}  // namespace lmt
