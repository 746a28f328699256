#include "runtime.hpp"

#include "exit_codes.hpp"
#include "gpu.hpp"
#include "watchdog.hpp"

#include <sys/stat.h>

#include <array>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace lmt {

std::string strf(const char* fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(size_t(n), '\0');
  vsnprintf(s.data(), size_t(n) + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void fatal(const std::string& what, const char* file, int line) {
  int inited = 0, finalized = 0, rank = -1;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  bool live = inited && !finalized;
  if (live) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fprintf(stderr, "lmtrain: rank %d: %s (%s:%d)\n", rank, what.c_str(), file, line);
  fflush(stderr);
  if (live) MPI_Abort(MPI_COMM_WORLD, kExitFailure);  // takes every rank down, none left hanging
  std::exit(kExitFailure);
}

Runtime runtime_init(int* argc, char*** argv) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) MPI_Init(argc, argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  Runtime rt;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rt.rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &rt.world));
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rt.rank, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &rt.local_rank));
  MPI_CHECK(MPI_Comm_size(node, &rt.local_world));
  MPI_CHECK(MPI_Comm_free(&node));
  watchdog_init();
  return rt;
}

void runtime_finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void agree(const Runtime& rt, const std::function<void()>& step) {
  std::string error;
  try {
    step();
  } catch (const UsageError& e) {
    error = e.what();
  }
  int mine = error.empty() ? rt.world : rt.rank, first = 0;
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req));
  wait_for_peers(&req, "the ranks' agreement on the setup");
  if (first == rt.world) return;
  if (rt.rank == first) {
    std::string who = rt.world > 1 ? strf(" (rank %d)", rt.rank) : "";
    fprintf(stderr, "lmtrain: error%s: %s\n", who.c_str(), error.c_str());
    fflush(stderr);
  }
  throw JobExit{kExitUsage};
}

namespace {

// The first "section.key = value" line where two config_to_toml texts differ: (key, a's, b's).
std::array<std::string, 3> first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb, section;
  while (std::getline(sa, la)) {
    if (!std::getline(sb, lb)) lb.clear();
    if (la.size() > 2 && la.front() == '[') section = la.substr(1, la.size() - 2);
    if (la == lb) continue;
    const size_t eq = la.find(" = "), eqb = lb.find(" = ");
    return {section + "." + la.substr(0, eq), la.substr(eq + 3),
            eqb == std::string::npos ? lb : lb.substr(eqb + 3)};
  }
  return {"?", "", ""};
}

}  // namespace

void agree_on_config(const Runtime& rt, const Config& c) {
  const std::string text = config_to_toml(c);
  const uint64_t hash = config_hash(c);
  std::vector<uint64_t> all(static_cast<size_t>(rt.world));
  MPI_CHECK(MPI_Allgather(&hash, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD));
  std::string differ;
  int first = 0;
  for (int r = 1; r < rt.world; ++r)
    if (all[size_t(r)] != all[0]) {
      differ += (differ.empty() ? "" : ", ") + std::to_string(r);
      if (!first) first = r;
    }
  if (differ.empty()) return;
  // The first differing rank's config goes to rank 0, which names the first key that differs.
  if (rt.rank == first) {
    const int n = int(text.size());
    MPI_CHECK(MPI_Send(&n, 1, MPI_INT, 0, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Send(text.data(), n, MPI_CHAR, 0, 0, MPI_COMM_WORLD));
  } else if (rt.is_root()) {
    int n = 0;
    MPI_CHECK(MPI_Recv(&n, 1, MPI_INT, first, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    std::string theirs(size_t(n), '\0');
    MPI_CHECK(MPI_Recv(theirs.data(), n, MPI_CHAR, first, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    const auto [key, mine, other] = first_difference(text, theirs);
    fprintf(stderr, "lmtrain: error: ranks disagree on the resolved config: rank(s) %s differ "
            "from rank 0, first at %s (rank 0: %s, rank %d: %s); same --config and --set on "
            "every rank?\n", differ.c_str(), key.c_str(), mine.c_str(), first, other.c_str());
  }
  throw JobExit{kExitUsage};
}

std::string resolve_device(const Config& c, const Runtime& rt) {
  std::string why;  // why cuda cannot run this job, if it cannot
  if (gpu_count() == 0) why = "no GPU is visible (or this build has no CUDA)";
  else if (c.model.precision == Precision::fp64) why = "model.precision = \"fp64\" is CPU-only";
  else if (rt.local_world > gpu_count())
    why = strf("%d ranks on this node but %d GPU(s) visible (one GPU per rank)", rt.local_world,
               gpu_count());
  if (c.run.device == "cpu" || (c.run.device == "auto" && !why.empty())) return "cpu";
  if (!why.empty()) {
    auto it = c.origin.find("run.device");
    throw UsageError(strf("%s: run.device = \"cuda\": %s", it == c.origin.end() ? "default"
                          : it->second.c_str(), why.c_str()));
  }
  return "cuda";
}

}  // namespace lmt
