// naive: after backward, one blocking all-reduce per parameter tensor (the baseline whose
// per-call latency the other strategies remove).
#include "grad_sync.hpp"

namespace lmt {
namespace {

class NaiveSync : public GradSync {
 public:
  NaiveSync(const GradBuffer& g, const ParamLayout& layout) : g_(g), layout_(layout) {}
  void finish() override {
    for (auto& p : layout_.params) g_.all_reduce_async(p.offset, p.offset + p.numel)->wait();
  }

 private:
  GradBuffer g_;
  const ParamLayout& layout_;
};

}  // namespace

std::unique_ptr<GradSync> make_naive_sync(const GradBuffer& g, const ParamLayout& layout) {
  return std::make_unique<NaiveSync>(g, layout);
}

}  // namespace lmt
