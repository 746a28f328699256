// Preflight's count of the checkpoints a run writes and holds on disk at once (the free-space
// check of train.checkpoint_dir; tests/e2e/test_robust.cpp runs the check itself).
#include <doctest/doctest.h>

#include "preflight.hpp"

using namespace lmt;

TEST_CASE("preflight: checkpoints a run writes, every checkpoint_every steps and after its last") {
  CHECK(checkpoints_written(0, 10, 0) == 1);   // only after the last step
  CHECK(checkpoints_written(0, 10, 5) == 2);   // 5 and 10
  CHECK(checkpoints_written(0, 10, 3) == 4);   // 3, 6, 9 and 10
  CHECK(checkpoints_written(0, 10, 1) == 10);
  CHECK(checkpoints_written(0, 7, 20) == 1);   // 7 alone
  CHECK(checkpoints_written(4, 10, 3) == 3);   // resumed at 4: 6, 9 and 10
  CHECK(checkpoints_written(6, 10, 3) == 2);   // resumed at 6, itself a checkpoint: 9 and 10
  CHECK(checkpoints_written(10, 10, 3) == 0);  // nothing left to train
  CHECK(checkpoints_written(12, 10, 3) == 0);
  CHECK(checkpoints_written(0, 0, 1) == 0);
  // The count against the steps' loop itself (train.cpp: due = last || (step + 1) % every == 0),
  // at odd sizes.
  for (int64_t first : {0, 1, 7, 13})
    for (int64_t steps : {0, 1, 12, 29, 30})
      for (int64_t every : {0, 1, 2, 7, 30, 31}) {
        int64_t n = 0;
        for (int64_t step = first; step < steps; ++step)
          n += step + 1 == steps || (every > 0 && (step + 1) % every == 0);
        INFO(first, " ", steps, " ", every);
        CHECK(checkpoints_written(first, steps, every) == n);
      }
}

TEST_CASE("preflight: checkpoints of the run on disk at once, beyond the ones it finds there") {
  CHECK(checkpoints_added(0, 3, 0) == 0);    // writes none
  CHECK(checkpoints_added(0, 3, 2) == 0);
  CHECK(checkpoints_added(10, 0, 0) == 10);  // keeps all
  CHECK(checkpoints_added(10, 4, 0) == 10);
  CHECK(checkpoints_added(10, 0, 3) == 4);   // the newest 3, and the one being written
  CHECK(checkpoints_added(2, 0, 3) == 2);    // fewer written than kept
  CHECK(checkpoints_added(10, 1, 3) == 3);   // 1 there: 4 at most, 3 of them new
  CHECK(checkpoints_added(10, 4, 3) == 1);   // as many there as kept: one more while it writes
  CHECK(checkpoints_added(10, 9, 3) == 1);   // more there than kept (keep lowered): still one
  // Against a simulation of the writer (write, then remove all but the newest `keep`).
  for (int64_t written : {0, 1, 2, 5, 11})
    for (int64_t existing : {0, 1, 3, 6})
      for (int64_t keep : {0, 1, 2, 5}) {
        int64_t on_disk = existing, most = existing;
        for (int64_t i = 0; i < written; ++i) {
          most = std::max(most, ++on_disk);
          if (keep > 0) on_disk = std::min(on_disk, keep);
        }
        INFO(written, " ", existing, " ", keep);
        CHECK(checkpoints_added(written, existing, keep) == most - existing);
      }
}
