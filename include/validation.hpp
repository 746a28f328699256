// Validation: the model's mean loss over held-out windows that are the same every time
// (TokenSource::held_out), forward only, with the same bits on any number of ranks.
//
// The held-out set is `batches` batches of the model's B windows: batch j holds windows
// j*B .. j*B+B-1 of batches*B. Rank r evaluates batches r, r + world, ... (Model::evaluate: the
// batch's mean loss, the same wherever it runs: same tokens, shape and parameters) into slot j
// of a vector that is zero elsewhere. Summing those vectors over the ranks is exact (one
// nonzero per slot), and the slots are added up in slot order: the world size changes which
// rank computes a batch, never a bit of the result. A world larger than `batches` leaves ranks
// idle; nothing is padded. The slots go kValidationChunk at a time (a collective each), so that
// what is held does not grow with `batches`.
#pragma once
#include <cstdint>
#include <vector>

#include "comm.hpp"
#include "data.hpp"
#include "model.hpp"

namespace lmt {

constexpr int64_t kValidationChunk = 4096;

// Slots first .. first + count - 1 of `rank` of `world`: batch j's mean loss where
// j % world == rank, 0 elsewhere.
template <typename T>
std::vector<double> held_out_losses(Model<T>& model, const TokenSource& source, int64_t batches,
                                    int rank, int world, int64_t first, int64_t count);

// sum plus the slots, added in slot order.
double add_slots(double sum, const std::vector<double>& losses);

// The slots of every rank of `host`, summed over them, and their mean. Collective.
template <typename T>
double validation_loss(Model<T>& model, const TokenSource& source, int64_t batches,
                       Communicator& host);

}  // namespace lmt
