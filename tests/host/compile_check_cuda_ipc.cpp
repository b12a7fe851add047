// tests/host/compile_check_cuda_ipc.cpp — transport/cuda_ipc.hpp is host code over the CUDA headers: this checks
// that it compiles in the CPU-only build (compile_fail.sh with "-": the compile must succeed), so that a change to
// its set-up (the descriptor exchange of transport/fd_exchange.hpp, tested with processes in test_trust.cpp) is
// compiled on every CI run, not only on the GPU machine.
#include <rocenante/transport/cuda_ipc.hpp>

static_assert(rocenante::transport::check_transport<rocenante::transport::cuda_ipc>());
