// A Chrome-trace JSON file (chrome://tracing, https://ui.perfetto.dev): spans on named tracks and
// counter tracks, grouped by process (pid: one per rank). Written to a temporary name and renamed.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace lmt {

class ChromeTrace {
 public:
  // A span [ts, ts + dur) in microseconds on track `tid` of process `pid`.
  void span(const std::string& name, double ts_us, double dur_us, int tid = 0, int pid = 0);
  // A counter sample: each key becomes a stacked series of the counter `name`.
  void counter(const std::string& name, double ts_us, const std::map<std::string, double>& values,
               int pid = 0);
  void name_track(int tid, const std::string& name, int pid = 0);
  void name_process(int pid, const std::string& name);
  // The events as written, one JSON object a line (to merge several ranks' traces into one).
  std::string lines() const;
  void add_lines(const std::string& lines);
  void write(const std::string& path) const;

 private:
  std::vector<std::string> events_;
};

}  // namespace lmt
