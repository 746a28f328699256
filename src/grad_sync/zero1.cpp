// zero1: gradients reduced bucket by bucket onto the ranks that own them, during backward; AdamW
// over this rank's shard only, piece by piece, each piece's parameters all-gathered (in bf16 under
// bf16) while AdamW updates the next (zero1.hpp).
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

ParamGroup zero1_shard(size_t total, int world, int rank) {
  const Counts c = shard_counts(total, world);
  const size_t begin = displacement(c, rank);
  return {begin, begin + c[size_t(rank)]};
}

Ranges zero1_masters(const ParamLayout& layout, int world, int rank, bool bf16,
                     bool master_weights) {
  if (!bf16) return {};
  const ParamGroup shard = zero1_shard(layout.total, world, rank);
  Ranges r;
  if (master_weights) r.push_back({shard.begin, shard.end});
  for (const ParamView& p : layout.params)
    if (!p.matmul) r.push_back({p.offset, p.offset + p.numel});
  return merged(std::move(r));
}

template <typename T>
Zero1<T>::Zero1(Backend<T>& be, const GradBuffer& grads, const ParamLayout& layout,
                double bucket_mb, bool bf16_, Stored state, uint64_t seed,
                const Ranges& masters)
    : BucketedSync(grads, layout, bucket_mb * (1 << 20)),
      counts(shard_counts(layout.total, grads.comm.size())),
      begin(zero1_shard(layout.total, grads.comm.size(), grads.comm.rank()).begin),
      end(begin + counts[size_t(grads.comm.rank())]),
      pieces(std::max<size_t>(1, (bucket_count() + counts.size() - 1) / counts.size())),
      bf16(bf16_), starts_(displacements(counts)), be_(be),
      grad_shard_(be, end - begin, MemTag::grads),
      norm_sq_(be, 1, MemTag::workspace), opt_(be, end - begin, state, seed, begin, masters) {
  LMT_ASSERT(grads.t == dtype_of<T>(), "zero1 shards the optimizer's own element type");
  // Piece k of every rank: rank r's shard cut into `pieces` parts, part k's size and place.
  piece_n_.assign(pieces, Counts(counts.size()));
  piece_at_.assign(pieces, Counts(counts.size()));
  for (size_t r = 0; r < counts.size(); ++r) {
    const Counts part = shard_counts(counts[r], int(pieces)), part_at = displacements(part);
    for (size_t k = 0; k < pieces; ++k)
      piece_n_[k][r] = part[k], piece_at_[k][r] = starts_[r] + part_at[k];
  }
  if (!bf16) return;
  exact_.resize(counts.size());
  exact_counts_.assign(counts.size(), 0);
  for (const ParamView& p : layout.params) {
    if (p.matmul) continue;
    for (size_t r = 0; r < counts.size(); ++r) {
      const ParamGroup x = in_shard(p.offset, p.offset + p.numel, r);
      if (x.end > x.begin) exact_[r].push_back(x), exact_counts_[r] += x.end - x.begin;
    }
  }
  exact_all_ = std::make_unique<BackendArray<T>>(be, displacement(exact_counts_, int(counts.size())),
                                                 MemTag::workspace);
}

template <typename T> ParamGroup Zero1<T>::in_shard(size_t a, size_t b, size_t r) const {
  const size_t from = std::max(a, starts_[r]), to = std::min(b, starts_[r] + counts[r]);
  return {from, std::max(from, to)};  // empty where they do not meet
}

// The bucket [a, b) as a reduce-scatter whose rank r part is [a, b) ∩ its shard (empty for most
// ranks): this rank's part lands at its place in grad_shard_.
template <typename T> Handle Zero1<T>::launch(const ParamGroup& bucket) {
  Counts parts(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) {
    const ParamGroup x = in_shard(bucket.begin, bucket.end, r);
    parts[r] = x.end - x.begin;
  }
  const size_t me = size_t(g_.comm.rank());
  const size_t mine = parts[me] ? in_shard(bucket.begin, bucket.end, me).begin - begin : 0;
  return g_.comm.reduce_scatter_async(static_cast<T*>(g_.data) + bucket.begin,
                                      grad_shard_.data() + mine, parts, g_.t);
}

