#include <rocenante/gpu/communicator.hpp>
#include <rocenante/host/spawn.hpp>
#include <cstdio>
using namespace rocenante;
int main(){
  options o = gpu::default_options(); o.capacity_bytes = 1<<20; o.timeout_ns = 500'000'000;
  std::vector<std::uint64_t*> wins(2);
  host::spawn_ranks(2, [&](bootstrap::in_process& b){
    gpu::communicator<> c(b, o);
    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *in, *out; cudaMalloc(&in, 4096); cudaMalloc(&out, 8192); cudaMemset(in, 0, 4096);
    for (int k = 0; k < 6; ++k) {
      status st = k % 3 == 0 ? c.all_reduce(in, out, 4, s) : k % 3 == 1 ? c.all_reduce<algorithm::ring>(in, out, 4, s) : c.all_gather(in, out, 4, s);
      cudaError_t e = cudaStreamSynchronize(s);
      protocol::rank_state st_dev; cudaMemcpy(&st_dev, c.device_context().state, sizeof st_dev, cudaMemcpyDeviceToHost);
      printf("rank %d call %d: %s cuda=%s seq_after=%u parts_done=%u poison=%u %s\n", b.rank(), k, to_string(st), cudaGetErrorString(e), st_dev.seq, st_dev.parts_done, st_dev.poison, c.check_health().message.c_str());
      b.barrier();
    }
    auto h = c.device_context().handle;
    std::vector<std::uint64_t> flags(h.layout().flag_count());
    cudaMemcpy(flags.data(), h.windows_[h.rank()], flags.size()*8, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < flags.size(); ++i) if (flags[i] != ~0ull) printf("rank %d flag[%zu] (slot %zu part %zu ch %zu) = 0x%016llx\n", b.rank(), i, i / (h.layout().max_parts*h.layout().channels), (i / h.layout().channels) % h.layout().max_parts, i % h.layout().channels, (unsigned long long)flags[i]);
  });
}
