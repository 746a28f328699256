// Work spread over the host's cores: items 0..n-1 each taken in turn (an atomic counter) by one
// of up to `most` threads, the caller's among them, never more than the cores this process may
// run on (mpirun binds each rank to one core unless told otherwise). Returns once every item is
// done. An item's result must not depend on which thread takes it.
#pragma once
#include <cstddef>
#include <functional>

namespace lmt {

void on_host_threads(size_t n, size_t most, const std::function<void(size_t)>& item);

}  // namespace lmt
