// The safetensors file layout (what PyTorch users load with safetensors.torch.load_file):
//   8-byte little-endian header length N | N bytes of JSON header | data section
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// into the data section) and "__metadata__" to a string -> string map.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lmt {

struct TensorInfo {
  std::string dtype;  // "F64", "F32", "I32", "BF16"
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;
};

// A file's data section as read() holds it: the file's pages, mapped read-only, so they are the
// page cache's, shared by every process that reads the file (ranks resuming from one checkpoint
// on one node hold its bytes once) and read from disk only as far as the page cache lacks them.
class Section {
 public:
  Section() = default;
  Section(std::shared_ptr<const void> mapping, const char* at, size_t bytes)
      : mapping_(std::move(mapping)), p_(at), n_(bytes) {}
  const char* data() const { return p_; }
  size_t size() const { return n_; }
  bool operator==(const Section& o) const {
    return n_ == o.n_ && (n_ == 0 || std::memcmp(p_, o.p_, n_) == 0);
  }

 private:
  std::shared_ptr<const void> mapping_;
  const char* p_ = nullptr;
  size_t n_ = 0;
};

struct Safetensors {
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  Section data;  // the data section

  // The header parsed and the data section mapped (Section). Throws UsageError naming the file
  // and what is wrong (missing, truncated, malformed header, not mappable).
  static Safetensors read(const std::string& path);
  // The header alone (tensors and metadata; data stays empty), checked as read() checks it.
  static Safetensors read_header(const std::string& path);
  // The tensor's elements; throws UsageError if it is missing or not of dtype `dtype`.
  template <typename T> std::vector<T> get(const std::string& name, const char* dtype) const;
};

// A piece of a data section: the writer's tensors lie where their owners keep them.
struct Bytes {
  const char* data;
  size_t size;
};

// Holds no copy of the tensors it is given: their bytes are written from where they lie, so they
// must outlive write(). A tensor made only for the file (converted, say) is handed over instead.
class SafetensorsWriter {
 public:
  void add(const std::string& name, const char* dtype, std::vector<int64_t> shape,
           const void* data, size_t bytes);
  void add(const std::string& name, const char* dtype, std::vector<int64_t> shape,
           std::vector<char> owned);
  void set(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Written to a temporary name in the same folder, flushed, then renamed over `path`: a reader
  // sees the old file or the whole new one, never a torn one. Throws std::runtime_error naming
  // the file and the system's reason where it cannot.
  void write(const std::string& path) const;
  // The data section: the tensors' bytes in the order they were added.
  const std::vector<Bytes>& data() const { return pieces_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<std::pair<std::string, TensorInfo>>& tensors() const { return tensors_; }

 private:
  std::vector<std::pair<std::string, TensorInfo>> tensors_;
  std::map<std::string, std::string> metadata_;
  std::vector<Bytes> pieces_;
  std::vector<std::vector<char>> owned_;  // moved in: their buffers stay where they are
};

}  // namespace lmt
