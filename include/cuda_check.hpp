// CUDA_CHECK: a failed CUDA runtime call names itself, file:line and rank, then stops the job.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "check.hpp"

#define CUDA_CHECK(call)                                                             \
  do {                                                                               \
    cudaError_t cuda_check_rc_ = (call);                                             \
    if (cuda_check_rc_ != cudaSuccess)                                               \
      LMT_FATAL(std::string(#call) + " failed: " + cudaGetErrorString(cuda_check_rc_)); \
  } while (0)
