// The strategy named by ddp.strategy.
#include "check.hpp"
#include "grad_sync.hpp"

namespace lmt {

std::unique_ptr<GradSync> make_naive_sync(const GradBuffer& g, const ParamLayout& layout);
std::unique_ptr<GradSync> make_flat_sync(const GradBuffer& g, const ParamLayout& layout);
std::unique_ptr<GradSync> make_overlap_sync(const GradBuffer& g, const ParamLayout& layout);
std::unique_ptr<GradSync> make_bucketed_sync(const GradBuffer& g, const ParamLayout& layout,
                                             double bucket_bytes);

std::unique_ptr<GradSync> make_grad_sync(Strategy strategy, const GradBuffer& grads,
                                         const ParamLayout& layout, double bucket_mb) {
  switch (strategy) {
    case Strategy::naive: return make_naive_sync(grads, layout);
    case Strategy::flat: return make_flat_sync(grads, layout);
    case Strategy::overlap: return make_overlap_sync(grads, layout);
    case Strategy::bucketed: return make_bucketed_sync(grads, layout, bucket_mb * (1 << 20));
    case Strategy::zero1: break;
  }
  LMT_FATAL("ddp.strategy = zero1 shards the optimizer too: construct Zero1 (zero1.hpp)");
}

}  // namespace lmt
