// tests/gpu/build_check_ibverbs.cu — a build check, not a test: the GPU executor over the ibverbs transport with
// host-mapped windows (the DGX Spark path: the NIC writes into pinned host memory that the kernels read) must keep
// compiling. It has never run: no machine here has both a GPU and an RDMA device (docs/operations.md).
#include <rocenante/bootstrap/in_process.hpp>
#include <rocenante/gpu/communicator.hpp>
#include <rocenante/transport/ibverbs/transport.hpp>

namespace rocenante::build_check {

using gpu_ibverbs = transport::basic_ibverbs<transport::cuda_mapping>;
static_assert(gpu_ibverbs::handle_type::shared_staging, "the NIC path stages through the proxy");

void instantiate(bootstrap::in_process& b, const options& o, const __nv_bfloat16* in, __nv_bfloat16* out,
                 cudaStream_t s) {
  gpu::communicator<gpu_ibverbs> c(b, o);
  (void)c.all_reduce(in, out, 1, s);
  (void)c.all_reduce<algorithm::ring>(in, out, 1, s);
  (void)c.all_gather(in, out, 1, s);
}

}  // namespace rocenante::build_check
