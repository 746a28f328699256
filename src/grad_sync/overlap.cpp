// overlap: as soon as backward finishes a group (a layer, the head, the embedding), an async
// all-reduce of its contiguous range starts while backward goes on; finish() waits for all.
#include "grad_sync.hpp"

namespace lmt {
namespace {

class OverlapSync : public GradSync {
 public:
  OverlapSync(const GradBuffer& g, const ParamLayout& layout) : g_(g), layout_(layout) {}
  void begin_step() override { inflight_.clear(); }
  void ready(int group) override {
    const ParamGroup& r = layout_.groups[size_t(group)];
    inflight_.push_back(g_.all_reduce_async(r.begin, r.end));
  }
  void finish() override {
    for (auto& h : inflight_) h->wait();
    inflight_.clear();
  }

 private:
  GradBuffer g_;
  const ParamLayout& layout_;
  std::vector<Handle> inflight_;
};

}  // namespace

std::unique_ptr<GradSync> make_overlap_sync(const GradBuffer& g, const ParamLayout& layout) {
  return std::make_unique<OverlapSync>(g, layout);
}

}  // namespace lmt
