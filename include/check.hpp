// Errors: the two ways lmtrain stops.
//
// UsageError is bad input (config, command line, data file, rank count): main() prints its one
// line and exits with code 2 before any device work. fatal() is a failed system call (MPI, CUDA,
// NCCL, I/O in the middle of a run): it names the call, file:line and rank, then aborts the whole
// MPI job so that no rank is left waiting in a collective.
#pragma once
#include <stdexcept>
#include <string>

namespace lmt {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fatal(const std::string& what, const char* file, int line);

// Formats like printf into a std::string (messages are built in many places).
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Whether `path` names a folder (a path given where a file belongs is refused by name).
bool is_directory(const std::string& path);

}  // namespace lmt

#define LMT_FATAL(msg) ::lmt::fatal((msg), __FILE__, __LINE__)
#define LMT_ASSERT(cond, msg)                                   \
  do {                                                          \
    if (!(cond)) LMT_FATAL(std::string(#cond " failed: ") + (msg)); \
  } while (0)
