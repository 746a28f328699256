// zero1: gradients reduced bucket by bucket onto the ranks that own them, during backward; AdamW
// over this rank's shard only, piece by piece, each piece's parameters all-gathered while AdamW
// updates the next (zero1.hpp).
#include "zero1.hpp"

#include <algorithm>
#include <cmath>

#include "check.hpp"

namespace lmt {

Counts shard_counts(size_t total, int world) {
  Counts c(size_t(world), total / size_t(world));
  for (size_t r = 0; r < total % size_t(world); ++r) ++c[r];
  return c;
}

template <typename T>
Zero1<T>::Zero1(Backend<T>& be, const GradBuffer& grads, const ParamLayout& layout,
                double bucket_mb)
    : BucketedSync(grads, layout, bucket_mb * (1 << 20)),
      counts(shard_counts(layout.total, grads.comm.size())),
      begin(displacement(counts, grads.comm.rank())),
      end(begin + counts[size_t(grads.comm.rank())]),
      pieces(std::max<size_t>(1, (bucket_count() + counts.size() - 1) / counts.size())), be_(be),
      grad_shard_(be, end - begin, MemTag::grads), norm_sq_(be, 1, MemTag::workspace),
      opt_(be, end - begin) {
  LMT_ASSERT(grads.t == dtype_of<T>(), "zero1 shards the optimizer's own element type");
}

// The bucket [a, b) as a reduce-scatter whose rank r part is [a, b) ∩ its shard (empty for most
// ranks): this rank's part lands at its place in grad_shard_.
template <typename T> Handle Zero1<T>::launch(const ParamGroup& bucket) {
  Counts parts(counts.size());
  for (size_t r = 0, lo = 0; r < counts.size(); lo += counts[r++]) {
    size_t from = std::max(bucket.begin, lo), to = std::min(bucket.end, lo + counts[r]);
    parts[r] = to > from ? to - from : 0;
  }
  const size_t mine = parts[size_t(g_.comm.rank())] ? std::max(bucket.begin, begin) - begin : 0;
  return g_.comm.reduce_scatter_async(static_cast<T*>(g_.data) + bucket.begin,
                                      grad_shard_.data() + mine, parts, g_.t);
}

template <typename T> GradClip Zero1<T>::clip_grad_norm(double max_norm) {
  double sq = be_.sum_squares(grad_shard_.data(), grad_shard_.size());
  be_.upload_bytes(norm_sq_.data(), &sq, sizeof sq);
  g_.comm.all_reduce(norm_sq_.data(), 1, DType::f64);
  g_.comm.synchronize();  // the host is about to block on it: a failed peer must abort, not hang
  be_.download_bytes(&sq, norm_sq_.data(), sizeof sq);
  return grad_clip(std::sqrt(sq), max_norm);  // the unsharded factor: zero1 follows the same curve
}

template <typename T>
void Zero1<T>::step(T* params, double lr, const Config::Optim& o, double grad_scale) {
  const AdamWStep s = opt_.next_step(lr, o, grad_scale);
  const size_t R = counts.size(), me = size_t(g_.comm.rank());
  std::vector<Counts> part(R), part_at(R);  // rank r's shard in pieces: sizes, offsets in it
  for (size_t r = 0; r < R; ++r) {
    part[r] = shard_counts(counts[r], int(pieces));
    part_at[r] = displacements(part[r]);
  }
  std::vector<Handle> gathers;
  std::vector<Counts> n(pieces, Counts(R)), at(pieces, Counts(R));  // piece k of every rank:
  for (size_t k = 0; k < pieces; ++k) {                              // sizes, flat-buffer places
    for (size_t r = 0; r < R; ++r)
      n[k][r] = part[r][k], at[k][r] = displacement(counts, int(r)) + part_at[r][k];
    opt_.update(params + begin, grad_shard_.data(), part_at[me][k], n[k][me], s);
    gathers.push_back(g_.comm.all_gatherv_async(params + at[k][me], params, n[k], at[k], g_.t));
  }
  // AdamW is all enqueued: each wait now is the gather outlasting it (exposed). The other ranks'
  // parts of a piece were written by the collective: the backend refreshes its copy of them (the
  // bf16 weights; AdamW wrote this rank's) while the next pieces are still gathered.
  for (size_t k = 0; k < pieces; ++k) {
    const int from = be_.mark();
    gathers[k]->wait();
    exposed.push_back({from, be_.mark()});
    for (size_t r = 0; r < R; ++r)
      if (r != me) be_.weights_written(params + at[k][r], n[k][r]);
  }
}

template class Zero1<float>;
template class Zero1<double>;

}  // namespace lmt
