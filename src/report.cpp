#include "report.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "check.hpp"
#include "version.hpp"

namespace lmt {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (auto& s : v) {
    bool quote = s.find_first_of(",\"\n\r") != std::string::npos;
    std::string cell = s;
    for (size_t i = 0; quote && (i = cell.find('"', i)) != std::string::npos; i += 2)
      cell.insert(i, "\"");
    out += (out.empty() ? "" : ",") + (quote ? "\"" + cell + "\"" : cell);
  }
  return out;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

}  // namespace

void CsvRow::set(const std::string& name, const std::string& value) {
  auto it = std::find(header.begin(), header.end(), name);
  LMT_ASSERT(it != header.end(), "no CSV column " + name);
  values[size_t(it - header.begin())] = value;
}

CsvRow config_columns(const Config& c) {
  Config copy = c;
  CsvRow row;
  for (auto& f : config_fields(copy)) {
    std::string v;
    if (auto* p = std::get_if<std::string*>(&f.value)) v = **p;
    else if (auto* p = std::get_if<ChoiceRef>(&f.value)) v = f.choices[p->get()];
    else if (auto* p = std::get_if<std::vector<std::string>*>(&f.value))
      for (auto& s : **p) v += (v.empty() ? "" : " ") + s;
    else if (auto* p = std::get_if<std::vector<int64_t>*>(&f.value))
      for (int64_t x : **p) v += (v.empty() ? "" : " ") + std::to_string(x);
    else if (auto* p = std::get_if<std::vector<double>*>(&f.value))
      for (double x : **p) v += (v.empty() ? "" : " ") + real_text(x);
    else v = f.to_string();  // a number or a bool, as TOML writes it
    row.add(f.name(), v);
  }
  return row;
}

CsvRow run_columns(const Config& c) {
  CsvRow row = config_columns(c);
  row.add("lmtrain_version", version());
  return row;
}

void check_csv(const std::string& path, const std::vector<std::string>& header) {
  std::string text;
  if (read_file(path, text)) {
    std::string first = text.substr(0, text.find('\n'));
    if (!text.empty() && first != join(header))
      throw UsageError(strf("--csv %s: the file has another header than this run's rows (%s...); "
                            "use a new file", path.c_str(), first.substr(0, 60).c_str()));
    if (access(path.c_str(), R_OK | W_OK) != 0)  // append_csv reads its last byte, then writes
      throw UsageError(strf("--csv %s: cannot append to it: %s", path.c_str(), strerror(errno)));
  }
  check_output_dir("--csv", path);
}

void check_output_dir(const char* flag, const std::string& path) {
  if (is_directory(path))
    throw UsageError(strf("%s %s: a directory, not a file", flag, path.c_str()));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (access(dir.c_str(), W_OK) != 0)
    throw UsageError(strf("%s %s: cannot write in %s: %s", flag, path.c_str(), dir.c_str(),
                          strerror(errno)));
}

void append_csv(const std::string& path, const CsvRow& row) {
  auto fail = [&](const char* what) {
    LMT_FATAL(strf("cannot %s %s: %s", what, path.c_str(), strerror(errno)));
  };
  // O_APPEND: bytes already there are never rewritten, and the file stays what it is (a link's
  // target, its mode). Opened for reading too, to see its last byte. The lock makes "is it empty,
  // does it end in a newline" and the write one step for runs sharing the file.
  const int fd = open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("open");
  if (flock(fd, LOCK_EX) != 0) fail("lock");
  struct stat st;
  if (fstat(fd, &st) != 0) fail("stat");
  char last = '\n';
  if (st.st_size > 0 && pread(fd, &last, 1, st.st_size - 1) != 1) fail("read");
  std::string text = st.st_size == 0 ? join(row.header) + "\n" : last != '\n' ? "\n" : "";
  text += join(row.values) + "\n";
  const ssize_t n = write(fd, text.data(), text.size());
  if (n < 0) fail("write");
  if (size_t(n) != text.size())
    LMT_FATAL(strf("cannot write %s: %zd of %zu bytes written", path.c_str(), n, text.size()));
  if (close(fd) != 0) fail("close");  // also releases the lock
}

Stats summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  s.min = v.front(), s.max = v.back();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  for (double x : v) s.mean += x / double(n);
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = n > 1 ? std::sqrt(s.std / double(n - 1)) : 0.0;
  return s;
}

std::string human_bytes(double b) {
  if (b >= double(1ull << 30)) return strf("%.2f GiB", b / double(1ull << 30));
  if (b >= double(1ull << 20)) return strf("%.1f MiB", b / double(1ull << 20));
  return strf("%.1f KiB", b / 1024.0);
}

std::string human_count(double x) {
  if (x >= 1e9) return strf("%.2fG", x / 1e9);
  if (x >= 1e6) return strf("%.2fM", x / 1e6);
  if (x >= 1e3) return strf("%.1fk", x / 1e3);
  return strf("%.0f", x);
}

std::string utc_now() {
  time_t t = time(nullptr);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
  return buf;
}

std::string duration(double s) {
  long t = long(s + 0.5);
  if (t >= 3600) return strf("%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  return strf("%ld:%02ld", t / 60, t % 60);
}

}  // namespace lmt
