#include "preflight.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "checkpoint.hpp"
#include "gpu.hpp"
#include "plan.hpp"
#include "report.hpp"

namespace lmt {
namespace {

// The plan of this training run: its ranks as data-parallel replicas, ZeRO-1 where it shards.
Plan train_plan(const Config& c, int world) {
  Config k = c;
  k.plan.dp = world;
  k.plan.zero = c.ddp.strategy == Strategy::zero1;
  k.plan.fsdp = k.plan.tp = 1;
  k.plan.graph = "lmtrain";
  k.plan.act_shard_fraction = 0;
  return make_plan(k);
}

// Bytes of one checkpoint of the model of `p`, a one-rank train_plan (parameters and both
// moments, each in its dtype; the header is small).
uint64_t checkpoint_bytes(const Plan& p) {
  return p.param_count * uint64_t(p.elem_bytes + 2 * p.moment_bytes);
}

std::string dir_error(const Config& c, const std::string& what) {
  auto it = c.origin.find("train.checkpoint_dir");
  return strf("%s: train.checkpoint_dir = \"%s\": %s",
              it == c.origin.end() ? "default" : it->second.c_str(),
              c.train.checkpoint_dir.c_str(), what.c_str());
}

void make_dir(const Config& c) {
  const std::string& dir = c.train.checkpoint_dir;
  std::string partial;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      struct stat st {};
      if (!partial.empty() && mkdir(partial.c_str(), 0755) != 0) {
        if (errno != EEXIST)
          throw UsageError(dir_error(c, strf("cannot create %s: %s", partial.c_str(), strerror(errno))));
        if (stat(partial.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
          throw UsageError(dir_error(c, strf("%s is not a directory", partial.c_str())));
      }
    }
    if (i < dir.size()) partial += dir[i];
  }
}

// A file written, flushed to disk and removed: what a checkpoint's write needs, tried now.
void probe_writable(const Config& c) {
  const std::string probe = strf("%s/.lmtrain-probe.%d", c.train.checkpoint_dir.c_str(), int(getpid()));
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw UsageError(dir_error(c, strf("cannot write a file in it: %s", strerror(errno))));
  const bool ok = ::write(fd, "x", 1) == 1 && fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!ok) throw UsageError(dir_error(c, strf("cannot write a file in it: %s", strerror(err))));
}

// Partial checkpoints ("step_N.safetensors.tmp.PID") whose PID is not a live process: a writer
// killed mid-write left them. Nothing else in the directory is touched.
void remove_stale_partials(const Config& c) {
  DIR* d = opendir(c.train.checkpoint_dir.c_str());
  if (!d) return;
  const std::string tmp = ".tmp.";  // step_N.safetensors.tmp.PID
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const size_t at = name.rfind(tmp);
    if (at == std::string::npos || at + tmp.size() == name.size() ||
        !is_checkpoint_name(name.substr(0, at)))
      continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + at + tmp.size(), &end, 10);
    if (*end != '\0' || pid <= 0 || kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
    const std::string path = c.train.checkpoint_dir + "/" + name;
    if (::unlink(path.c_str()) == 0)
      printf("removed %s: a partial checkpoint whose writer (pid %ld) is gone\n", path.c_str(), pid);
  }
  closedir(d);
  fflush(stdout);
}

// A checkpoint of another run (another run_id than the resumed file's; any, for a fresh run)
// would be overwritten, or mixed with this run's; so would one of the resumed run past the step
// it resumes from (a resume from an older checkpoint would write over the later ones).
// `there`: the directory's checkpoints with their ids (none for one that cannot be read: not this
// run's).
using Found = std::vector<std::pair<std::string, CheckpointId>>;
void refuse_others_checkpoints(const Config& c, const CheckpointId& mine, const Found& there) {
  for (const auto& [path, theirs] : there) {
    if (mine.run_id.empty() || theirs.run_id != mine.run_id)
      throw UsageError(dir_error(c, strf("holds %s of another run%s; set train.overwrite = 1 to "
                                         "write there anyway, or use another directory",
                                         path.c_str(), mine.run_id.empty() ? "" : " than the resumed one")));
    if (theirs.step > mine.step)
      throw UsageError(dir_error(c, strf("holds %s, later than the resumed step %lld: this run "
                                         "would write over it; resume from it, set "
                                         "train.overwrite = 1, or use another directory",
                                         path.c_str(), (long long)mine.step)));
  }
}

// A "Key: N kB" line of /proc/meminfo, in bytes; 0 if absent.
uint64_t meminfo(const char* key) {
  std::ifstream f("/proc/meminfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(std::string(key) + ":", 0) == 0) {
      std::istringstream in(line.substr(std::strlen(key) + 1));
      uint64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
  return 0;
}

// The memory this process's cgroup (v2) may still take, where it has a limit; else 0.
uint64_t cgroup_room() {
  std::ifstream max("/sys/fs/cgroup/memory.max"), cur("/sys/fs/cgroup/memory.current");
  uint64_t limit = 0, used = 0;
  if (!(max >> limit) || !(cur >> used)) return 0;  // "max": no limit
  return limit > used ? limit - used : 1;
}

}  // namespace

int64_t checkpoints_written(int64_t first, int64_t steps, int64_t every) {
  if (steps <= first) return 0;
  if (every <= 0) return 1;
  return steps / every - first / every + (steps % every != 0);
}

int64_t checkpoints_added(int64_t written, int64_t existing, int64_t keep) {
  if (written == 0) return 0;
  if (keep == 0) return written;
  return std::max<int64_t>(1, std::min(written + existing, keep + 1) - existing);
}

