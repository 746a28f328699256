// One function per run.mode; main() parses, starts the runtime and calls one of these.
#pragma once
#include <memory>

#include "backend.hpp"
#include "comm.hpp"
#include "config.hpp"
#include "runtime.hpp"

namespace lmt {

// device: what resolve_device() chose, the same on every rank.
int run_train(const CommandLine& cl, const Runtime& rt, const std::string& device);
int run_bench(const CommandLine& cl, const Runtime& rt, const std::string& device);
int run_attention(const CommandLine& cl, const Runtime& rt, const std::string& device);
// Computed, no backend: memory per device and communication per step (plan.hpp).
int run_plan(const CommandLine& cl, const Runtime& rt);
// The all-reduce benchmark: its backend (allreduce.backend) decides the device.
int run_allreduce(const CommandLine& cl, const Runtime& rt);

// run.graphs = 1 (train, bench) replays CUDA graphs: it needs the cuda device and one rank (the
// gradients' collectives are not recorded). Otherwise every rank stops with one line, exit 2.
void check_graphs(const Config& c, const Runtime& rt, const std::string& device);

// The backend for `device` (on "cuda": this rank's GPU, selected first). Collective: a refusal
// on any rank stops every rank with exit code 2.
template <typename T>
std::unique_ptr<Backend<T>> make_backend(const std::string& device, const Runtime& rt);

// The communicator on that backend's buffers: NCCL on "cuda" (ordered after the backend's
// stream; nccl_ctas: ddp.comm_ctas), MPI on "cpu". Collective.
template <typename T>
std::unique_ptr<Communicator> make_communicator(const std::string& device, const Runtime& rt,
                                               Backend<T>& be, int64_t nccl_ctas = 0);

}  // namespace lmt
