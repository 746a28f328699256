// Unit tests: one process, CPU. Tests of whole runs start build/lmtrain (through mpirun where
// they need several ranks) as a child process, so this process never initialises MPI.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
