// One function per run.mode; main() parses, starts the runtime and calls one of these.
#pragma once
#include "config.hpp"
#include "runtime.hpp"

namespace lmt {

int run_train(const CommandLine& cl, const Runtime& rt);

}  // namespace lmt
