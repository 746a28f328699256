// Multi-rank tests: run under `mpirun -np N` (make test runs N = 2 and 4). Every rank runs every
// test; rank 0 prints doctest's report, any other rank prints its own only when it failed, and
// the exit code is non-zero if any rank failed. Rank 0's seed (helpers.hpp) is the one the tests
// broadcast: where one failed, it is printed, and LMT_TEST_SEED draws those inputs again.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>
#include <sstream>

#include "../helpers.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  doctest::Context context(argc, argv);
  std::ostringstream quiet;
  if (rank != 0) context.setCout(&quiet);
  int failed = context.run() != 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank != 0 && failed) fprintf(stderr, "[rank %d of %d]\n%s", rank, world, quiet.str().c_str());
  if (rank == 0 && any && !failed) fprintf(stderr, "[np %d] a test failed on another rank\n", world);
  if (rank == 0 && any) {
    const unsigned long long seed = lmt::test::seed();
    fprintf(stderr, "inputs drawn from seed %llu: LMT_TEST_SEED=%llu draws them again\n", seed,
            seed);
  }
  MPI_Finalize();
  return any;
}
