#include "trace.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "check.hpp"

namespace lmt {

void ChromeTrace::span(const std::string& name, double ts, double dur, int tid) {
  events_.push_back(strf("{\"name\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
                         name.c_str(), tid, ts, dur));
}

void ChromeTrace::counter(const std::string& name, double ts,
                          const std::map<std::string, double>& values) {
  std::string args;
  for (auto& [k, v] : values) args += strf("%s\"%s\":%.3f", args.empty() ? "" : ",", k.c_str(), v);
  events_.push_back(strf("{\"name\":\"%s\",\"ph\":\"C\",\"pid\":0,\"ts\":%.3f,\"args\":{%s}}",
                         name.c_str(), ts, args.c_str()));
}

void ChromeTrace::name_track(int tid, const std::string& name) {
  events_.push_back(strf("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                         "\"args\":{\"name\":\"%s\"}}", tid, name.c_str()));
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
