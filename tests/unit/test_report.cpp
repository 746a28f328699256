// CSV rows: append_csv appends to the file itself (links and mode kept, earlier bytes untouched),
// whole rows from processes sharing the file; config_columns holds strings raw.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "report.hpp"
#include "../helpers.hpp"

using namespace lmt;
using lmt::test::TempDir;

namespace {

CsvRow row_of(const std::string& value) {
  CsvRow row;
  row.add("name", value);
  row.add("n", "1");
  return row;
}

std::string contents(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("append_csv: a new file gets the header, later rows only their line") {
  TempDir dir;
  const std::string csv = dir.path + "/a.csv";
  append_csv(csv, row_of("x"));
  append_csv(csv, row_of("y"));
  CHECK(contents(csv) == "name,n\nx,1\ny,1\n");
}

TEST_CASE("append_csv: through a symlink the link stays and its target gets the row") {
  TempDir dir;
  const std::string target = dir.file("target.csv", "name,n\nx,1\n");
  const std::string link = dir.path + "/link.csv";
  REQUIRE(symlink(target.c_str(), link.c_str()) == 0);
  append_csv(link, row_of("y"));
  CHECK(std::filesystem::is_symlink(link));
  CHECK(contents(target) == "name,n\nx,1\ny,1\n");
}

TEST_CASE("append_csv: the file stays the same file, its mode and hard links kept") {
  TempDir dir;
  const std::string csv = dir.file("a.csv", "name,n\nx,1\n");
  const std::string other = dir.path + "/other.csv";
  REQUIRE(link(csv.c_str(), other.c_str()) == 0);
  REQUIRE(chmod(csv.c_str(), 0600) == 0);
  struct stat before, after;
  REQUIRE(stat(csv.c_str(), &before) == 0);
  append_csv(csv, row_of("y"));
  REQUIRE(stat(csv.c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);
  CHECK((after.st_mode & 07777) == 0600);
  CHECK(contents(other) == "name,n\nx,1\ny,1\n");
}

TEST_CASE("append_csv: a last row without a newline gets one before the new row") {
  TempDir dir;
  const std::string csv = dir.file("a.csv", "name,n\nx,1");
  append_csv(csv, row_of("y"));
  CHECK(contents(csv) == "name,n\nx,1\ny,1\n");
}

TEST_CASE("append_csv: 16 processes appending at once all keep their rows, one header") {
  TempDir dir;
  const std::string csv = dir.path + "/a.csv";
  const size_t kProcs = 16;
  int go[2];
  REQUIRE(pipe(go) == 0);
  std::vector<pid_t> children;
  for (size_t i = 0; i < kProcs; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // waits for the pipe to close, so that all start together
      close(go[1]);
      char c;
      while (read(go[0], &c, 1) > 0) {}
      append_csv(csv, row_of("row " + std::to_string(i)));
      _exit(0);
    }
    children.push_back(pid);
  }
  close(go[0]);
  close(go[1]);
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  std::vector<std::string> lines = lines_of(csv);
  REQUIRE(lines.size() == kProcs + 1);
  CHECK(lines[0] == "name,n");
  std::sort(lines.begin() + 1, lines.end());
  CHECK(std::unique(lines.begin() + 1, lines.end()) == lines.end());
  for (size_t i = 1; i < lines.size(); ++i) CHECK(lines[i].rfind("row ", 0) == 0);
}

TEST_CASE("config_columns: a string with a comma, a quote and a backslash reads back raw") {
  TempDir dir;
  const std::string csv = dir.path + "/a.csv";
  const std::string raw = "we,ird\"na\\me.bin";
  Config c;
  c.data.path = raw;
  c.attention.dtypes = {"bf16", "fp32"};
  c.allreduce.sizes_mb = {1, 64};
  append_csv(csv, config_columns(c));
  const std::vector<std::string> lines = lines_of(csv);
  REQUIRE(lines.size() == 2);
  const std::vector<std::string> names = test::csv_cells(lines[0]);
  const std::vector<std::string> cells = test::csv_cells(lines[1]);
  REQUIRE(names.size() == cells.size());
  auto cell = [&](const std::string& name) {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return cells[i];
    FAIL("no column " << name);
    return std::string();
  };
  CHECK(cell("data.path") == raw);
  CHECK(cell("attention.dtypes") == "bf16 fp32");  // lists: elements separated by spaces
  CHECK(cell("allreduce.sizes_mb") == "1 64");
  CHECK(cell("data.source") == "synthetic");
}
