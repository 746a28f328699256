// safetensors reader and writer, with the small JSON subset its header uses.
#include "safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "check.hpp"

namespace lmt {
namespace {

// Parses the header JSON: an object whose values are objects of strings, numbers or arrays of
// numbers. Anything else is a malformed header.
class HeaderParser {
 public:
  HeaderParser(const std::string& s, const std::string& path) : s_(s), path_(path) {}

  void parse(Safetensors& out) {
    expect('{');
    if (peek() == '}') return void(++i_);
    do {
      std::string name = str();
      expect(':');
      expect('{');
      TensorInfo info;
      bool is_meta = name == "__metadata__";
      if (peek() != '}') do {
          std::string key = str();
          expect(':');
          if (is_meta) out.metadata[key] = str();
          else if (key == "dtype") info.dtype = str();
          else if (key == "shape") info.shape = ints();
          else if (key == "data_offsets") {
            auto o = ints();
            if (o.size() != 2 || o[0] < 0 || o[1] < o[0]) fail("bad data_offsets of " + name);
            info.begin = size_t(o[0]), info.end = size_t(o[1]);
          } else fail("unknown field " + key);
        } while (comma());
      expect('}');
      if (!is_meta) out.tensors[name] = info;
    } while (comma());
    expect('}');
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw UsageError(strf("%s: not a safetensors file (header: %s)", path_.c_str(), what.c_str()));
  }
  void ws() { while (i_ < s_.size() && isspace((unsigned char)s_[i_])) ++i_; }
  char peek() { ws(); return i_ < s_.size() ? s_[i_] : '\0'; }
  void expect(char c) { if (peek() != c) fail(strf("expected '%c' at byte %zu", c, i_)); ++i_; }
  bool comma() { if (peek() != ',') return false; ++i_; return true; }
  std::string str() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\' && i_ < s_.size()) {
        char e = s_[i_++];
        c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
        if (e == 'u') fail("\\u escapes are not supported");
      }
      out += c;
    }
    expect('"');
    return out;
  }
  std::vector<int64_t> ints() {
    std::vector<int64_t> v;
    expect('[');
    if (peek() == ']') return ++i_, v;
    do {
      ws();
      size_t used = 0;
      try { v.push_back(std::stoll(s_.substr(i_, 24), &used)); } catch (...) { fail("bad number"); }
      i_ += used;
    } while (comma());
    expect(']');
    return v;
  }

  const std::string& s_;
  const std::string& path_;
  size_t i_ = 0;
};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  }
  return out;
}

size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64") return 8;
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "BF16") return 2;
  return 0;
}

}  // namespace

namespace {

// Opens `path` and parses its header; leaves `f` at the data section and returns its size.
size_t open_and_parse(const std::string& path, std::ifstream& f, Safetensors& st) {
  if (is_directory(path))
    throw UsageError(strf("%s: a directory, not a safetensors file", path.c_str()));
  f.open(path, std::ios::binary | std::ios::ate);
  if (!f) throw UsageError(strf("%s: cannot open: %s", path.c_str(), strerror(errno)));
  size_t size = size_t(f.tellg());
  f.seekg(0);
  uint64_t n = 0;
  char first = 0;  // the header's first byte: '{' in a safetensors file
  if (size < 8 || !f.read(reinterpret_cast<char*>(&n), 8))
    throw UsageError(strf("%s: truncated (%zu bytes)", path.c_str(), size));
  if (size > 8 && (!f.read(&first, 1) || first != '{'))
    throw UsageError(strf("%s: not a safetensors file (no JSON header after its first 8 bytes)",
                          path.c_str()));
  if (n > size - 8)
    throw UsageError(strf("%s: truncated (%zu bytes, header length %llu)", path.c_str(), size,
                          (unsigned long long)n));
  f.seekg(8);
  std::string header(n, '\0');
  f.read(header.data(), std::streamsize(n));
  HeaderParser(header, path).parse(st);
  size_t need = 0;
  for (auto& [name, t] : st.tensors) {
    size_t count = 1;
    for (auto s : t.shape) count *= size_t(s);
    size_t bytes = dtype_bytes(t.dtype);
    if (!bytes || count * bytes != t.end - t.begin)
      throw UsageError(strf("%s: tensor %s: dtype %s and shape disagree with its %zu bytes",
                            path.c_str(), name.c_str(), t.dtype.c_str(), t.end - t.begin));
    need = std::max(need, t.end);
  }
  if (size - 8 - n != need)
    throw UsageError(strf("%s: truncated or padded: data section has %zu bytes, header says %zu",
                          path.c_str(), size_t(size - 8 - n), need));
  return need;
}

}  // namespace

