// A Chrome-trace JSON file (chrome://tracing, https://ui.perfetto.dev): spans on named tracks and
// counter tracks. Written to a temporary name and renamed.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace lmt {

class ChromeTrace {
 public:
  // A span [ts, ts + dur) in microseconds on track `tid`.
  void span(const std::string& name, double ts_us, double dur_us, int tid = 0);
  // A counter sample: each key becomes a stacked series of the counter `name`.
  void counter(const std::string& name, double ts_us, const std::map<std::string, double>& values);
  void name_track(int tid, const std::string& name);
  void write(const std::string& path) const;

 private:
  std::vector<std::string> events_;
};

}  // namespace lmt
