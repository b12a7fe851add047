// tests/gpu/build_check_transports.cu — a build check, not a test: the GPU executor over every transport that has
// not yet run on a GPU, and the GPU start-up selection over them (gpu::selected_communicator), must keep compiling: cuda_ipc (windows mapped between processes of one node), cuda_socket
// (the proxy path between processes over TCP, no RDMA device needed) and, where rdma-core's headers exist,
// cuda_ibverbs (the DGX Spark path). No machine here has a GPU; docs/operations.md says what has run where.
#include <rocenante/bootstrap/tcp.hpp>
#include <rocenante/gpu/communicator.hpp>
#include <rocenante/gpu/select.hpp>
#include <rocenante/transport/cuda_ipc.hpp>
#if __has_include(<infiniband/verbs.h>)
#include <rocenante/transport/cuda_ibverbs.hpp>
#endif

namespace rocenante::build_check {

template <class Transport>
void instantiate(bootstrap::tcp& b, const options& o, const __nv_bfloat16* in, __nv_bfloat16* out, cudaStream_t s) {
  gpu::communicator<Transport> c(b, o);
  (void)c.all_reduce(in, out, 1, s);
  (void)c.template all_reduce<algorithm::ring>(in, out, 1, s);
  (void)c.template all_reduce<algorithm::two_shot>(in, out, 1, s);
  (void)c.all_gather(in, out, 1, s);
}

void instantiate_all(bootstrap::tcp& b, const options& o, const __nv_bfloat16* in, __nv_bfloat16* out, cudaStream_t s) {
  instantiate<transport::cuda_ipc>(b, o, in, out, s);
  instantiate<transport::cuda_socket>(b, o, in, out, s);
#if __has_include(<infiniband/verbs.h>)
  instantiate<transport::cuda_ibverbs>(b, o, in, out, s);
#endif
  gpu::selected_communicator c(b, o);
  (void)c.all_reduce(in, out, 1, s);
  (void)c.all_reduce(in, out, 1, s, algorithm::ring{});
  (void)c.all_reduce(in, out, 1, s, algorithm::two_shot{});
  (void)c.all_gather(in, out, 1, s);
}

}  // namespace rocenante::build_check
