// Token files, memory-mapped, sampled as random contiguous windows: a raw little-endian uint16
// array (NumPy's tofile), or a NumPy .npy file of uint16 or int32 tokens (np.save).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "check.hpp"
#include "data.hpp"

namespace lmt {
namespace {

// Where a token file's tokens are and how they are stored.
struct Tokens {
  size_t offset = 0, count = 0;  // bytes from the file's start; tokens
  size_t bytes = 2;              // a uint16 (raw files, NumPy '<u2') or an int32 ('<i4')
};

// A NumPy .npy file (np.save): magic, version, header length, then a Python dict literal such as
// {'descr': '<u2', 'fortran_order': False, 'shape': (1000,), }, padded, then the data. A 1-D
// array of uint16 or int32, little endian, is a token file.
// `what`: the key and path, for messages.
Tokens npy_tokens(const std::string& what, const char* p, size_t size) {
  auto bad = [&](const std::string& why) {
    return UsageError(strf("%s: a NumPy .npy file, but %s", what.c_str(), why.c_str()));
  };
  if (size < 10) throw bad("truncated in its header");
  const int major = static_cast<unsigned char>(p[6]);
  size_t len = 0, start = 0;
  if (major == 1) {
    len = size_t(uint8_t(p[8])) | size_t(uint8_t(p[9])) << 8, start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) throw bad("truncated in its header");
    for (int i = 0; i < 4; ++i) len |= size_t(uint8_t(p[8 + i])) << (8 * i);
    start = 12;
  } else {
    throw bad(strf("format version %d (1, 2 or 3 expected)", major));
  }
  if (start + len > size) throw bad("truncated in its header");
  const std::string header(p + start, len);
  auto value = [&](const char* key) {  // the text after 'key': up to a ',' or '}' outside ()
    const size_t k = header.find(std::string("'") + key + "'");
    if (k == std::string::npos) throw bad(strf("its header has no '%s'", key));
    const size_t i = header.find(':', k) + 1;
    size_t j = i;
    for (int depth = 0; j < header.size(); ++j) {
      if (header[j] == '(') ++depth;
      else if (header[j] == ')') --depth;
      else if (depth == 0 && (header[j] == ',' || header[j] == '}')) break;
    }
    std::string v = header.substr(i, j - i);
    v.erase(0, v.find_first_not_of(" '"));
    v.erase(v.find_last_not_of(" '") + 1);
    return v;
  };
  Tokens t;
  t.offset = start + len;
  const std::string descr = value("descr"), order = value("fortran_order"), shape = value("shape");
  if (descr == "<u2" || descr == "|u2") t.bytes = 2;
  else if (descr == "<i4") t.bytes = 4;
  else throw bad("its dtype is '" + descr + "': expected uint16 ('<u2') or int32 ('<i4')");
  if (order != "False") throw bad("it is in Fortran order");
  // (N,): one dimension.
  unsigned long long n = 0;
  int used = 0;
  // N: digits alone (sscanf's %llu would take "-5" as 2^64 - 5).
  const size_t digits = shape.find_first_not_of(" (");
  if (digits == std::string::npos || !std::isdigit(static_cast<unsigned char>(shape[digits])) ||
      std::sscanf(shape.c_str(), "(%llu ,%n", &n, &used) != 1 || used == 0 ||
      shape.find_first_not_of(" )", size_t(used)) != std::string::npos)
    throw bad("its shape is " + shape + ": expected one dimension, (N,)");
  // Compared as counts of tokens, so that no product overflows.
  const size_t room = (size - t.offset) / t.bytes;
  if (n > room)
    throw bad(strf("truncated: %zu bytes of data for %llu tokens", size - t.offset, n));
  t.count = size_t(n);
  return t;
}

class TokenFile : public TokenSource {
 public:
  TokenFile(const std::string& path, int64_t vocab, int64_t T, const char* key)
      : path_(path), what_(strf("%s = \"%s\"", key, path.c_str())) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw UsageError(strf("%s: cannot open: %s", what_.c_str(), strerror(errno)));
    struct stat st {};
    fstat(fd, &st);
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw UsageError(strf("%s: %s, not a token file", what_.c_str(),
                            S_ISDIR(st.st_mode) ? "a directory" : "not a regular file"));
    }
    size_ = size_t(st.st_size);
    void* p = size_ ? mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    ::close(fd);
    if (p == MAP_FAILED)
      throw UsageError(strf("%s: mmap failed: %s", what_.c_str(), strerror(errno)));
    base_ = static_cast<const char*>(p);
    try {
      check(vocab, T);
    } catch (...) {
      if (base_) munmap(const_cast<char*>(base_), size_);
      throw;
    }
  }
  ~TokenFile() override {
    if (base_) munmap(const_cast<char*>(base_), size_);
  }

  void sample(Rng& rng, int64_t B, int64_t T, int32_t* inputs, int32_t* targets) const override {
    for (int64_t b = 0; b < B; ++b)
      window(rng.below(t_.count - size_t(T)), T, inputs + b * T, targets + b * T);
  }
  void held_out(int64_t k, int64_t n, int64_t T, int32_t* inputs,
                int32_t* targets) const override {
    // Starts 0 .. count - T - 1, evenly spaced (in 128 bits: the product may pass 64).
    const size_t last = t_.count - size_t(T) - 1;
    const unsigned __int128 spaced = (unsigned __int128)last * uint64_t(k) / uint64_t(n - 1);
    window(n > 1 ? size_t(spaced) : 0, T, inputs, targets);
  }
  std::string describe() const override {
    return strf("token file %s (%zu tokens, %s)", path_.c_str(), t_.count,
                t_.bytes == 2 ? "uint16" : "int32");
  }

 private:
  void window(size_t start, int64_t T, int32_t* inputs, int32_t* targets) const {
    for (int64_t t = 0; t < T; ++t) {
      inputs[t] = int32_t(token(start + size_t(t)));
      targets[t] = int32_t(token(start + size_t(t) + 1));
    }
  }
  int64_t token(size_t i) const {
    const char* at = base_ + t_.offset + i * t_.bytes;
    if (t_.bytes == 2) {
      uint16_t v;
      std::memcpy(&v, at, 2);
      return v;
    }
    int32_t v;
    std::memcpy(&v, at, 4);
    return v;
  }
  // Where the tokens are (a .npy file by its magic, else raw uint16), and that they fit.
  void check(int64_t vocab, int64_t T) {
    if (size_ >= 6 && std::memcmp(base_, "\x93NUMPY", 6) == 0) {
      t_ = npy_tokens(what_, base_, size_);
    } else {
      if (size_ % 2 != 0)
        throw UsageError(strf("%s: %zu bytes is odd: expected uint16 tokens", what_.c_str(),
                              size_));
      t_.count = size_ / 2;
    }
    if (int64_t(t_.count) < T + 1)
      throw UsageError(strf("%s: %zu tokens, expected at least "
                            "model.context_length + 1 = %lld", what_.c_str(), t_.count,
                            (long long)T + 1));
    for (size_t i = 0; i < t_.count; ++i)
      if (const int64_t v = token(i); v < 0 || v >= vocab)
        throw UsageError(strf("%s: token %lld at index %zu is not in "
                              "[0, model.vocab_size = %lld)", what_.c_str(), (long long)v, i,
                              (long long)vocab));
  }

  std::string path_, what_;  // what_: `key = "path"`, for messages
  const char* base_ = nullptr;  // the whole file, mapped
  size_t size_ = 0;
  Tokens t_;
};

}  // namespace

std::unique_ptr<TokenSource> open_token_file(const std::string& path, int64_t vocab, int64_t T,
                                             const char* key) {
  return std::make_unique<TokenFile>(path, vocab, T, key);
}

std::unique_ptr<TokenSource> make_token_source(const Config& c) {
  if (c.data.source == "file")
    return open_token_file(c.data.path, c.model.vocab_size, c.model.context_length);
  return make_markov_source(c.model.vocab_size, c.data.synthetic_successors, uint64_t(c.run.seed));
}

}  // namespace lmt
