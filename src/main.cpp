// lmtrain: parse, start the runtime, run one mode, stop together.
#include <cstdio>

#include "exit_codes.hpp"
#include "modes.hpp"
#include "runtime.hpp"
#include "version.hpp"
#include "watchdog.hpp"

int main(int argc, char** argv) {
  using namespace lmt;
  Runtime rt = runtime_init(&argc, &argv);
  int code = kExitOk;
  try {
    CommandLine cl;
    agree(rt, [&] { cl = parse_command_line(std::vector<std::string>(argv + 1, argv + argc)); });
    if (cl.help) {
      if (rt.is_root()) fputs(usage_text().c_str(), stdout);
    } else if (cl.version) {
      if (rt.is_root()) printf("lmtrain %s\n", version());
    } else if (cl.print_config) {
      if (rt.is_root()) fputs(config_to_toml(cl.config).c_str(), stdout);
    } else {
      agree_on_config(rt, cl.config);
      set_comm_timeout(cl.config.run.comm_timeout_s);
      const Mode mode = cl.config.run.mode;
      if (mode == Mode::plan) {  // computed: no device to resolve
        code = run_plan(cl, rt);
      } else if (mode == Mode::allreduce) {  // its backend decides the device
        code = run_allreduce(cl, rt);
      } else {
        std::string device;
        agree(rt, [&] { device = resolve_device(cl.config, rt); });
        code = mode == Mode::bench       ? run_bench(cl, rt, device)
               : mode == Mode::attention ? run_attention(cl, rt, device)
                                         : run_train(cl, rt, device);
      }
    }
  } catch (const JobExit& e) {
    code = e.code;
  } catch (const UsageError& e) {
    // Bad input found after startup on one rank only: the others may be in a collective.
    fprintf(stderr, "lmtrain: error (rank %d): %s\n", rt.rank, e.what());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, kExitUsage);
  }
  runtime_finalize();
  return code;
}
