// uint16 token files, memory-mapped, sampled as random contiguous windows.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "check.hpp"
#include "data.hpp"

namespace lmt {
namespace {

class TokenFile : public TokenSource {
 public:
  TokenFile(const std::string& path, int64_t vocab, int64_t T) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0)
      throw UsageError(strf("data.path = \"%s\": cannot open: %s", path.c_str(), strerror(errno)));
    struct stat st {};
    fstat(fd, &st);
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw UsageError(strf("data.path = \"%s\": %s, not a token file", path.c_str(),
                            S_ISDIR(st.st_mode) ? "a directory" : "not a regular file"));
    }
    if (st.st_size % 2 != 0) {
      ::close(fd);
      throw UsageError(strf("data.path = \"%s\": %lld bytes is odd: expected uint16 tokens",
                            path.c_str(), (long long)st.st_size));
    }
    n_ = size_t(st.st_size) / 2;
    if (int64_t(n_) < T + 1) {
      ::close(fd);
      throw UsageError(strf("data.path = \"%s\": %zu tokens, expected at least "
                            "model.context_length + 1 = %lld", path.c_str(), n_, (long long)T + 1));
    }
    void* p = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED)
      throw UsageError(strf("data.path = \"%s\": mmap failed: %s", path.c_str(), strerror(errno)));
    tokens_ = static_cast<const uint16_t*>(p);
    for (size_t i = 0; i < n_; ++i)
      if (tokens_[i] >= vocab) {
        unsigned bad = tokens_[i];
        munmap(const_cast<uint16_t*>(tokens_), n_ * 2);
        throw UsageError(strf("data.path = \"%s\": token %u at index %zu is not below "
                              "model.vocab_size = %lld", path.c_str(), bad, i, (long long)vocab));
      }
  }
  ~TokenFile() override { munmap(const_cast<uint16_t*>(tokens_), n_ * 2); }

  void sample(Rng& rng, int64_t B, int64_t T, int32_t* inputs, int32_t* targets) const override {
    for (int64_t b = 0; b < B; ++b) {
      size_t start = rng.below(n_ - size_t(T));
      for (int64_t t = 0; t < T; ++t) {
        inputs[b * T + t] = tokens_[start + size_t(t)];
        targets[b * T + t] = tokens_[start + size_t(t) + 1];
      }
    }
  }
  std::string describe() const override {
    return strf("token file %s (%zu tokens)", path_.c_str(), n_);
  }

 private:
  std::string path_;
  const uint16_t* tokens_ = nullptr;
  size_t n_ = 0;
};

}  // namespace

std::unique_ptr<TokenSource> open_token_file(const std::string& path, int64_t vocab, int64_t T) {
  return std::make_unique<TokenFile>(path, vocab, T);
}

std::unique_ptr<TokenSource> make_token_source(const Config& c) {
  if (c.data.source == "file")
    return open_token_file(c.data.path, c.model.vocab_size, c.model.context_length);
  return make_markov_source(c.model.vocab_size, c.data.synthetic_successors, uint64_t(c.run.seed));
}

}  // namespace lmt
