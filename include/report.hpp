// What a run tells its user: CSV rows with a stable header, and number formatting.
#pragma once
#include <string>
#include <vector>

#include "config.hpp"

namespace lmt {

struct CsvRow {
  std::vector<std::string> header, values;
  void add(const std::string& name, const std::string& value) {
    header.push_back(name);
    values.push_back(value);
  }
  void set(const std::string& name, const std::string& value);  // an existing column
};

// Every config field as a column ("section.key"), in the documented order; a string is its raw
// value (CSV quoting, not TOML escapes, keeps its commas and quotes), a list its elements
// separated by spaces.
CsvRow config_columns(const Config& c);
// A mode's row begins so: config_columns, then the build that measured it (lmtrain_version,
// version.hpp's), so that rows from two builds in one file can be told apart.
CsvRow run_columns(const Config& c);

// Throws UsageError if `path` exists with another header (checked before a run starts, so a long
// run never ends unable to write its row) or its folder cannot be written.
void check_csv(const std::string& path, const std::vector<std::string>& header);
// Throws UsageError, naming the flag, if an output file's path is a folder or its folder cannot
// be written.
void check_output_dir(const char* flag, const std::string& path);
// Appends the row (after the header into an empty file, after a newline if the last row lacks
// one) in one write under an exclusive flock, so runs sharing a file all keep their rows; bytes
// already there are never rewritten, and a link or the file's mode stays as it was.
void append_csv(const std::string& path, const CsvRow& row);

// Summary of repeated timings.
struct Stats {
  double mean = 0, std = 0, median = 0, min = 0, max = 0;
};
Stats summarize(std::vector<double> samples);

std::string human_count(double x);        // 12.3k, 4.56M
std::string human_bytes(double bytes);    // 12.3 MiB, 4.56 GiB
std::string duration(double seconds);     // 0:42, 1:02:03
std::string utc_now();                    // 2026-11-22T16:05:00Z

}  // namespace lmt
