// The doctest main of build/tests, build/tests_gpu and build/tests_e2e (one process each). Tests
// of whole runs start build/lmtrain (through mpirun where they need several ranks) as a child
// process, so these processes never initialise MPI. Where a test fails, the line after doctest's
// summary gives the seed of the run's fresh inputs (helpers.hpp), to draw them again.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "helpers.hpp"

int main(int argc, char** argv) {
  const unsigned long long seed = lmt::test::seed();
  doctest::Context context(argc, argv);
  const int failed = context.run();
  if (failed)
    std::fprintf(stderr, "inputs drawn from seed %llu: LMT_TEST_SEED=%llu draws them again\n", seed,
                 seed);
  return failed;
}
