// Every kernel gpu::communicator<cuda_loopback> launches for bf16 and fp32 (one_shot, two_shot and ring all-reduce,
// all-gather, reject), the bf16 one-shot and two_shot kernels of gpu::communicator<cuda_loopback_proxy>, and gpu/nvfp4.hpp's
// collectives for bf16: the dispatch instantiates them, so the list follows
// the library. Compiled to a cubin, never
// run: by tests/gpu/kernel_frames.sh (each kernel's stack frame, ptxas -v) and by `tools/gpu/run.sh sass --ranks
// all` (each kernel's SASS, to compare two trees).
#include <rocenante/gpu/communicator.hpp>
#include <rocenante/gpu/nvfp4.hpp>
using namespace rocenante;
using C = gpu::communicator<transport::cuda_loopback>;
#define ROCENANTE_DISPATCHED(T)                                                                                     \
  template status C::all_reduce<algorithm::one_shot, T, algorithm::no_epilogue>(const T*, T*, std::size_t,           \
                                                                                cudaStream_t, algorithm::one_shot,   \
                                                                                algorithm::no_epilogue);             \
  template status C::all_reduce<algorithm::ring, T, algorithm::no_epilogue>(const T*, T*, std::size_t, cudaStream_t, \
                                                                            algorithm::ring, algorithm::no_epilogue); \
  template status C::all_reduce<algorithm::two_shot, T, algorithm::no_epilogue>(const T*, T*, std::size_t,          \
                                                                                cudaStream_t, algorithm::two_shot,  \
                                                                                algorithm::no_epilogue);             \
  template status C::all_gather<algorithm::one_shot, T>(const T*, T*, std::size_t, cudaStream_t, algorithm::one_shot);
ROCENANTE_DISPATCHED(__nv_bfloat16)
ROCENANTE_DISPATCHED(float)
// Proxy mode (the DGX Spark path's kernels: staging into host-mapped memory, posting, waiting on the proxy's flags).
using P = gpu::communicator<transport::cuda_loopback_proxy>;
template status P::all_reduce<algorithm::one_shot, __nv_bfloat16, algorithm::no_epilogue>(
    const __nv_bfloat16*, __nv_bfloat16*, std::size_t, cudaStream_t, algorithm::one_shot, algorithm::no_epilogue);
template status P::all_reduce<algorithm::two_shot, __nv_bfloat16, algorithm::no_epilogue>(
    const __nv_bfloat16*, __nv_bfloat16*, std::size_t, cudaStream_t, algorithm::two_shot, algorithm::no_epilogue);
template status P::all_gather<algorithm::one_shot, __nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, std::size_t,
                                                                  cudaStream_t, algorithm::one_shot);
using B = __nv_bfloat16;
template status gpu::all_reduce_fp4<B, transport::cuda_loopback>(C&, const B*, B*, std::size_t, cudaStream_t, std::string*);
template status gpu::all_reduce_quantize<B, transport::cuda_loopback>(C&, const B*, const algorithm::nvfp4_epilogue<B>&,
                                                                      cudaStream_t, std::string*);
template status gpu::all_gather_nvfp4<transport::cuda_loopback>(C&, const algorithm::nvfp4_gather&, cudaStream_t, std::string*);