Safetensors Safetensors::read(const std::string& path) {
  std::ifstream f;
  Safetensors st;
  const size_t n = open_and_parse(path, f, st);
  if (n == 0) return st;
  const size_t file = size_t(f.tellg()) + n;  // f is at the data section, the file's last n bytes
  const int fd = open(path.c_str(), O_RDONLY);
  void* p = fd < 0 ? MAP_FAILED : mmap(nullptr, file, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  const int err = errno;
  if (fd >= 0) close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) throw UsageError(strf("%s: cannot map: %s", path.c_str(), strerror(err)));
  std::shared_ptr<const void> mapping(p, [file](const void* q) {
    munmap(const_cast<void*>(q), file);
  });
  st.data = Section(std::move(mapping), static_cast<const char*>(p) + (file - n), n);
  return st;
}

Safetensors Safetensors::read_header(const std::string& path) {
  std::ifstream f;
  Safetensors st;
  open_and_parse(path, f, st);
  return st;
}

template <typename T>
std::vector<T> Safetensors::get(const std::string& name, const char* dtype) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw UsageError("tensor " + name + " is missing");
  if (it->second.dtype != dtype)
    throw UsageError(strf("tensor %s is %s, expected %s", name.c_str(), it->second.dtype.c_str(),
                          dtype));
  std::vector<T> out((it->second.end - it->second.begin) / sizeof(T));
  std::memcpy(out.data(), data.data() + it->second.begin, out.size() * sizeof(T));
  return out;
}
template std::vector<float> Safetensors::get(const std::string&, const char*) const;
template std::vector<double> Safetensors::get(const std::string&, const char*) const;
template std::vector<int32_t> Safetensors::get(const std::string&, const char*) const;

void SafetensorsWriter::add(const std::string& name, const char* dtype, std::vector<int64_t> shape,
                            const void* data, size_t bytes) {
  const size_t begin = tensors_.empty() ? 0 : tensors_.back().second.end;
  tensors_.push_back({name, TensorInfo{dtype, std::move(shape), begin, begin + bytes}});
  pieces_.push_back({static_cast<const char*>(data), bytes});
}

void SafetensorsWriter::add(const std::string& name, const char* dtype, std::vector<int64_t> shape,
                            std::vector<char> owned) {
  owned_.push_back(std::move(owned));
  add(name, dtype, std::move(shape), owned_.back().data(), owned_.back().size());
}

void SafetensorsWriter::write(const std::string& path) const {
  std::string h = "{";
  if (!metadata_.empty()) {
    h += "\"__metadata__\":{";
    for (auto& [k, v] : metadata_) h += "\"" + escape(k) + "\":\"" + escape(v) + "\",";
    h.back() = '}';
    h += ",";
  }
  for (auto& [name, t] : tensors_) {
    h += "\"" + escape(name) + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += strf("],\"data_offsets\":[%zu,%zu]},", t.begin, t.end);
  }
  if (h.size() > 1) h.pop_back();
  h += "}";
  while (h.size() % 8) h += ' ';  // keeps the data section 8-byte aligned
  std::string tmp = path + strf(".tmp.%d", int(getpid()));
  FILE* f = fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error(strf("cannot write %s: %s", tmp.c_str(), strerror(errno)));
  uint64_t n = h.size();
  bool ok = fwrite(&n, 8, 1, f) == 1 && fwrite(h.data(), 1, h.size(), f) == h.size();
  for (const Bytes& b : pieces_) ok = ok && fwrite(b.data, 1, b.size, f) == b.size;
  ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    remove(tmp.c_str());
    throw std::runtime_error(strf("writing %s failed: %s", path.c_str(), strerror(err)));
  }
}

}  // namespace lmt
