// flat: one all-reduce over the whole flat gradient buffer after backward. No copy: the
// gradients already are one buffer.
#include "grad_sync.hpp"

namespace lmt {
namespace {

class FlatSync : public GradSync {
 public:
  FlatSync(Communicator& comm, void* grads, size_t count, DType t)
      : comm_(comm), grads_(grads), count_(count), t_(t) {}
  void finish() override { comm_.all_reduce(grads_, count_, t_); }

 private:
  Communicator& comm_;
  void* grads_;
  size_t count_;
  DType t_;
};

}  // namespace

std::unique_ptr<GradSync> make_flat_sync(Communicator& comm, void* grads, size_t count, DType t) {
  return std::make_unique<FlatSync>(comm, grads, count, t);
}

}  // namespace lmt
