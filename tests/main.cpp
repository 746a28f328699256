// The doctest main of build/tests, build/tests_gpu and build/tests_e2e (one process each). Tests
// of whole runs start build/lmtrain (through mpirun where they need several ranks) as a child
// process, so these processes never initialise MPI.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