void prepare_checkpoint_dir(const Config& c) {
  const CheckpointId mine = c.train.resume.empty() ? CheckpointId{} : checkpoint_id(c.train.resume);
  Found there;  // each header read once, for both checks
  for (const std::string& path : checkpoint_files(c.train.checkpoint_dir))
    there.emplace_back(path, checkpoint_id_or_none(path));
  if (!c.train.overwrite) refuse_others_checkpoints(c, mine, there);  // before anything is created
  make_dir(c);
  probe_writable(c);
  struct statvfs vfs {};
  if (statvfs(c.train.checkpoint_dir.c_str(), &vfs) == 0) {
    int64_t existing = 0;  // the resumed run's, which keep_checkpoints removes as it goes
    for (const auto& [path, theirs] : there) existing += !mine.run_id.empty() && theirs.run_id == mine.run_id;
    const int64_t first = std::max<int64_t>(mine.step, 0), keep = c.train.keep_checkpoints;
    const int64_t written = checkpoints_written(first, c.train.steps, c.train.checkpoint_every);
    const int64_t added = checkpoints_added(written, existing, keep);
    const double room = double(vfs.f_bavail) * double(vfs.f_frsize);
    const double one = double(checkpoint_bytes(train_plan(c, 1)));
    if (room < one * double(added)) {
      const std::string size = human_bytes(one), free = human_bytes(room);
      // The largest keep_checkpoints that fits: K + 1 at once, the run's existing ones among them.
      const int64_t fits = int64_t(room / one) + existing - 1;
      std::string what;
      if (added == 1) {
        what = strf("a checkpoint of this model takes %s, the disk has %s free", size.c_str(), free.c_str());
      } else if (keep == 0) {
        what = strf("this run writes %lld checkpoints of %s (%s in all), the disk has %s free; ",
                    (long long)written, size.c_str(), human_bytes(one * double(written)).c_str(),
                    free.c_str());
        what += fits >= 1 ? strf("train.keep_checkpoints = %lld keeps the newest %lld and fits",
                                 (long long)fits, (long long)fits)
                          : "make room, or set train.keep_checkpoints";
      } else {
        const std::string at_once = human_bytes(one * double(added));
        what = strf("train.keep_checkpoints = %lld holds up to %lld checkpoints of %s at once (",
                    (long long)keep, (long long)keep + 1, size.c_str());
        what += added == keep + 1 ? at_once + " in all"
                                  : strf("%lld more than the run's %lld there now: %s", (long long)added,
                                         (long long)existing, at_once.c_str());
        what += "), the disk has " + free + " free";
        if (fits >= 1) what += strf("; %lld fits", (long long)fits);
      }
      throw UsageError(dir_error(c, what));
    }
  }
  remove_stale_partials(c);
}

void check_host_memory(const Config& c, const Runtime& rt, const std::string& device) {
  const double per_rank = device == "cpu" ? double(train_plan(c, rt.world).total()) : 0;
  // Checkpoints on the host: rank 0 keeps a copy of the parameters and both moments from its
  // first checkpoint on, and rounds the weights without masters to bf16 as it writes them; under
  // zero1 each other rank keeps a copy of its shard, in the parameters' element size. A resume,
  // before the first of them, maps its file (the node's page cache holds it once) and each rank
  // unpacks the parameters from it.
  const Plan p = train_plan(c, 1);
  const double n = double(p.param_count);
  double staging = 0;
  if (!c.train.checkpoint_dir.empty()) {
    staging = double(checkpoint_bytes(p)) + (c.optim.master_weights ? 0 : 2 * n);
    if (c.ddp.strategy == Strategy::zero1)
      staging += double(rt.local_world - 1) * n / rt.world * p.elem_bytes;
  }
  if (!c.train.resume.empty()) {
    struct stat file {};
    const double mapped = stat(c.train.resume.c_str(), &file) == 0 ? double(file.st_size) : 0;
    staging = std::max(staging, mapped + rt.local_world * n * p.elem_bytes);
  }
  const double need = per_rank * rt.local_world + staging;
  uint64_t avail = meminfo("MemAvailable");
  const uint64_t room = cgroup_room();
  const bool cgroup = room && room < avail;
  if (cgroup) avail = room;
  if (avail == 0 || need <= double(avail)) return;
  std::string parts = per_rank > 0 ? strf("%d rank(s) on this node x %s for the model",
                                          rt.local_world, human_bytes(per_rank).c_str())
                                   : std::string();
  if (staging > 0)
    parts += strf("%s%s for checkpoints on the host", parts.empty() ? "" : " + ",
                  human_bytes(staging).c_str());
  throw UsageError(strf("out of host memory: this run needs %s (%s), %s is available (%s); "
                        "a smaller model or batch, or fewer ranks per node", human_bytes(need).c_str(),
                        parts.c_str(), human_bytes(double(avail)).c_str(),
                        cgroup ? "the cgroup's memory.max" : "MemAvailable"));
}

void check_device_memory(const Config& c, const Runtime& rt, const std::string& device) {
  if (device != "cuda") return;
  size_t free_bytes = 0, total = 0;
  gpu_memory(&free_bytes, &total);
  const double need = double(train_plan(c, rt.world).total_cuda);
  if (need <= double(free_bytes)) return;
  throw UsageError(strf("out of GPU memory: this run allocates %s on each GPU (plan mode's "
                        "estimate), %s of %s is free on GPU %d; a smaller model or batch, or "
                        "ddp.strategy = \"zero1\"", human_bytes(need).c_str(),
                        human_bytes(double(free_bytes)).c_str(), human_bytes(double(total)).c_str(),
                        rt.local_rank));
}

}  // namespace lmt
