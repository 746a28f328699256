// flat: one all-reduce over the whole flat gradient buffer after backward.
#include "grad_sync.hpp"

namespace lmt {
namespace {

class FlatSync : public GradSync {
 public:
  FlatSync(const GradBuffer& g, size_t total) : g_(g), total_(total) {}
  void finish() override { g_.all_reduce_async(0, total_)->wait(); }

 private:
  GradBuffer g_;
  size_t total_;
};

}  // namespace

std::unique_ptr<GradSync> make_flat_sync(const GradBuffer& g, const ParamLayout& layout) {
  return std::make_unique<FlatSync>(g, layout.total);
}

}  // namespace lmt
