// tests/nccl_api/host_engine.cpp — the engine of the layer's test build (librocenante_nccl_hosttest.so): the same
// layer core (nccl_api/layer.cpp: ABI, ids, bootstrap, votes, groups, forwarding, errors) over the library's host
// executor (host::selected_communicator: loopback between threads of one process, socket between processes), so
// that the layer's logic runs in CI without a GPU. Served calls compute real results in host memory; the "device
// pointers" of the tests are host pointers and streams are ignored (the host executor is synchronous).
//
// The CUDA stand-ins: a thread's current "device" is an integer the test sets (rocenante_nccl_test_set_device),
// and a device's identity is its ordinal on this host, so ranks given the same ordinal share a "GPU" (the real
// NCCL's refusal case) and ranks given different ones do not.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <rocenante/host/select.hpp>

#include "../../nccl_api/engine.hpp"

namespace rocenante::nccl_layer {
namespace {

thread_local int current = 0;

class host_engine final : public communicator_engine<host::selected_communicator> {
 public:
  host_engine(bootstrap::bootstrap_ref b, const options& o) : communicator_engine(b, o) {}

  status all_reduce(const void* in, void* out, std::size_t count, dtype t, cudaStream_t) override {
    return comm_.all_reduce(in, out, count, t, algorithm::automatic{});
  }
  status all_gather(const void* in, void* out, std::size_t count, dtype t, cudaStream_t) override {
    return comm_.all_gather(in, out, count, t);
  }
};

}  // namespace

std::unique_ptr<engine> make_engine(bootstrap::bootstrap_ref b, const engine_settings& s) {
  options o;
  o.capacity_bytes = s.capacity_bytes;
  return std::make_unique<host_engine>(b, o);
}

namespace platform {
const char* name() { return "host (test engine)"; }
int current_device(std::string*) { return current; }
bool set_device(int device, std::string* why) {
  if (device < 0) {
    if (why) *why = "negative device";
    return false;
  }
  current = device;
  return true;
}
gpu::device_identity identity(int device) {
  unsigned char uuid[16] = {'h', 'o', 's', 't', '-', 'g', 'p', 'u'};
  std::memcpy(uuid + 8, &device, sizeof device);
  return gpu::make_identity(device, uuid);
}
void* alloc(std::size_t bytes, std::string*) { return ::operator new(bytes); }
void release(void* p) { ::operator delete(p); }
bool copy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t) {
  std::memmove(dst, src, bytes);
  return true;
}
int relax_capture() { return 0; }
void restore_capture(int) {}
}  // namespace platform
}  // namespace rocenante::nccl_layer

/// The tests' stand-in for cudaSetDevice: the calling thread's "device" (its identity: the ordinal on this host).
extern "C" void rocenante_nccl_test_set_device(int device) { (void)rocenante::nccl_layer::platform::set_device(device, nullptr); }
