// The FlashAttention launchers (flash_attention.hpp): check the problem, build the kernels'
// parameters, dispatch on precision (bf16 or fp32), GPU and head dim.
#include <cuda_bf16.h>

#include <cmath>

#include "../common.cuh"
#include "cuda_kernels.hpp"
#include "flash.cuh"
#include "flash_attention.hpp"
#include "tma.cuh"

namespace lmt::cuda {
namespace {

attn::Params params(const FlashShape& s) {
  LMT_ASSERT(flash_supports(s.dh), strf("flash attention: head dim %lld (must be %s)",
                                        (long long)s.dh, flash_head_dims_text().c_str()));
  // Tiles are read 16 bytes at a time: every row must start 16-byte aligned.
  const int64_t per16 = s.bf16 ? 8 : 4;
  LMT_ASSERT(s.qkv.row % per16 == 0 && s.qkv.batch % per16 == 0 && s.o.row % per16 == 0 &&
                 s.o.batch % per16 == 0,
             "flash attention: strides must be multiples of 16 bytes");
  LMT_ASSERT(s.T < (int64_t(1) << 30), "flash attention: T must be below 2^30 (32-bit indices)");
  attn::Params p{};
  p.H = s.H, p.T = s.T;
  p.qkv_batch = s.qkv.batch, p.qkv_row = s.qkv.row, p.o_batch = s.o.batch, p.o_row = s.o.row;
  p.scale = float(1.0 / std::sqrt(double(s.dh)));
  p.scale_log2 = float(double(p.scale) * 1.4426950408889634);
  p.causal = s.causal;
  return p;
}

using bf16 = __nv_bfloat16;
constexpr const char* kUnaligned = "flash attention: tensors must start 16-byte aligned";

// The wgmma kernels run this problem (else the mma.sync or fp32 ones).
bool wgmma_kernels(const FlashShape& s) { return s.bf16 && s.wgmma && attn::sm90(s.dh); }
// The wgmma backward is the fused one (flash_sm90_bwd.cu).
bool fused_backward(const FlashShape& s) {
  using B = FlashShape::Backward;
  if (!wgmma_kernels(s) || s.backward == B::split) return false;
  return s.backward == B::fused ? flash_fused_kernel(s.dh, s.causal)
                                : flash_fused_bwd(s.T, s.dh, s.causal);
}

}  // namespace

bool flash_supports(int64_t dh) { return attn::HeadDims::has(dh); }

bool attn::hopper() {
  static const bool yes = [] {
    int dev = 0, major = 0, minor = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major == 9 && minor == 0;
  }();
  return yes;
}
bool attn::sm90(int64_t dh) { return hopper() && attn::Sm90HeadDims::has(dh); }

void flash_fwd(const FlashShape& s, void* q, const void* k, const void* v, void* o, float* lse,
               const void* rope, cudaStream_t stream) {
  attn::Params p = params(s);
  check_aligned16({q, k, v, o}, kUnaligned);
  p.q = q, p.k = k, p.v = v, p.out = o, p.lse = lse;
  if (rope && wgmma_kernels(s) && attn::fwd_sm90_rotates(s.dh, s.T)) {
    p.rope = static_cast<const float2*>(rope);
  } else if (rope) {  // rope.cu's pass over q's rows first
    LMT_ASSERT(s.qkv.batch == s.T * s.qkv.row, "flash attention: RoPE needs q's batches back to back");
    cuda::rope(q, s.bf16, rope, s.B, s.T, s.H, s.dh, s.qkv.row, false, stream);
  }
  if (!s.bf16) attn::fwd_fp32(p, s.B, s.dh, stream);
  else if (wgmma_kernels(s)) attn::fwd_sm90(p, s.B, s.dh, stream);
  else attn::fwd_tc(p, s.B, s.dh, stream);
}

FlashBwdScratch flash_bwd_scratch(const FlashShape& s) {
  return lmt::flash_bwd_scratch(s.B, s.H, s.T, s.dh, fused_backward(s));
}

void flash_bwd(const FlashShape& s, const void* q, const void* k, const void* v, const void* o,
               const void* dout, const float* lse, float* scratch, void* dq, void* dk, void* dv,
               const void* rope, cudaStream_t stream) {
  attn::Params p = params(s);
  check_aligned16({q, k, v, o, dout, dq, dk, dv, scratch}, kUnaligned);
  const FlashBwdScratch parts = flash_bwd_scratch(s);
  p.q = q, p.k = k, p.v = v, p.o = o, p.dout = dout, p.lse = const_cast<float*>(lse), p.D = scratch;
  p.dq_sums = scratch + parts.d;
  p.dq_turns = reinterpret_cast<uint32_t*>(p.dq_sums + parts.sums());
  p.dq_units = parts.units;
  p.dq = dq, p.dk = dk, p.dv = dv, p.rope = static_cast<const float2*>(rope);
  if (!s.bf16) {
    attn::bwd_rowsum<float>(p, s.B, s.dh, stream);
    attn::bwd_fp32(p, s.B, s.dh, stream);
  } else {
    attn::bwd_rowsum<bf16>(p, s.B, s.dh, stream);
    if (wgmma_kernels(s)) attn::bwd_sm90(p, s.B, s.dh, fused_backward(s), stream);
    else attn::bwd_tc(p, s.B, s.dh, stream);
  }
}

namespace attn {

// The driver's cuTensorMapEncodeTiled, found through the runtime (no link against libcuda).
static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                cudaEnableDefault, &found));
    LMT_ASSERT(found == cudaDriverEntryPointSuccess && f,
               "flash attention: no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// dims: columns, rows and two outer dimensions; strides (bytes) of the last three.
static CUtensorMap encode(const void* base, const cuuint64_t (&dims)[4],
                          const cuuint64_t (&strides)[3], int rows) {
  CUtensorMap map;
  const cuuint32_t box[4] = {64, cuuint32_t(rows), 1, 1}, step[4] = {1, 1, 1, 1};
  const CUresult rc = encode_tiled()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides, box, step,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  LMT_ASSERT(rc == CUDA_SUCCESS, strf("cuTensorMapEncodeTiled failed (%d)", int(rc)));
  return map;
}

CUtensorMap tensor_map(const Params& p, int64_t B, int64_t dh, const void* base, int64_t batch,
                       int64_t row, int rows) {
  return encode(base, {cuuint64_t(dh), cuuint64_t(p.T), cuuint64_t(p.H), cuuint64_t(B)},
                {cuuint64_t(row) * 2, cuuint64_t(dh) * 2, cuuint64_t(batch) * 2}, rows);
}

CUtensorMap matrix_map(const void* base, int64_t cols, int64_t rows, int64_t row_stride,
                       int box_rows) {
  const cuuint64_t bytes = cuuint64_t(row_stride) * 2, all = bytes * cuuint64_t(rows);
  return encode(base, {cuuint64_t(cols), cuuint64_t(rows), 1, 1}, {bytes, all, all}, box_rows);
}

}  // namespace attn
}  // namespace lmt::cuda