template <typename T> GradClip Zero1<T>::clip(double max_norm) {
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
  const size_t me = size_t(g_.comm.rank());
  char* w16 = bf16 ? static_cast<char*>(be_.weights_bf16()) : nullptr;  // 2-byte elements
  std::vector<Handle> gathers;
  for (size_t k = 0; k < pieces; ++k) {
    const Counts &n = piece_n_[k], &at = piece_at_[k];
    opt_.update(params + begin, grad_shard_.data(), at[me] - begin, n[me], s);
    if (bf16) {  // AdamW wrote this rank's part of the copy
      gathers.push_back(g_.comm.all_gatherv_async(w16 + 2 * at[me], w16, n, at, DType::bf16));
    } else {
      gathers.push_back(g_.comm.all_gatherv_async(params + at[me], params, n, at, g_.t));
    }
  }
  Handle exact = bf16 ? send_exact(params) : nullptr;
  // AdamW is all enqueued: each wait now is the gathers outlasting it (exposed). fp32 and tf32:
  // the backend is told what the collectives wrote (it refreshes its copy, if any, from them),
  // while the next pieces are still gathered. bf16: the gathers wrote the bf16 copy itself, which
  // is all of the other ranks' parts that this rank holds.
  for (size_t k = 0; k < pieces; ++k) {
    wait_exposed(*gathers[k]);
    if (bf16) continue;
    for (size_t r = 0; r < counts.size(); ++r)
      if (r != me) be_.weights_written(params + piece_at_[k][r], piece_n_[k][r]);
  }
  if (!bf16) return;
  wait_exposed(*exact);
  take_exact(params);
}

template <typename T> void Zero1<T>::wait_exposed(CommHandle& h) {
  const int from = be_.mark();
  h.wait();
  exposed.push_back({from, be_.mark()});
}

// This rank's parameters read in fp32, packed at its place among all ranks', all-gathered.
template <typename T> Handle Zero1<T>::send_exact(const T* params) {
  T* const mine = exact_all_->data() + displacement(exact_counts_, g_.comm.rank());
  T* to = mine;
  for (const ParamGroup& x : exact_[size_t(g_.comm.rank())])
    be_.copy_bytes(to, params + x.begin, (x.end - x.begin) * sizeof(T)), to += x.end - x.begin;
  return g_.comm.all_gather_async(mine, exact_all_->data(), exact_counts_, g_.t);
}

// The other ranks' exact parameters (this rank holds them: zero1_masters).
template <typename T> void Zero1<T>::take_exact(T* params) {
  for (size_t r = 0; r < counts.size(); ++r) {
    if (int(r) == g_.comm.rank()) continue;
    const T* from = exact_all_->data() + displacement(exact_counts_, int(r));
    for (const ParamGroup& x : exact_[r]) {
      const size_t n = x.end - x.begin;
      be_.copy_bytes(params + x.begin, from, n * sizeof(T));
      be_.weights_written(params + x.begin, n);
      from += n;
    }
  }
}

// Rank 0 copies its part straight into the head of `whole` (part 0 comes first); the others into
// part_, sized for the largest of their parts (the parameters', sizeof(T) bytes an element) so
// that it is pinned once.
template <typename T>
template <typename Download>
void Zero1<T>::to_root(MPI_Comm host, void* whole, size_t elem_bytes, Download download) {
  const int rank = rank_in(host);
  void* part = rank == 0 ? whole : part_pin_.hold(be_, part_, part_bytes(rank));
  download(part);
  gather_to_root(host, part, whole, counts, elem_bytes);
}

template <typename T>
void Zero1<T>::gather_params(const Model<T>& model, MPI_Comm host, std::vector<T>& whole) {
  LMT_ASSERT(rank_in(host) != 0 || whole.size() == model.layout.total,
             "host copies of the parameters sized for another model");
  to_root(host, whole.data(), sizeof(T),
          [&](void* to) { model.params_host(begin, end, static_cast<T*>(to)); });
}

template <typename T> void Zero1<T>::gather_state(MPI_Comm host, OptimizerState<T>& whole) {
  const size_t eb = state_elem_bytes<T>(opt_.stored);
  const size_t bytes = displacement(counts, int(counts.size())) * eb;
  LMT_ASSERT(rank_in(host) != 0 || (whole.m.size() == bytes && whole.v.size() == bytes),
             "host copies of the moments sized for another buffer");
  whole.stored = opt_.stored, whole.t = opt_.t;
  to_root(host, whole.m.data(), eb, [&](void* to) { opt_.download_moment(0, to); });
  to_root(host, whole.v.data(), eb, [&](void* to) { opt_.download_moment(1, to); });
}

template class Zero1<float>;
template class Zero1<double>;

}  // namespace lmt
