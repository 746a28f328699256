// The synthetic source: a random sparse Markov chain with a known entropy rate.
//
// Token i moves to `successors` distinct tokens (one of them i+1 mod V, so every token reaches
// every other) with Dirichlet(1) probabilities. The stationary distribution pi comes from power
// iteration on the lazy chain (P + I)/2, which has the same pi and always converges.
#include <algorithm>
#include <cmath>
#include <vector>

#include "check.hpp"
#include "data.hpp"

namespace lmt {
namespace {

class MarkovSource : public TokenSource {
 public:
  MarkovSource(int64_t vocab, int64_t k, uint64_t seed) : V_(vocab), K_(k), seed_(seed) {
    Rng rng(seed, 0x3a7c0f);
    next_.resize(size_t(V_ * K_));
    cdf_.resize(size_t(V_ * K_));
    std::vector<double> w(static_cast<size_t>(K_));
    for (int64_t i = 0; i < V_; ++i) {
      int32_t* nx = &next_[size_t(i * K_)];
      nx[0] = int32_t((i + 1) % V_);
      for (int64_t j = 1; j < K_; ++j) {
        int32_t cand;
        do cand = int32_t(rng.below(uint64_t(V_)));
        while (std::find(nx, nx + j, cand) != nx + j);
        nx[j] = cand;
      }
      double sum = 0;
      for (auto& x : w) sum += (x = -std::log(1.0 - rng.uniform()));
      double acc = 0;
      for (int64_t j = 0; j < K_; ++j) cdf_[size_t(i * K_ + j)] = (acc += w[size_t(j)] / sum);
      cdf_[size_t(i * K_ + K_ - 1)] = 1.0;
    }
    stationary();
  }

  void sample(Rng& rng, int64_t B, int64_t T, int32_t* inputs, int32_t* targets) const override {
    for (int64_t b = 0; b < B; ++b) {
      double u = rng.uniform();
      int32_t x = int32_t(std::upper_bound(pi_cdf_.begin(), pi_cdf_.end(), u) - pi_cdf_.begin());
      x = std::min<int32_t>(x, int32_t(V_ - 1));
      for (int64_t t = 0; t < T; ++t) {
        inputs[b * T + t] = x;
        x = step(x, rng.uniform());
        targets[b * T + t] = x;
      }
    }
  }
  void held_out(int64_t k, int64_t, int64_t T, int32_t* inputs,
                int32_t* targets) const override {
    Rng rng(seed_, kHeldOutStream + uint64_t(k));
    sample(rng, 1, T, inputs, targets);
  }
  std::string describe() const override {
    return strf("synthetic Markov chain (%lld tokens, %lld successors each, entropy rate %.4f "
                "nats)", (long long)V_, (long long)K_, entropy_rate_);
  }
  std::optional<double> loss_floor() const override { return entropy_rate_; }

 private:
  double prob(int64_t i, int64_t j) const {
    return cdf_[size_t(i * K_ + j)] - (j ? cdf_[size_t(i * K_ + j - 1)] : 0.0);
  }
  int32_t step(int32_t x, double u) const {
    const double* c = &cdf_[size_t(x * K_)];
    int64_t j = 0;
    while (j < K_ - 1 && u >= c[j]) ++j;
    return next_[size_t(x * K_ + j)];
  }
  void stationary() {
    std::vector<double> pi(size_t(V_), 1.0 / double(V_)), nxt(static_cast<size_t>(V_));
    for (int it = 0; it < 200000; ++it) {
      for (int64_t i = 0; i < V_; ++i) nxt[size_t(i)] = 0.5 * pi[size_t(i)];
      for (int64_t i = 0; i < V_; ++i)
        for (int64_t j = 0; j < K_; ++j)
          nxt[size_t(next_[size_t(i * K_ + j)])] += 0.5 * pi[size_t(i)] * prob(i, j);
      double diff = 0;
      for (int64_t i = 0; i < V_; ++i) diff += std::abs(nxt[size_t(i)] - pi[size_t(i)]);
      pi.swap(nxt);
      if (diff < 1e-14) break;
    }
    entropy_rate_ = 0;
    double acc = 0;
    pi_cdf_.resize(size_t(V_));
    for (int64_t i = 0; i < V_; ++i) {
      for (int64_t j = 0; j < K_; ++j) {
        double p = prob(i, j);
        if (p > 0) entropy_rate_ -= pi[size_t(i)] * p * std::log(p);
      }
      pi_cdf_[size_t(i)] = (acc += pi[size_t(i)]);
    }
  }

  // Held-out window k's stream: far from every rank's (data_rng) and parameter init's.
  static constexpr uint64_t kHeldOutStream = 0x4e1d000000000000ull;
  int64_t V_, K_;
  uint64_t seed_;
  std::vector<int32_t> next_;
  std::vector<double> cdf_, pi_cdf_;
  double entropy_rate_ = 0;
};

}  // namespace

std::unique_ptr<TokenSource> make_markov_source(int64_t vocab, int64_t successors, uint64_t seed) {
  return std::make_unique<MarkovSource>(vocab, successors, seed);
}

}  // namespace lmt
