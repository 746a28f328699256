// Gradient synchronisation across ranks: the hook backward calls, and the strategies behind it.
//
// Backward calls begin_step() before the first gradient, ready(group) as each ParamGroup's
// gradients become final (backward order), and finish() before the optimizer; after finish()
// every rank holds the sum of all ranks' gradients. (The model scales its loss gradient by
// 1/world, so the sum is the average over the global batch.)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm.hpp"
#include "params.hpp"

namespace lmt {

class GradSync {
 public:
  virtual ~GradSync() = default;
  virtual void begin_step() {}
  virtual void ready(int group) { (void)group; }
  virtual void finish() = 0;
};

// grads: the flat gradient buffer (layout.total elements of dtype t).
std::unique_ptr<GradSync> make_grad_sync(const std::string& strategy, Communicator& comm,
                                         const ParamLayout& layout, void* grads, DType t);

}  // namespace lmt
