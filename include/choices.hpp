// The config keys whose value is one of a few words, as enums: run.mode, ddp.strategy,
// model.precision, model.residual_dtype, optim.state_dtype. Config holds these; the TOML and
// --set layer (config.cpp) parses the word once, and name_of() gives it back for --print-config,
// the CSV and messages.
#pragma once
#include <cstddef>
#include <iterator>
#include <string>
#include <vector>

namespace lmt {

enum class Mode { train, bench, attention, plan, allreduce };
// How gradients are synchronised across ranks (grad_sync.hpp); zero1 also shards AdamW (zero1.hpp).
enum class Strategy { naive, flat, overlap, bucketed, zero1 };
// What the matmul operands are rounded to (the precision policy; accumulation stays T).
enum class Precision { fp64, fp32, tf32, bf16 };
// How a tensor that lives across steps or layers is stored (AdamW's m and v, the residual stream):
// as the parameters' type (fp32; fp64 under precision fp64), or bf16.
enum class Dtype { fp32, bf16 };

// The words users type, in enum order.
template <class E> struct Choices;
template <> struct Choices<Mode> {
  static constexpr const char* names[] = {"train", "bench", "attention", "plan", "allreduce"};
};
template <> struct Choices<Strategy> {
  static constexpr const char* names[] = {"naive", "flat", "overlap", "bucketed", "zero1"};
};
template <> struct Choices<Precision> {
  static constexpr const char* names[] = {"fp64", "fp32", "tf32", "bf16"};
};
template <> struct Choices<Dtype> {
  static constexpr const char* names[] = {"fp32", "bf16"};
};

template <class E> const char* name_of(E e) { return Choices<E>::names[size_t(e)]; }
template <class E> std::vector<std::string> choice_names() {
  return {std::begin(Choices<E>::names), std::end(Choices<E>::names)};
}

}  // namespace lmt
