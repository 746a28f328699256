// The safetensors reader: a file's data section is mapped, not copied, and every byte of it reads
// back as written.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "safetensors.hpp"
#include "../helpers.hpp"

using namespace lmt;

namespace {

// Whether this process maps `path` (/proc/self/maps names each mapped file).
bool mapped(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream all;
  all << maps.rdbuf();
  return all.str().find(path) != std::string::npos;
}

}  // namespace

TEST_CASE("safetensors: read maps the data section, which reads back every byte as written and "
          "stays mapped while a copy of it lives") {
  lmt::test::TempDir dir;
  const std::string path = dir.file("t.safetensors");
  const std::vector<double> a = lmt::test::randn<double>(1001);
  const std::vector<int32_t> b{7, -3, 2147483647};
  SafetensorsWriter w;
  w.add("a", "F64", {7, 11, 13}, a.data(), a.size() * sizeof(double));
  w.add("b", "I32", {3}, b.data(), b.size() * sizeof(int32_t));
  w.set("k", "v");
  w.write(path);
  Safetensors copy;
  {
    const Safetensors st = Safetensors::read(path);
    CHECK(mapped(path));
    CHECK(st.data.size() == a.size() * sizeof(double) + b.size() * sizeof(int32_t));
    CHECK(st.get<double>("a", "F64") == a);
    CHECK(st.get<int32_t>("b", "I32") == b);
    CHECK(st.metadata.at("k") == "v");
    copy = st;
  }
  CHECK(mapped(path));  // the copy holds the mapping
  CHECK(copy.get<double>("a", "F64") == a);
  CHECK(copy.data == Safetensors::read(path).data);
  copy = Safetensors{};
  CHECK(!mapped(path));  // unmapped with its last holder
  // A file of metadata only has an empty data section, which maps nothing.
  SafetensorsWriter empty;
  empty.set("k", "v");
  const std::string bare = dir.file("bare.safetensors");
  empty.write(bare);
  const Safetensors st = Safetensors::read(bare);
  CHECK(st.data.size() == 0);
  CHECK(st.data == Safetensors{}.data);
  CHECK(!mapped(bare));
}
