// ZeRO-1: optimizer state (the AdamW moments and, under bf16, the fp32 master weights) sharded
// across ranks by contiguous range of the flat buffers.
//
// Rank r owns elements [displacement(r), + counts[r]) of the flat parameter buffer (backward
// order, so a shard is one range; the first total % world ranks own one element more). A step:
//   backward          the gradient buckets of ddp.bucket_mb (as bucketed DDP's), each reduced as
//                     soon as it is complete, while backward goes on: a rank receives the sums
//                     of the bucket's elements that lie in its shard (most buckets lie in one
//                     shard, so that is one reduce onto its owner)
//   finish()          waits for the last buckets
//   clip()            the global norm from the all-reduced squared norms of the shards, and the
//                     clipping factor step() applies
//   step()            AdamW over this rank's shard with its own moments (1/world of them, in
//                     fp32 or bf16: what AdamW keeps is what is sharded; bf16's rounding draws
//                     by flat-buffer index, so any sharding rounds as one rank does), and
//                     the parameters all-gathered in place so that every rank can run forward:
//                     each shard is cut into `pieces` parts, and the all-gather of every rank's
//                     part k runs (on the GPU, on the comm stream) while AdamW updates part k + 1;
//                     only what is left of the all-gathers after the last part is exposed (one
//                     span per wait)
// There are about as many pieces per shard as buckets per shard, so a piece is about a bucket.
// What travels depends on the precision.
//   fp32, tf32  the fp32 parameters, and the backend is told (weights_written). The matmuls read
//               the fp32 weights, so every rank holds all of them: only the moments are sharded.
//   bf16        forward reads a weight that only matmuls use as its bf16 rounding, so the pieces
//               travel as the weights' bf16 copy (half the bytes; AdamW wrote this rank's part of
//               it in its own pass), and the few parameters read in fp32 (the RMSNorm gains, the
//               embedding) follow, exact, in one more all-gather. So a rank needs the fp32 masters
//               of its shard and of those parameters only (zero1_masters): the model allocates
//               only them (Model's masters, Backend::allocate_sparse: the rest of the flat buffer
//               is address space without memory), and the bf16 copy of every weight, which its
//               matmuls read. The fp32 masters are sharded in memory: each exists on its owner
//               only, but for the fp32-read parameters', which every rank holds (about 1% of a
//               model; xl: 0.8%). Without master weights (optim.master_weights = false) the
//               shard's matmul weights have none: AdamW updates them in the bf16 copy itself,
//               and the same pieces travel.
// gather_params() brings the exact masters to rank 0 (checkpoints), each rank's shard sent from
// the host as the moments are (gather_state, gather_to_root). Zero1 is both the gradient sync
// that backward reports to and the Optimizer (optimizer.hpp) that steps.
#pragma once
#include <memory>
#include <vector>

#include "backend.hpp"
#include "grad_sync.hpp"
#include "model.hpp"
#include "optimizer.hpp"

namespace lmt {

// Elements per rank: contiguous, in rank order, covering [0, total) once; sizes differ by <= 1.
Counts shard_counts(size_t total, int world);
// Rank `rank`'s shard of a flat buffer of `total` elements: its part of shard_counts.
ParamGroup zero1_shard(size_t total, int world, int rank);
// The fp32 parameters rank `rank` holds under zero1 (element ranges of the flat buffer, for the
// Model): under bf16 its shard and the parameters that forward reads in fp32, or with
// master_weights false (optim.master_weights) those only; otherwise all of them (empty: the
// matmuls read the fp32 weights). A replicated run's are those of world 1, rank 0.
Ranges zero1_masters(const ParamLayout& layout, int world, int rank, bool bf16,
                     bool master_weights = true);

template <typename T> class Zero1 : public BucketedSync, public Optimizer<T> {
 public:
  // bucket_mb: ddp.bucket_mb, as make_grad_sync takes it; bf16: the model's precision is bf16
  // (the all-gather above moves bf16, and the model holds zero1_masters only); state and seed:
  // how the shard's moments are stored, and run.seed (AdamW's); masters: the model's (AdamW
  // updates a weight without one in the bf16 copy: optim.master_weights = false).
  Zero1(Backend<T>& be, const GradBuffer& grads, const ParamLayout& layout, double bucket_mb,
        bool bf16, Stored state = Stored::full, uint64_t seed = 0, const Ranges& masters = {});
  GradSync* sync() override { return this; }
  GradClip clip(double max_norm) override;  // as the unsharded clip_grad_norm
  void step(T* params, double lr, const Config::Optim& o, double grad_scale = 1) override;
  ParamGroup shard() const override { return {begin, end}; }
  void gather_state(MPI_Comm host, OptimizerState<T>& whole) override;
  // Every parameter, exact, on rank 0: each rank's shard as it holds it.
  void gather_params(const Model<T>& model, MPI_Comm host, std::vector<T>& whole) override;
  void size_host_copies(int rank) override {  // to_root's part_, on the ranks other than 0
    if (rank != 0) HostPin<T>::size(part_, part_bytes(rank));
  }
  void set_state(const OptimizerStateView& whole) override { opt_.set_state(whole, begin); }

  const Counts counts;
  const size_t begin, end;  // this rank's shard
  const size_t pieces;      // parts per shard in step()'s pipelined all-gather
  const bool bf16;          // step() gathers the weights' bf16 copy

 private:
  Handle launch(const ParamGroup& bucket) override;
  ParamGroup in_shard(size_t a, size_t b, size_t r) const;  // [a, b) ∩ rank r's shard
  void wait_exposed(CommHandle& h);  // waits, marking the span as exposed communication
  Handle send_exact(const T* params);
  void take_exact(T* params);
  // A checkpoint's gather: this rank's part of a buffer of `elem_bytes` elements, copied to the
  // host by download(to), then sent to rank 0's `whole` (gather_to_root).
  template <typename Download>
  void to_root(MPI_Comm host, void* whole, size_t elem_bytes, Download download);

  const Counts starts_;                    // where each rank's shard starts
  std::vector<Counts> piece_n_, piece_at_;  // [k][r]: rank r's piece k, size and flat-buffer place

  std::vector<std::vector<ParamGroup>> exact_;  // bf16: per rank, its shard's params read in fp32
  Counts exact_counts_;                    // ... their elements per rank
  std::unique_ptr<BackendArray<T>> exact_all_;  // ... and all of them, packed in rank order

  Backend<T>& be_;
  BackendArray<T> grad_shard_;       // the reduced gradients of [begin, end)
  BackendArray<T, double> norm_sq_;  // the squared norm, all-reduced where the comm works
  AdamW<T> opt_;                     // moments of [begin, end) only, as optim.state_dtype stores them
  std::vector<char> part_;           // to_root's host copy of this rank's part (not rank 0's)
  // part_'s size on `rank`: its part of the parameters, the largest of the buffers it gathers.
  size_t part_bytes(int rank) const { return counts[size_t(rank)] * sizeof(T); }
  HostPin<T> part_pin_;
};

}  // namespace lmt
