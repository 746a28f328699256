// Bucket assignment of the bucketed strategy: sizes, order, contiguity, oversize parameters; the
// shards of zero1.
#include <doctest/doctest.h>

#include <algorithm>

#include "grad_sync.hpp"
#include "zero1.hpp"

using namespace lmt;

TEST_CASE("bucketed: buckets cover the flat buffer in order, contiguously, without splitting a parameter") {
  Config::Model m;
  m.d_model = 64, m.d_ff = 176, m.num_layers = 3, m.num_heads = 4, m.vocab_size = 300;
  ParamLayout layout = ParamLayout::build(m);
  for (double kib : {0.001, 4.0, 20.0, 64.0, 1e6}) {
    INFO(kib << " KiB");
    auto buckets = make_buckets(layout, kib * 1024, DType::f32);
    REQUIRE(!buckets.empty());
    CHECK(buckets.front().begin == 0);
    CHECK(buckets.back().end == layout.total);
    for (size_t i = 0; i + 1 < buckets.size(); ++i) {
      CHECK(buckets[i].end == buckets[i + 1].begin);                          // contiguous
      CHECK(double((buckets[i].end - buckets[i].begin) * 4) >= kib * 1024);  // at least the size
    }
    for (auto& p : layout.params) {  // every parameter lies inside exactly one bucket
      int inside = 0;
      for (auto& b : buckets) inside += b.begin <= p.offset && p.offset + p.numel <= b.end;
      CHECK(inside == 1);
    }
  }
  // A parameter larger than the bucket size is a bucket of its own: the LM head comes first.
  auto tiny = make_buckets(layout, 1024, DType::f32);
  const ParamView& head = layout.get("lm_head.weight");
  CHECK(tiny[0].begin == head.offset);
  CHECK(tiny[0].end == head.offset + head.numel);
  CHECK(make_buckets(layout, 1e12, DType::f32).size() == 1);
  CHECK(make_buckets(layout, 1, DType::f32).size() == layout.params.size());
}

TEST_CASE("zero1: shards cover every element exactly once, also when the world does not divide them") {
  for (size_t total : {size_t(0), size_t(1), size_t(5), size_t(97), size_t(1000), size_t(8046)})
    for (int world = 1; world <= 7; ++world) {
      INFO(total << " elements, " << world << " ranks");
      Counts c = shard_counts(total, world);
      REQUIRE(c.size() == size_t(world));
      std::vector<int> hits(total, 0);
      for (int r = 0; r < world; ++r) {
        const size_t at = displacement(c, r);
        CHECK(c[size_t(r)] >= total / size_t(world));  // no shard more than one element off
        CHECK(c[size_t(r)] <= total / size_t(world) + 1);
        for (size_t i = at; i < at + c[size_t(r)]; ++i) {
          REQUIRE(i < total);
          ++hits[i];
        }
      }
      CHECK(displacement(c, world) == total);
      CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    }
}

TEST_CASE("zero1: under bf16 a rank holds the fp32 masters of its shard and of every parameter "
          "read in fp32; otherwise all of them") {
  Config::Model m;
  m.d_model = 18, m.num_heads = 3, m.d_ff = 40, m.num_layers = 2, m.vocab_size = 29;
  const ParamLayout layout = ParamLayout::build(m);
  for (int world : {1, 2, 4, 7})
    for (int rank = 0; rank < world; ++rank) {
      INFO("rank " << rank << " of " << world);
      const Counts c = shard_counts(layout.total, world);
      const ParamGroup shard = zero1_shard(layout.total, world, rank);
      CHECK(shard.begin == displacement(c, rank));
      CHECK(shard.end == shard.begin + c[size_t(rank)]);
      CHECK(zero1_masters(layout, world, rank, false).empty());
      const Ranges held = zero1_masters(layout, world, rank, true);
      CHECK(held == merged(held));  // sorted and disjoint
      std::vector<bool> want(layout.total, false), got(layout.total, false);
      for (size_t i = shard.begin; i < shard.end; ++i) want[i] = true;
      for (const ParamView& p : layout.params)
        for (size_t i = p.offset; !p.matmul && i < p.offset + p.numel; ++i) want[i] = true;
      for (auto [b, e] : held)
        for (size_t i = b; i < e; ++i) got[i] = true;
      CHECK(got == want);
      CHECK(is_whole(held, layout.total) == (world == 1));
    }
}
