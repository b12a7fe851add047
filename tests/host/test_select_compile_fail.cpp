// tests/host/test_select_compile_fail.cpp — the NCCL transport in the in-kernel API must not compile, and must say
// why (compile_fail.sh compiles this once per CASE with -fsyntax-only). CASE 0 must compile: naming the transport
// and its (refusing) handle type is allowed; only using the handle is not.
#include <rocenante/rocenante.hpp>
#include <rocenante/transport/nccl.hpp>

using namespace rocenante;

#if CASE == 0
using named = transport::nccl::handle_type;  // naming is fine
status host_side(transport::nccl& t, const float* in, float* out, cudaStream_t s) { return t.all_reduce(in, out, 4, s); }
#elif CASE == 1
static_assert(transport::check_transport<transport::nccl>());  // what gpu::communicator<transport::nccl> checks first
#elif CASE == 2
constexpr bool passes_by_value = std::is_trivially_copyable_v<transport::nccl::handle_type>;  // a kernel argument
#endif
