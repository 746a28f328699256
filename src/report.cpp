#include "report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "check.hpp"

namespace lmt {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (auto& s : v) {
    bool quote = s.find_first_of(",\"\n") != std::string::npos;
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
    std::string v = f.to_string();
    if (v.size() >= 2 && v.front() == '[') {  // a list: its elements, space-separated
      std::string items;
      for (char ch : v.substr(1, v.size() - 2))
        if (ch != ',' && ch != '"') items += ch;
      v = items;
    } else if (v.size() >= 2 && v.front() == '"') {
      v = v.substr(1, v.size() - 2);
    }
    row.add(f.name(), v);
  }
  return row;
}

void check_csv(const std::string& path, const std::vector<std::string>& header) {
  std::string text;
  if (read_file(path, text)) {
    std::string first = text.substr(0, text.find('\n'));
    if (!text.empty() && first != join(header))
      throw UsageError(strf("--csv %s: the file has another header than this run's rows (%s...); "
                            "use a new file", path.c_str(), first.substr(0, 60).c_str()));
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
  std::string text;
  if (!read_file(path, text) || text.empty()) text = join(row.header) + "\n";
  text += join(row.values) + "\n";
  std::string tmp = path + strf(".tmp.%d", int(getpid()));
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    if (!f.flush()) LMT_FATAL(strf("cannot write %s: %s", tmp.c_str(), strerror(errno)));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0)
    LMT_FATAL(strf("cannot rename %s to %s: %s", tmp.c_str(), path.c_str(), strerror(errno)));
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
