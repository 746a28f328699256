// The optimizer kinds behind training.hpp's Optimizer, and the set-up train and bench share.
#include "training.hpp"

#include "grad_sync.hpp"
#include "modes.hpp"
#include "zero1.hpp"

namespace lmt {
namespace {

// Every rank holds all of AdamW's state and updates every parameter; ddp.strategy's GradSync
// (none on one rank) has made the gradients every rank's sum.
template <typename T> class Replicated : public Optimizer<T> {
 public:
  Replicated(Backend<T>& be, Model<T>& model, std::unique_ptr<GradSync> sync, Stored state,
             uint64_t seed)
      : be_(be), model_(model), opt_(be, model.layout.total, state, seed, 0, model.masters),
        sync_(std::move(sync)) {}
  GradSync* sync() override { return sync_.get(); }
  GradClip clip(double max_norm) override {
    return clip_grad_norm(be_, model_.grads(), model_.layout.total, max_norm);
  }
  void step(T* params, double lr, const Config::Optim& o, double grad_scale) override {
    opt_.step(params, model_.grads(), lr, o, grad_scale);
  }
  ParamGroup shard() const override { return {0, model_.layout.total}; }
  void gather_state(MPI_Comm host, OptimizerState<T>& whole) override {
    if (rank_in(host) == 0) opt_.state(whole);
  }
  void gather_params(const Model<T>& model, MPI_Comm host, std::vector<T>& whole) override {
    if (rank_in(host) != 0) return;
    LMT_ASSERT(whole.size() == model.layout.total,
               "host copies of the parameters sized for another model");
    model.params_host(0, whole.size(), whole.data());
  }
  void set_state(const OptimizerStateView& whole) override { opt_.set_state(whole); }

 private:
  Backend<T>& be_;
  Model<T>& model_;
  AdamW<T> opt_;
  std::unique_ptr<GradSync> sync_;
};

}  // namespace

template <typename T>
std::unique_ptr<Optimizer<T>> make_optimizer(const Config& c, Backend<T>& be, Communicator* comm,
                                             Model<T>& model) {
  const Stored state = moments_stored(c.optim.state_dtype);
  const uint64_t seed = uint64_t(c.run.seed);
  if (c.ddp.strategy == Strategy::zero1) {
    LMT_ASSERT(comm, "zero1 synchronises over a communicator, on one rank too");
    return std::make_unique<Zero1<T>>(be, GradBuffer{*comm, model.grads(), dtype_of<T>()},
                                      model.layout, c.ddp.bucket_mb,
                                      c.model.precision == Precision::bf16, state, seed,
                                      model.masters);
  }
  std::unique_ptr<GradSync> sync;
  if (comm)
    sync = make_grad_sync(c.ddp.strategy, GradBuffer{*comm, model.grads(), dtype_of<T>()},
                          model.layout, c.ddp.bucket_mb);
  return std::make_unique<Replicated<T>>(be, model, std::move(sync), state, seed);
}

template <typename T>
Training<T> set_up_training(const Config& c, const Runtime& rt, Backend<T>& be) {
  Training<T> t;
  const bool zero1 = c.ddp.strategy == Strategy::zero1;
  // Gradients and parameters go over the communicator of the backend's memory (NCCL on the
  // GPU); one rank has nothing to synchronise, unless zero1.
  if (rt.world > 1 || zero1) t.comm = make_communicator(be.name(), rt, be, c.ddp.comm_ctas);
  agree(rt, [&] {
    // Under bf16 this rank holds the fp32 masters of its zero1 shard only, and without master
    // weights none of the matmul weights' (zero1.hpp); a replicated run is the one-shard case.
    const Ranges masters = zero1_masters(ParamLayout::build(c.model), zero1 ? rt.world : 1,
                                         zero1 ? rt.rank : 0, c.model.precision == Precision::bf16,
                                         c.optim.master_weights);
    t.model = std::make_unique<Model<T>>(be, c.model, c.train.batch_size, c.model.context_length,
                                         masters);
    t.optimizer = make_optimizer(c, be, t.comm.get(), *t.model);
  });
  return t;
}

template std::unique_ptr<Optimizer<float>> make_optimizer(const Config&, Backend<float>&,
                                                          Communicator*, Model<float>&);
template std::unique_ptr<Optimizer<double>> make_optimizer(const Config&, Backend<double>&,
                                                           Communicator*, Model<double>&);
template Training<float> set_up_training(const Config&, const Runtime&, Backend<float>&);
template Training<double> set_up_training(const Config&, const Runtime&, Backend<double>&);

}  // namespace lmt
