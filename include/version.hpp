// The build's version: the checkout's `git describe --always --dirty` when it was built
// (Makefile), "unknown" where it was built outside a git checkout. `lmtrain --version` prints it.
#pragma once

namespace lmt {

const char* version();

}  // namespace lmt
