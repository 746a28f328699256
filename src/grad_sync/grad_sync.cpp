// The strategy named by ddp.strategy.
#include "check.hpp"
#include "grad_sync.hpp"

namespace lmt {

std::unique_ptr<GradSync> make_flat_sync(Communicator& comm, void* grads, size_t count, DType t);

std::unique_ptr<GradSync> make_grad_sync(const std::string& strategy, Communicator& comm,
                                         const ParamLayout& layout, void* grads, DType t) {
  if (strategy == "flat") return make_flat_sync(comm, grads, layout.total, t);
  throw UsageError("ddp.strategy = \"" + strategy + "\" is not implemented");
}

}  // namespace lmt
