// The backend a mode runs on, the communicator for its buffers, and what run.graphs needs.
#include <type_traits>

#include "gpu.hpp"
#include "modes.hpp"

namespace lmt {

void check_graphs(const Config& c, const Runtime& rt, const std::string& device) {
  if (!c.run.graphs) return;
  agree(rt, [&] {
    if (device != "cuda")
      throw UsageError("run.graphs = 1: CUDA graphs need the cuda device (this run's is " +
                       device + ")");
    if (rt.world > 1)
      throw UsageError(strf("run.graphs = 1: one rank only (the gradients' collectives are not "
                            "recorded); this run has %d", rt.world));
  });
}

template <typename T>
std::unique_ptr<Backend<T>> make_backend(const std::string& device, const Runtime& rt) {
  std::unique_ptr<Backend<T>> be;
  agree(rt, [&] {
#ifdef LMTRAIN_CUDA
    if constexpr (std::is_same_v<T, float>)
      if (device == "cuda") {
        select_gpu(rt);
        be = make_cuda_backend();
        return;
      }
#endif
    if (device != "cpu") throw UsageError("no " + device + " backend for this precision");
    be = make_cpu_backend<T>();
  });
  return be;
}

template <typename T>
std::unique_ptr<Communicator> make_communicator(const std::string& device, const Runtime& rt,
                                               Backend<T>& be, int64_t nccl_ctas) {
#ifdef LMTRAIN_CUDA
  if constexpr (std::is_same_v<T, float>)
    if (device == "cuda") return make_nccl_communicator(rt, cuda_stream(be), int(nccl_ctas));
#endif
  (void)be, (void)rt, (void)nccl_ctas;
  LMT_ASSERT(device == "cpu", "no communicator for device " + device);
  return make_mpi_communicator(MPI_COMM_WORLD);
}

template std::unique_ptr<Backend<float>> make_backend(const std::string&, const Runtime&);
template std::unique_ptr<Backend<double>> make_backend(const std::string&, const Runtime&);

template std::unique_ptr<Communicator> make_communicator(const std::string&, const Runtime&,
                                                        Backend<float>&, int64_t);
template std::unique_ptr<Communicator> make_communicator(const std::string&, const Runtime&,
                                                        Backend<double>&, int64_t);

}  // namespace lmt
