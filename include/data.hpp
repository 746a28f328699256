// Where training tokens come from: a token file, or a synthetic Markov chain whose
// entropy rate (the lowest loss any model can reach) is known exactly.
//
// A source is shared read-only by everyone; each rank draws its windows with its own Rng, so
// the data a rank sees is fixed by (seed, rank) and resumes exactly from the Rng's state.
// Validation's held-out windows are numbered instead (held_out): the same on every rank, for
// every world size and across a resume.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "config.hpp"
#include "rng.hpp"

namespace lmt {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // B windows of T+1 consecutive tokens: inputs[b*T + t] = w[t], targets[b*T + t] = w[t+1].
  virtual void sample(Rng& rng, int64_t B, int64_t T, int32_t* inputs, int32_t* targets) const = 0;
  // Held-out window k of n (0 <= k < n), T+1 tokens as sample() lays out one: a token file's
  // windows start at n evenly spaced offsets from its first token to its last window; the
  // synthetic chain draws window k from an Rng stream of its own (seed, k), apart from every
  // rank's training stream.
  virtual void held_out(int64_t k, int64_t n, int64_t T, int32_t* inputs,
                        int32_t* targets) const = 0;
  virtual std::string describe() const = 0;
  // Expected loss of the best possible model, in nats per token, where it is known.
  virtual std::optional<double> loss_floor() const { return std::nullopt; }
};

// A token file, memory-mapped: a raw uint16 array as NumPy writes it (tofile, little endian), or
// a NumPy .npy file (np.save, told by its magic) of one dimension of uint16 or int32. Throws
// UsageError for a missing file, an odd byte count, a .npy of another dtype or shape or cut
// short, fewer than T+1 tokens, or a token outside [0, vocab); the message names `key`, the
// config key that gave the path.
std::unique_ptr<TokenSource> open_token_file(const std::string& path, int64_t vocab, int64_t T,
                                             const char* key = "data.path");

// A random sparse first-order Markov chain over `vocab` tokens, `successors` choices per token
// (seeded), windows starting from its stationary distribution. Its loss floor is the entropy
// rate  H = sum_i pi_i * H(P_i),  since a model sees the current token at every position.
std::unique_ptr<TokenSource> make_markov_source(int64_t vocab, int64_t successors, uint64_t seed);

std::unique_ptr<TokenSource> make_token_source(const Config& c);

// The Rng stream of `rank`'s batches.
inline Rng data_rng(uint64_t seed, int rank) { return Rng(seed, 0xda7a0000ull + uint64_t(rank)); }

}  // namespace lmt
