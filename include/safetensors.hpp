// The safetensors file layout (what PyTorch users load with safetensors.torch.load_file):
//   8-byte little-endian header length N | N bytes of JSON header | data section
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// into the data section) and "__metadata__" to a string -> string map.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lmt {

struct TensorInfo {
  std::string dtype;  // "F64", "F32", "I32", "BF16"
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;
};

struct Safetensors {
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  std::vector<char> data;  // the data section

  // Throws UsageError naming the file and what is wrong (missing, truncated, malformed header).
  static Safetensors read(const std::string& path);
  // The header alone (tensors and metadata; data stays empty), checked as read() checks it.
  static Safetensors read_header(const std::string& path);
  // The tensor's elements; throws UsageError if it is missing or not of dtype `dtype`.
  template <typename T> std::vector<T> get(const std::string& name, const char* dtype) const;
};

class SafetensorsWriter {
 public:
  void add(const std::string& name, const char* dtype, std::vector<int64_t> shape,
           const void* data, size_t bytes);
  void set(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Written to a temporary name in the same folder, flushed, then renamed over `path`: a reader
  // sees the old file or the whole new one, never a torn one.
  void write(const std::string& path) const;
  const std::vector<char>& data() const { return data_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<std::pair<std::string, TensorInfo>>& tensors() const { return tensors_; }

 private:
  std::vector<std::pair<std::string, TensorInfo>> tensors_;
  std::map<std::string, std::string> metadata_;
  std::vector<char> data_;
};

}  // namespace lmt
