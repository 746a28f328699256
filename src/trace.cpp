#include "trace.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "check.hpp"

namespace lmt {

void ChromeTrace::span(const std::string& name, double ts, double dur, int tid, int pid) {
  events_.push_back(strf("{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
                         name.c_str(), pid, tid, ts, dur));
}

void ChromeTrace::counter(const std::string& name, double ts,
                          const std::map<std::string, double>& values, int pid) {
  std::string args;
  for (auto& [k, v] : values) args += strf("%s\"%s\":%.3f", args.empty() ? "" : ",", k.c_str(), v);
  events_.push_back(strf("{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%d,\"ts\":%.3f,\"args\":{%s}}",
                         name.c_str(), pid, ts, args.c_str()));
}

void ChromeTrace::name_track(int tid, const std::string& name, int pid) {
  events_.push_back(strf("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                         "\"args\":{\"name\":\"%s\"}}", pid, tid, name.c_str()));
}

void ChromeTrace::name_process(int pid, const std::string& name) {
  events_.push_back(strf("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
                         "\"args\":{\"name\":\"%s\"}}", pid, name.c_str()));
}

std::string ChromeTrace::lines() const {
  std::string all;
  for (auto& e : events_) all += e + "\n";
  return all;
}

void ChromeTrace::add_lines(const std::string& lines) {
  size_t at = 0;
  for (size_t end; (end = lines.find('\n', at)) != std::string::npos; at = end + 1)
    if (end > at) events_.push_back(lines.substr(at, end - at));
}

void ChromeTrace::write(const std::string& path) const {
  std::string tmp = path + strf(".tmp.%d", int(getpid()));
  FILE* f = fopen(tmp.c_str(), "w");
  if (!f) LMT_FATAL(strf("cannot write %s: %s", tmp.c_str(), strerror(errno)));
  fputs("{\"traceEvents\":[\n", f);
  for (size_t i = 0; i < events_.size(); ++i)
    fprintf(f, "%s%s\n", events_[i].c_str(), i + 1 < events_.size() ? "," : "");
  fputs("]}\n", f);
  if (fclose(f) != 0 || rename(tmp.c_str(), path.c_str()) != 0)
    LMT_FATAL(strf("writing %s failed: %s", path.c_str(), strerror(errno)));
}

}  // namespace lmt
