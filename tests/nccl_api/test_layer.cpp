// tests/nccl_api/test_layer.cpp — the NCCL-API layer through NCCL's C ABI, in CI without a GPU: the program links
// the layer's test build (librocenante_nccl_hosttest.so: the layer's core over the host executor, so served calls
// compute real sums in host memory; tests/nccl_api/host_engine.cpp) and forwards to the recording stub
// (stub_nccl.cpp, named by ROCENANTE_NCCL_LIBRARY), which computes nothing: a served result is checked against a
// reference computed here, a forwarded call is checked by the arguments the stub received.
//
// Ranks are threads: each calls ncclCommInitRank with the id rank 0's ncclGetUniqueId made (NCCL's
// "multi thread/process" form), and gets its own "device" (rocenante_nccl_test_set_device) unless a case puts
// ranks on one. Test suites by environment (tests/nccl_api/meson.build runs each with its own):
//   layer          ROCENANTE_NCCL_LIBRARY=stub, ROCENANTE_TIMEOUT_MS=5000
//   layer.fault    + ROCENANTE_TEST_FAULT='1@nccl layer: library communicator'
//   layer.zero     + ROCENANTE_NCCL_MAX_BYTES=0
//   layer.bad_env  + ROCENANTE_NCCL_MAX_BYTES=lots
//   layer.disable  + ROCENANTE_NCCL_DISABLE=1
//   layer.self     ROCENANTE_NCCL_LIBRARY=the layer's own test build
//   layer.ipv6     ROCENANTE_NCCL_ADDR=::1 (exits 77 where this host has no IPv6 loopback)
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <dlfcn.h>
#include <nccl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../nccl_api/decision.hpp"
#include "../../nccl_api/unique_id.hpp"

extern "C" void rocenante_nccl_test_set_device(int device);
extern "C" int rocenante_nccl_describe(ncclComm_t comm, char* buf, size_t len);
extern "C" int rocenante_nccl_route(ncclComm_t comm, int all_gather, size_t count, int datatype, int op);

namespace {

using rocenante::nccl_layer::decide;
using rocenante::nccl_layer::route;

// ---- the stub's log ------------------------------------------------------------------------------------------------

void* stub() {
  static void* h = [] {
    const char* path = std::getenv("ROCENANTE_NCCL_LIBRARY");
    return path != nullptr ? ::dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  }();
  return h;
}
std::string stub_log() {
  auto f = reinterpret_cast<const char* (*)()>(stub() ? ::dlsym(stub(), "stub_nccl_log") : nullptr);
  return f ? f() : std::string();
}
void stub_clear() {
  if (auto f = reinterpret_cast<void (*)()>(stub() ? ::dlsym(stub(), "stub_nccl_clear") : nullptr)) f();
}
/// The log's lines that contain every one of `words`.
std::vector<std::string> lines_with(const std::vector<std::string>& words) {
  std::vector<std::string> out;
  std::istringstream in(stub_log());
  for (std::string l; std::getline(in, l);)
    if (std::all_of(words.begin(), words.end(), [&](const std::string& w) { return l.find(w) != std::string::npos; }))
      out.push_back(l);
  return out;
}
std::string ptr(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}
std::string last_error() {
  const char* e = ncclGetLastError(nullptr);
  return e ? e : "";
}
std::string describe(ncclComm_t c) {
  char buf[4096];
  return rocenante_nccl_describe(c, buf, sizeof buf) >= 0 ? std::string(buf) : std::string("(not the layer's)");
}

// ---- ranks as threads ----------------------------------------------------------------------------------------------

/// `n` ranks on threads, each with its communicator from one id (rank r on device devices[r], default r), running
/// `body(rank, comm)`, then destroying it. Init failures are checked; the rest is the body's.
void run_ranks(int n, const std::function<void(int, ncclComm_t)>& body, std::vector<int> devices = {}) {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<std::thread> threads;
  std::vector<std::string> failed(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      rocenante_nccl_test_set_device(devices.empty() ? r : devices[r]);
      ncclComm_t c = nullptr;
      if (ncclCommInitRank(&c, n, id, r) != ncclSuccess) {
        failed[r] = last_error();
        return;
      }
      body(r, c);
      if (ncclCommDestroy(c) != ncclSuccess) failed[r] = "destroy: " + last_error();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) CHECK_MESSAGE(failed[r].empty(), "rank ", r, ": ", failed[r]);
}

/// Rank r's element i: a small integer, exact in every type and in any order of summation.
float value(int rank, std::size_t i) { return static_cast<float>((rank + 1) * 2 + static_cast<int>(i % 5)); }
float sum_of(int n, std::size_t i) {
  float s = 0;
  for (int q = 0; q < n; ++q) s += value(q, i);
  return s;
}

template <class T>
T make(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __half>) return __float2half(v);
  else return __float2bfloat16(v);
}
template <class T>
float back(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else return __bfloat162float(v);
}
template <class T>
constexpr ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, __half>) return ncclFloat16;
  else return ncclBfloat16;
}

/// Served all-reduce (out of place, in place) and all-gather (out of place, NCCL's in-place form) of `count` T on
/// `c`, checked against the reference. Returns what went wrong, empty when nothing did.
template <class T>
std::string served_round(int rank, int n, ncclComm_t c, std::size_t count) {
  const auto stream = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x5000} + rank);
  std::vector<T> in(count), out(count, make<T>(-1.0f)), gather(count * n, make<T>(-1.0f));
  for (std::size_t i = 0; i < count; ++i) in[i] = make<T>(value(rank, i));
  std::ostringstream bad;
  if (ncclAllReduce(in.data(), out.data(), count, nccl_type<T>(), ncclSum, c, stream) != ncclSuccess)
    return "all_reduce: " + last_error();
  for (std::size_t i = 0; i < count; ++i)
    if (back(out[i]) != sum_of(n, i)) return "all_reduce element " + std::to_string(i) + " is " + std::to_string(back(out[i]));
  std::vector<T> inplace = in;
  if (ncclAllReduce(inplace.data(), inplace.data(), count, nccl_type<T>(), ncclSum, c, stream) != ncclSuccess)
    return "in-place all_reduce: " + last_error();
  if (std::memcmp(inplace.data(), out.data(), count * sizeof(T)) != 0) return "in-place all_reduce differs";
  if (ncclAllGather(in.data(), gather.data(), count, nccl_type<T>(), c, stream) != ncclSuccess) return "all_gather: " + last_error();
  for (int q = 0; q < n; ++q)
    for (std::size_t i = 0; i < count; ++i)
      if (back(gather[q * count + i]) != value(q, i)) return "all_gather block " + std::to_string(q);
  std::vector<T> ip(count * n, make<T>(-1.0f));
  std::copy(in.begin(), in.end(), ip.begin() + static_cast<std::ptrdiff_t>(rank * count));
  if (ncclAllGather(ip.data() + rank * count, ip.data(), count, nccl_type<T>(), c, stream) != ncclSuccess)
    return "in-place all_gather: " + last_error();
  if (std::memcmp(ip.data(), gather.data(), count * n * sizeof(T)) != 0) return "in-place all_gather differs";
  return {};
}

int count_lines(const std::string& what) { return static_cast<int>(lines_with({what}).size()); }

}  // namespace

// ================================================================================================================
TEST_SUITE("layer") {
  TEST_CASE("ncclGetVersion reports the real NCCL's version (the stub's 2.99.99)") {
    int v = 0;
    REQUIRE(ncclGetVersion(&v) == ncclSuccess);
    CHECK(v == 29999);
  }

  TEST_CASE("ncclGetUniqueId carries the layer's mark, an address and port, and fresh random job and secret") {
    ncclUniqueId a, b;
    REQUIRE(ncclGetUniqueId(&a) == ncclSuccess);
    REQUIRE(ncclGetUniqueId(&b) == ncclSuccess);
    const auto da = rocenante::nccl_layer::decode(a.internal), db = rocenante::nccl_layer::decode(b.internal);
    REQUIRE_MESSAGE(da.fields.has_value(), da.why);
    REQUIRE(db.fields.has_value());
    CHECK(da.fields->port != 0);
    CHECK(da.fields->pid == static_cast<std::uint32_t>(::getpid()));
    CHECK(da.fields->job != db.fields->job);
    CHECK(da.fields->secret != db.fields->secret);
    CHECK(da.fields->secret_text().size() == 64);
    CHECK(lines_with({"ncclGetUniqueId"}).empty());  // the layer's own id: NCCL was not asked
  }

  TEST_CASE("an id's encode and decode round-trip for IPv4 and IPv6, and a foreign or damaged id is refused") {
    using namespace rocenante::nccl_layer;
    for (const char* addr : {"10.1.2.3", "fd00::17", "[::1]"}) {
      id_fields f;
      REQUIRE(parse_address(addr, f));
      f.port = 41234;
      for (std::size_t i = 0; i < f.job.size(); ++i) f.job[i] = static_cast<std::uint8_t>(i * 7 + 1);
      for (std::size_t i = 0; i < f.secret.size(); ++i) f.secret[i] = static_cast<std::uint8_t>(255 - i);
      f.pid = 4242;
      f.host = 0x0123456789abcdefull;
      const id_bytes_t bytes = encode(f);
      const decoded_id d = decode(bytes.data());
      REQUIRE_MESSAGE(d.fields.has_value(), d.why);
      CHECK(d.fields->family == f.family);
      CHECK(d.fields->addr == f.addr);
      CHECK(d.fields->port == 41234);
      CHECK(d.fields->job == f.job);
      CHECK(d.fields->secret == f.secret);
      CHECK(d.fields->pid == 4242);
      CHECK(d.fields->host == f.host);
      id_bytes_t damaged = bytes;
      damaged[50] ^= 1;
      CHECK(decode(damaged.data()).why.find("corrupted") != std::string::npos);
    }
    id_fields v6;
    REQUIRE(parse_address("fd00::17", v6));
    CHECK(v6.family == 6);
    CHECK(v6.address_text() == "fd00::17");
    v6.port = 7;
    CHECK(v6.endpoint_text() == "[fd00::17]:7");
    // A real NCCL id starts with 8 random bytes: whatever they are (but the mark), it is refused by its mark.
    unsigned char real_like[id_bytes];
    for (std::size_t i = 0; i < id_bytes; ++i) real_like[i] = static_cast<unsigned char>(i * 37 + 11);
    CHECK(decode(real_like).why.find("not made by the RoCEnante NCCL layer") != std::string::npos);
  }

  TEST_CASE("ncclCommInitRank refuses a real NCCL id and a corrupted one, saying why") {
    rocenante_nccl_test_set_device(0);
    ncclUniqueId foreign;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) foreign.internal[i] = static_cast<char>(i * 13 + 5);
    ncclComm_t c = reinterpret_cast<ncclComm_t>(0x1);
    CHECK(ncclCommInitRank(&c, 2, foreign, 0) == ncclInvalidArgument);
    CHECK(c == nullptr);
    CHECK(last_error().find("not made by the RoCEnante NCCL layer") != std::string::npos);
    ncclUniqueId ours;
    REQUIRE(ncclGetUniqueId(&ours) == ncclSuccess);
    ours.internal[100] ^= 0x40;
    CHECK(ncclCommInitRank(&c, 2, ours, 0) == ncclInvalidArgument);
    CHECK(last_error().find("corrupted") != std::string::npos);
  }

  TEST_CASE("served all-reduce and all-gather (fp32, fp16, bf16, in and out of place) are exact and never reach NCCL") {
    stub_clear();
    const int n = 4;
    std::mutex mu;
    std::vector<std::string> problems;
    run_ranks(n, [&](int r, ncclComm_t c) {
      for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{4099}}) {
        std::string p = served_round<float>(r, n, c, count);
        if (p.empty()) p = served_round<__half>(r, n, c, count);
        if (p.empty()) p = served_round<__nv_bfloat16>(r, n, c, count);
        if (!p.empty()) {
          std::lock_guard lock(mu);
          problems.push_back("rank " + std::to_string(r) + ", count " + std::to_string(count) + ": " + p);
        }
      }
      ncclResult_t async = ncclInternalError;
      CHECK(ncclCommGetAsyncError(c, &async) == ncclSuccess);
      CHECK(async == ncclSuccess);
      CHECK(describe(c).find("served here: all_reduce") != std::string::npos);
    });
    for (const auto& p : problems) FAIL_CHECK(p);
    CHECK(lines_with({"ncclAllReduce"}).empty());
    CHECK(lines_with({"ncclAllGather"}).empty());
    CHECK(lines_with({"ncclCommInitRank"}).empty());  // no NCCL communicator was needed
  }

  TEST_CASE("calls the layer does not serve reach NCCL with their arguments intact, on one NCCL communicator per rank") {
    stub_clear();
    const int n = 4;
    const std::size_t big = (std::size_t{1} << 20) / sizeof(float) + 1;  // one element above the default 1 MiB
    run_ranks(n, [&](int r, ncclComm_t c) {
      // Buffers are never touched by a forwarded call (the stub records, the layer passes): addresses suffice.
      auto* send = reinterpret_cast<const void*>(std::uintptr_t{0x10000000} + 0x1000 * r);
      auto* recv = reinterpret_cast<void*>(std::uintptr_t{0x20000000} + 0x1000 * r);
      const auto s = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x7000} + r);
      const std::string me = "comm=stub" + std::to_string(r) + "/4";
      const std::string args = "send=" + ptr(send) + " recv=" + ptr(recv);
      const std::string st = "stream=" + ptr(s);
      CHECK(rocenante_nccl_route(c, 0, 100, ncclInt32, ncclSum) == static_cast<int>(route::datatype));
      CHECK(ncclAllReduce(send, recv, 100, ncclInt32, ncclSum, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclAllReduce", args, "count=100 dtype=2", me, st, "op=0"}).size() == 1);
      CHECK(ncclAllReduce(send, recv, 33, ncclFloat32, ncclMax, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclAllReduce", args, "count=33 dtype=7", me, st, "op=2"}).size() == 1);
      CHECK(ncclAllReduce(send, recv, 12, ncclBfloat16, ncclAvg, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclAllReduce", args, "count=12 dtype=9", me, st, "op=4"}).size() == 1);
      CHECK(ncclAllReduce(send, recv, big, ncclFloat32, ncclSum, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclAllReduce", args, "count=" + std::to_string(big) + " dtype=7", me, "op=0"}).size() == 1);
      CHECK(ncclAllGather(send, recv, 64, ncclInt8, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclAllGather", args, "count=64 dtype=0", me, st}).size() == 1);
      CHECK(ncclAllGather(send, recv, big, ncclFloat32, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclAllGather", args, "count=" + std::to_string(big), me}).size() == 1);
      CHECK(ncclBroadcast(send, recv, 5, ncclFloat16, 1, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclBroadcast", args, "count=5 dtype=6", me, st, "root=1"}).size() == 1);
      CHECK(ncclReduce(send, recv, 6, ncclFloat32, ncclProd, 2, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclReduce ", args, "count=6 dtype=7", me, "op=1 root=2"}).size() == 1);
      CHECK(ncclReduceScatter(send, recv, 8, ncclFloat32, ncclSum, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclReduceScatter", args, "count=8", me, "op=0"}).size() == 1);
      CHECK(ncclAlltoAll(send, recv, 9, ncclInt64, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclAlltoAll", args, "count=9 dtype=4", me}).size() == 1);
      CHECK(ncclGather(send, recv, 10, ncclUint8, 3, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclGather", args, "count=10 dtype=1", me, "root=3"}).size() == 1);
      CHECK(ncclScatter(send, recv, 11, ncclUint32, 0, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclScatter", args, "count=11 dtype=3", me, "root=0"}).size() == 1);
      CHECK(ncclBcast(recv, 12, ncclFloat64, 2, c, s) == ncclSuccess);
      CHECK(lines_with({"ncclBcast", "count=12 dtype=8", me, "root=2"}).size() == 1);
      // send/recv pairs in a group, as NCCL needs them
      CHECK(ncclGroupStart() == ncclSuccess);
      CHECK(ncclSend(send, 13, ncclFloat32, (r + 1) % n, c, s) == ncclSuccess);
      CHECK(ncclRecv(recv, 13, ncclFloat32, (r + n - 1) % n, c, s) == ncclSuccess);
      CHECK(ncclGroupEnd() == ncclSuccess);
      CHECK(lines_with({"ncclSend", "send=" + ptr(send), "count=13", me, "peer=" + std::to_string((r + 1) % n)}).size() == 1);
      CHECK(lines_with({"ncclRecv", "recv=" + ptr(recv), "count=13", me, "peer=" + std::to_string((r + n - 1) % n)}).size() == 1);
      int v = -1;
      CHECK(ncclCommCount(c, &v) == ncclSuccess);
      CHECK(v == n);
      CHECK(ncclCommUserRank(c, &v) == ncclSuccess);
      CHECK(v == r);
      CHECK(ncclCommCuDevice(c, &v) == ncclSuccess);
      CHECK(v == r);
    });
    // One NCCL communicator per rank, all from one NCCL id (rank 0's, spread through the layer's bootstrap).
    const auto inits = lines_with({"ncclCommInitRankConfig nranks=4"});
    REQUIRE(inits.size() == 4);
    std::set<std::string> ids, ranks;
    for (const auto& l : inits) {
      ids.insert(l.substr(l.find("id=")));
      ranks.insert(l.substr(l.find("rank="), 6));
    }
    CHECK(ids.size() == 1);
    CHECK(ranks.size() == 4);
    CHECK(count_lines("ncclGetUniqueId") == 1);
    CHECK(count_lines("ncclCommDestroy comm=stub") == 4);
  }

  TEST_CASE("every rank routes a call the same way, whatever its buffers: the same calls reach NCCL in the same order") {
    using namespace rocenante::nccl_layer;
    // The route's inputs are the call's shared values and the voted policy; pointers are not among them.
    const serve_policy p{true, 1 << 20};
    for (int op : {int(ncclSum), int(ncclProd), int(ncclMax), int(ncclMin), int(ncclAvg), int(ncclNumOps) + 4096})
      for (int dt = 0; dt < ncclNumTypes; ++dt)
        for (std::uint64_t count : {0ull, 1ull, 1000ull, 262144ull, 262145ull, 524288ull, 524289ull}) {
          const route ar = decide(collective_kind::all_reduce, count, dt, op, p);
          const bool exp_ar = op == ncclSum && (dt == ncclFloat32 || dt == ncclFloat16 || dt == ncclBfloat16) && count > 0 &&
                              count * nccl_element_bytes(dt) <= (1u << 20);
          CHECK_MESSAGE((ar == route::served) == exp_ar, "op ", op, " dtype ", dt, " count ", count);
          const route ag = decide(collective_kind::all_gather, count, dt, op, p);
          CHECK((ag == route::served) == (exp_ar || (op != ncclSum && (dt == ncclFloat32 || dt == ncclFloat16 ||
                                                                         dt == ncclBfloat16) && count > 0 &&
                                                     count * nccl_element_bytes(dt) <= (1u << 20))));
        }
    CHECK(decide(collective_kind::all_reduce, 1, ncclFloat32, ncclSum, serve_policy{false, 1 << 20}) == route::disabled);
    for (int dt = 0; dt < ncclNumTypes; ++dt) {  // an empty call is done on every rank, whatever its type
      CHECK(decide(collective_kind::all_reduce, 0, dt, ncclMax, p) == route::empty);
      CHECK(decide(collective_kind::all_gather, 0, dt, ncclSum, p) == route::empty);
    }

    // Through the layer: each rank uses buffers at another alignment and a mixed sequence of calls; the routes of
    // every rank agree, the served results are exact, and each rank's forwarded sequence is the same.
    stub_clear();
    const int n = 3;
    std::vector<std::vector<int>> routes(n);
    std::vector<std::string> problems(n);
    const std::vector<std::pair<ncclDataType_t, std::size_t>> calls = {
        {ncclFloat32, 5}, {ncclInt32, 5}, {ncclFloat16, 600000}, {ncclFloat16, 1000}, {ncclBfloat16, 524289}, {ncclFloat32, 1}};
    run_ranks(n, [&](int r, ncclComm_t c) {
      std::vector<unsigned char> store(4 << 20);
      for (const auto& [dt, count] : calls) {
        routes[r].push_back(rocenante_nccl_route(c, 0, count, dt, ncclSum));
        const std::size_t bytes = count * nccl_element_bytes(dt);
        unsigned char* buf = store.data() + 1 + 2 * r;  // odd offsets, different per rank
        std::vector<float> ref(std::min<std::size_t>(count, 64));
        if (dt == ncclFloat32)
          for (std::size_t i = 0; i < count; ++i) {
            const float v = value(r, i);
            std::memcpy(buf + 4 * i, &v, 4);
          }
        else std::memset(buf, 0, bytes);
        if (ncclAllReduce(buf, buf, count, dt, ncclSum, c, nullptr) != ncclSuccess) problems[r] += "call failed: " + last_error() + "; ";
        if (dt == ncclFloat32 && routes[r].back() == 0)
          for (std::size_t i = 0; i < count; ++i) {
            float v;
            std::memcpy(&v, buf + 4 * i, 4);
            if (v != sum_of(n, i)) problems[r] += "wrong sum; ";
          }
      }
    });
    for (int r = 0; r < n; ++r) CHECK_MESSAGE(problems[r].empty(), "rank ", r, ": ", problems[r]);
    for (int r = 1; r < n; ++r) CHECK(routes[r] == routes[0]);
    CHECK(routes[0] == std::vector<int>{0, int(route::datatype), int(route::too_large), 0, int(route::too_large), 0});
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> seq;
      for (const auto& l : lines_with({"ncclAllReduce", "comm=stub" + std::to_string(r) + "/"}))
        seq.push_back(l.substr(l.find("count=")));
      for (auto& s : seq) s = s.substr(0, s.find(" comm="));
      CHECK(seq == std::vector<std::string>{"count=5 dtype=2", "count=600000 dtype=6", "count=524289 dtype=9"});
    }
  }

  TEST_CASE("a group runs its served calls in issue order and its forwarded calls as one NCCL group") {
    stub_clear();
    const int n = 2;
    std::vector<std::string> problems(n);
    run_ranks(n, [&](int r, ncclComm_t c) {
      std::vector<float> a(100), b(100), g(200, -1.0f);
      for (int i = 0; i < 100; ++i) a[i] = value(r, i);
      CHECK(ncclGroupStart() == ncclSuccess);
      CHECK(ncclAllReduce(a.data(), b.data(), 100, ncclFloat32, ncclSum, c, nullptr) == ncclSuccess);
      CHECK(ncclSend(a.data(), 100, ncclFloat32, 1 - r, c, nullptr) == ncclSuccess);
      CHECK(ncclGroupStart() == ncclSuccess);  // nested: one group
      CHECK(ncclRecv(g.data(), 100, ncclFloat32, 1 - r, c, nullptr) == ncclSuccess);
      CHECK(ncclGroupEnd() == ncclSuccess);
      CHECK(ncclAllGather(b.data(), g.data(), 100, ncclFloat32, c, nullptr) == ncclSuccess);
      CHECK(b[0] == 0.0f);  // nothing ran before ncclGroupEnd
      CHECK(ncclGroupEnd() == ncclSuccess);
      for (int i = 0; i < 100; ++i)
        if (b[i] != sum_of(n, i) || g[i] != sum_of(n, i) || g[100 + i] != sum_of(n, i)) problems[r] = "wrong result at " + std::to_string(i);
    });
    for (int r = 0; r < n; ++r) CHECK_MESSAGE(problems[r].empty(), problems[r]);
    // Each rank's forwarded part: one NCCL group holding its send and its receive.
    const std::string log = stub_log();
    for (int r = 0; r < n; ++r) {
      const std::string me = "comm=stub" + std::to_string(r) + "/2";
      CHECK(lines_with({"ncclSend", me}).size() == 1);
      CHECK(lines_with({"ncclRecv", me}).size() == 1);
    }
    CHECK(count_lines("ncclGroupStart") == 2);
    CHECK(count_lines("ncclGroupEnd") == 2);
    CHECK(lines_with({"ncclAllReduce"}).empty());
    CHECK(lines_with({"ncclAllGather"}).empty());
    CHECK(ncclGroupEnd() == ncclInvalidUsage);  // unmatched
  }

  TEST_CASE("a PreMulSum operator and a registration made before NCCL exists are made in NCCL when it is") {
    stub_clear();
    run_ranks(2, [&](int r, ncclComm_t c) {
      float two = 2.0f;
      ncclRedOp_t op{};
      REQUIRE(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat32, ncclScalarHostImmediate, c) == ncclSuccess);
      two = 3.0f;  // host-immediate: the value at creation counts
      CHECK(static_cast<int>(op) >= static_cast<int>(ncclNumOps));
      std::vector<float> buf(64);
      void* handle = nullptr;
      REQUIRE(ncclCommRegister(c, buf.data(), buf.size() * 4, &handle) == ncclSuccess);
      const std::string me = "comm=stub" + std::to_string(r) + "/2";
      CHECK(lines_with({"ncclCommRegister", me}).empty());  // NCCL has no communicator yet
      CHECK(rocenante_nccl_route(c, 0, 64, ncclFloat32, op) == static_cast<int>(route::reduction));
      CHECK(ncclAllReduce(buf.data(), buf.data(), 64, ncclFloat32, op, c, nullptr) == ncclSuccess);
      const auto reg = lines_with({"ncclCommRegister", me, "buff=" + ptr(buf.data()), "size=256"});
      const auto made = lines_with({"ncclRedOpCreatePreMulSum", "value=2.0", me});
      REQUIRE(reg.size() == 1);
      REQUIRE(made.size() == 1);
      const std::string real_op = made[0].substr(made[0].find("op=") + 3, made[0].find(' ', made[0].find("op=")) - made[0].find("op=") - 3);
      CHECK(lines_with({"ncclAllReduce", me, "op=" + real_op}).size() == 1);
      CHECK(ncclRedOpDestroy(op, c) == ncclSuccess);
      CHECK(lines_with({"ncclRedOpDestroy op=" + real_op, me}).size() == 1);
      const std::string real_handle = reg[0].substr(reg[0].find("handle="));
      CHECK(ncclCommDeregister(c, handle) == ncclSuccess);
      CHECK(lines_with({"ncclCommDeregister", me, real_handle}).size() == 1);
      CHECK(ncclCommDeregister(c, handle) == ncclInvalidArgument);
    });
  }

  TEST_CASE("ncclCommSplit by color and key makes working communicators, and NCCL_SPLIT_NOCOLOR gets none") {
    stub_clear();
    const int n = 5;
    std::vector<std::string> problems(n);
    run_ranks(n, [&](int r, ncclComm_t c) {
      const int color = r == 4 ? NCCL_SPLIT_NOCOLOR : r % 2;
      ncclComm_t sub = reinterpret_cast<ncclComm_t>(0x1);
      if (ncclCommSplit(c, color, -r, &sub, nullptr) != ncclSuccess) {
        problems[r] = "split: " + last_error();
        return;
      }
      if (color == NCCL_SPLIT_NOCOLOR) {
        if (sub != nullptr) problems[r] = "NOCOLOR got a communicator";
        return;
      }
      int size = 0, rank = -1;
      CHECK(ncclCommCount(sub, &size) == ncclSuccess);
      CHECK(ncclCommUserRank(sub, &rank) == ncclSuccess);
      CHECK(size == 2);
      CHECK(rank == (r < 2 ? 1 : 0));  // key -r: the higher parent rank first
      std::vector<float> in(50), out(50);
      for (int i = 0; i < 50; ++i) in[i] = value(r, i);
      if (ncclAllReduce(in.data(), out.data(), 50, ncclFloat32, ncclSum, sub, nullptr) != ncclSuccess) problems[r] = last_error();
      for (int i = 0; i < 50 && problems[r].empty(); ++i)
        if (out[i] != value(color, i) + value(color + 2, i)) problems[r] = "wrong sum in color " + std::to_string(color);
      int v = 0;
      CHECK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, sub, nullptr) == ncclSuccess);  // forwarded: NCCL for the split
      CHECK(ncclCommDestroy(sub) == ncclSuccess);
    });
    for (int r = 0; r < n; ++r) CHECK_MESSAGE(problems[r].empty(), "rank ", r, ": ", problems[r]);
    CHECK(lines_with({"ncclCommInitRankConfig nranks=2"}).size() == 4);
    CHECK(lines_with({"ncclCommInitRankConfig nranks=5"}).empty());
    CHECK(lines_with({"ncclAllReduce", "count=1 dtype=2"}).size() == 4);
  }

  TEST_CASE("ncclCommInitAll makes one communicator per device; each serves, and they split in one group") {
    stub_clear();
    const int n = 3;
    ncclComm_t comms[n] = {};
    const int devs[n] = {4, 5, 6};
    REQUIRE(ncclCommInitAll(comms, n, devs) == ncclSuccess);
    std::vector<std::string> problems(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        int d = -1, rank = -1;
        CHECK(ncclCommCuDevice(comms[r], &d) == ncclSuccess);
        CHECK(ncclCommUserRank(comms[r], &rank) == ncclSuccess);
        CHECK(d == devs[r]);
        CHECK(rank == r);
        problems[r] = served_round<float>(r, n, comms[r], 333);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) CHECK_MESSAGE(problems[r].empty(), "rank ", r, ": ", problems[r]);
    // One thread drives every rank's split, as NCCL requires for ranks of one thread: a group.
    ncclComm_t subs[n] = {};
    CHECK(ncclGroupStart() == ncclSuccess);
    for (int r = 0; r < n; ++r) CHECK(ncclCommSplit(comms[r], 0, r, &subs[r], nullptr) == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
    // and its forwarded calls: NCCL's communicators of the three are created together
    int vals[n] = {1, 2, 3};
    CHECK(ncclGroupStart() == ncclSuccess);
    for (int r = 0; r < n; ++r) CHECK(ncclAllReduce(&vals[r], &vals[r], 1, ncclInt32, ncclSum, subs[r], nullptr) == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
    CHECK(lines_with({"ncclCommInitRankConfig nranks=3"}).size() == 3);
    CHECK(lines_with({"ncclAllReduce", "count=1 dtype=2"}).size() == 3);
    for (int r = 0; r < n; ++r) {
      CHECK(ncclCommDestroy(subs[r]) == ncclSuccess);
      CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
    }
  }

  TEST_CASE("ncclCommInitRankConfig inside a group (nccl-tests' way) initialises at ncclGroupEnd, one thread for two ranks") {
    stub_clear();
    const int n = 4;
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    ncclComm_t comms[n] = {};
    std::vector<std::thread> threads;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = "from-the-test";
    for (int t = 0; t < 3; ++t)
      threads.emplace_back([&, t] {
        const std::vector<int> mine = t < 2 ? std::vector<int>{t} : std::vector<int>{2, 3};
        CHECK(ncclGroupStart() == ncclSuccess);
        for (int r : mine) {
          rocenante_nccl_test_set_device(10 + r);
          CHECK(ncclCommInitRankConfig(&comms[r], n, id, r, &cfg) == ncclSuccess);
          ncclResult_t state = ncclSuccess;
          CHECK(ncclCommGetAsyncError(comms[r], &state) == ncclSuccess);
          CHECK(state == ncclInProgress);  // created at ncclGroupEnd
        }
        CHECK(ncclGroupEnd() == ncclSuccess);
      });
    for (auto& t : threads) t.join();
    threads.clear();
    std::vector<std::string> problems(n);
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        int d = -1;
        CHECK(ncclCommCuDevice(comms[r], &d) == ncclSuccess);
        CHECK(d == 10 + r);
        problems[r] = served_round<__nv_bfloat16>(r, n, comms[r], 77);
        int v = 0;
        CHECK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comms[r], nullptr) == ncclSuccess);
        CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) CHECK_MESSAGE(problems[r].empty(), "rank ", r, ": ", problems[r]);
    // NCCL got the user's config: non-blocking.
    CHECK(lines_with({"ncclCommInitRankConfig nranks=4", "blocking=0"}).size() == 4);
  }

  TEST_CASE("ranks sharing a GPU are served, and a forwarded call fails at once with a clear error instead of hanging") {
    stub_clear();
    std::vector<std::string> problems(3);
    run_ranks(
        3,
        [&](int r, ncclComm_t c) {
          problems[r] = served_round<float>(r, 3, c, 100);
          CHECK(describe(c).find("share one GPU") != std::string::npos);
          int v = 0;
          CHECK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, c, nullptr) == ncclInvalidUsage);
          CHECK(last_error().find("share one GPU") != std::string::npos);
          CHECK(ncclBroadcast(&v, &v, 1, ncclInt32, 0, c, nullptr) == ncclInvalidUsage);  // the same answer, no retry
          ncclResult_t async = ncclInternalError;
          CHECK(ncclCommGetAsyncError(c, &async) == ncclSuccess);
          CHECK(async == ncclSuccess);  // the communicator itself is healthy
        },
        {0, 0, 0});
    for (int r = 0; r < 3; ++r) CHECK_MESSAGE(problems[r].empty(), "rank ", r, ": ", problems[r]);
    CHECK(lines_with({"ncclCommInitRank"}).empty());
    CHECK(lines_with({"ncclAllReduce"}).empty());
  }

  TEST_CASE("a dead peer poisons the served communicator: the call, ncclCommGetAsyncError and ncclGetLastError say so; ncclCommAbort returns") {
    stub_clear();
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    ncclComm_t comms[2] = {};
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        rocenante_nccl_test_set_device(r);
        CHECK(ncclCommInitRank(&comms[r], 2, id, r) == ncclSuccess);
      });
    for (auto& t : threads) t.join();
    REQUIRE(comms[0] != nullptr);
    REQUIRE(comms[1] != nullptr);
    // Rank 1 never calls: rank 0 waits out ROCENANTE_TIMEOUT_MS (5 s) and fails.
    std::vector<float> buf(256, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    const ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comms[0], nullptr);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(r == ncclRemoteError);
    CHECK(waited < 20.0);
    CHECK(last_error().find("poisoned") != std::string::npos);
    ncclResult_t async = ncclSuccess;
    CHECK(ncclCommGetAsyncError(comms[0], &async) == ncclSuccess);
    CHECK(async == ncclRemoteError);
    CHECK(last_error().find("library communicator failed") != std::string::npos);
    // fail-stop: a later served call fails at once, and is never forwarded
    CHECK(ncclAllReduce(buf.data(), buf.data(), 16, ncclFloat32, ncclSum, comms[0], nullptr) != ncclSuccess);
    CHECK(lines_with({"ncclAllReduce"}).empty());
    const auto t1 = std::chrono::steady_clock::now();
    CHECK(ncclCommAbort(comms[0]) == ncclSuccess);
    CHECK(ncclCommAbort(comms[1]) == ncclSuccess);
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() < 20.0);
  }

  TEST_CASE("ncclCommAbort tears down both layers: NCCL's communicator is aborted, the library's freed") {
    stub_clear();
    run_ranks(2, [&](int r, ncclComm_t c) {
      int v = 0;
      CHECK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, c, nullptr) == ncclSuccess);  // NCCL's communicator exists
      CHECK(ncclCommFinalize(c) == ncclSuccess);
      CHECK(lines_with({"ncclCommFinalize", "comm=stub" + std::to_string(r) + "/2"}).size() == 1);
    });
    CHECK(count_lines("ncclCommDestroy comm=stub") == 2);
    stub_clear();
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        rocenante_nccl_test_set_device(r);
        ncclComm_t c = nullptr;
        REQUIRE(ncclCommInitRank(&c, 2, id, r) == ncclSuccess);
        int v = 0;
        CHECK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, c, nullptr) == ncclSuccess);
        CHECK(ncclCommAbort(c) == ncclSuccess);
      });
    for (auto& t : threads) t.join();
    CHECK(count_lines("ncclCommAbort comm=stub") == 2);
    CHECK(count_lines("ncclCommDestroy") == 0);
  }

  TEST_CASE("a communicator this layer did not make goes to NCCL unchanged") {
    stub_clear();
    using init_fn = ncclResult_t (*)(ncclComm_t*, int, ncclUniqueId, int);
    auto stub_init = reinterpret_cast<init_fn>(::dlsym(stub(), "ncclCommInitRank"));
    REQUIRE(reinterpret_cast<void*>(stub_init) != nullptr);
    ncclUniqueId any{};
    ncclComm_t foreign = nullptr;
    REQUIRE(stub_init(&foreign, 1, any, 0) == ncclSuccess);
    int count = 0;
    CHECK(ncclCommCount(foreign, &count) == ncclSuccess);
    CHECK(count == 1);
    float x = 1.0f;
    CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, foreign, nullptr) == ncclSuccess);  // not served: not ours
    CHECK(lines_with({"ncclAllReduce", "comm=stub0/1", "count=1 dtype=7"}).size() == 1);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclSend(&x, 1, ncclFloat32, 0, foreign, nullptr) == ncclSuccess);
    CHECK(lines_with({"ncclSend"}).empty());  // deferred to the group's NCCL part
    CHECK(ncclGroupEnd() == ncclSuccess);
    CHECK(lines_with({"ncclSend", "comm=stub0/1"}).size() == 1);
    CHECK(rocenante_nccl_describe(foreign, nullptr, 0) == -1);
    CHECK(ncclCommDestroy(foreign) == ncclSuccess);
    CHECK(lines_with({"ncclCommDestroy comm=stub0/1"}).size() == 1);
  }

  TEST_CASE("ncclCommShrink needs NCCL's communicator; once it exists the shrunk communicator is NCCL's") {
    stub_clear();
    run_ranks(2, [&](int r, ncclComm_t c) {
      int exclude = 1;
      ncclComm_t small = nullptr;
      CHECK(ncclCommShrink(c, &exclude, 1, &small, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidUsage);
      CHECK(last_error().find("ROCENANTE_NCCL_DISABLE=1") != std::string::npos);
      int v = 0;
      CHECK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, c, nullptr) == ncclSuccess);
      if (r == 0) {
        CHECK(ncclCommShrink(c, &exclude, 1, &small, nullptr, NCCL_SHRINK_DEFAULT) == ncclSuccess);
        CHECK(lines_with({"ncclCommShrink", "comm=stub0/2", "count=1"}).size() == 1);
        CHECK(rocenante_nccl_describe(small, nullptr, 0) == -1);  // NCCL's own
        CHECK(ncclCommDestroy(small) == ncclSuccess);
      }
    });
  }

  TEST_CASE("an empty call (count 0) is done at once on every rank, and NCCL is never asked") {
    stub_clear();
    run_ranks(3, [&](int, ncclComm_t c) {
      CHECK(ncclAllGather(nullptr, nullptr, 0, ncclFloat32, c, nullptr) == ncclSuccess);  // nccl-tests' 8 B at 4 ranks
      CHECK(ncclAllReduce(nullptr, nullptr, 0, ncclInt64, ncclMax, c, nullptr) == ncclSuccess);
      ncclResult_t async = ncclInternalError;
      CHECK(ncclCommGetAsyncError(c, &async) == ncclSuccess);
      CHECK(async == ncclSuccess);
    }, {0, 0, 0});  // ranks sharing a GPU: NCCL could not have answered
    CHECK(stub_log().find("ncclAll") == std::string::npos);
  }

  TEST_CASE("ncclMemAlloc and ncclMemFree are NCCL's where NCCL loads") {
    stub_clear();
    void* p = nullptr;
    REQUIRE(ncclMemAlloc(&p, 4096) == ncclSuccess);
    CHECK(lines_with({"ncclMemAlloc size=4096"}).size() == 1);
    CHECK(ncclMemFree(p) == ncclSuccess);
    CHECK(lines_with({"ncclMemFree ptr=" + ptr(p)}).size() == 1);
  }

  TEST_CASE("ncclGetErrorString and ncclGetLastError name this layer") {
    CHECK(std::string(ncclGetErrorString(ncclRemoteError)).find("RoCEnante NCCL layer") != std::string::npos);
    ncclComm_t c = nullptr;
    ncclUniqueId id{};
    CHECK(ncclCommInitRank(&c, 1, id, 0) == ncclInvalidArgument);
    CHECK(last_error().rfind("NCCL layer: ", 0) == 0);
  }
}

// ================================================================================================================
TEST_SUITE("layer.fault") {
  TEST_CASE("a library communicator that fails on one rank makes every rank forward everything") {
    stub_clear();
    run_ranks(3, [&](int r, ncclComm_t c) {
      CHECK(describe(c).find("served here: nothing") != std::string::npos);
      CHECK(describe(c).find("failed on rank 1") != std::string::npos);
      CHECK(rocenante_nccl_route(c, 0, 16, ncclFloat32, ncclSum) == static_cast<int>(route::disabled));
      float x[4] = {1, 2, 3, 4};
      CHECK(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, c, nullptr) == ncclSuccess);
      CHECK(lines_with({"ncclAllReduce", "comm=stub" + std::to_string(r) + "/3", "count=4 dtype=7"}).size() == 1);
    });
  }
}

TEST_SUITE("layer.zero") {
  TEST_CASE("ROCENANTE_NCCL_MAX_BYTES=0 serves nothing: every call is forwarded") {
    stub_clear();
    run_ranks(2, [&](int r, ncclComm_t c) {
      CHECK(describe(c).find("ROCENANTE_NCCL_MAX_BYTES=0") != std::string::npos);
      float x = 1.0f;
      CHECK(ncclAllGather(&x, &x, 1, ncclFloat32, c, nullptr) == ncclSuccess);
      CHECK(lines_with({"ncclAllGather", "comm=stub" + std::to_string(r) + "/2"}).size() == 1);
    });
  }
}

TEST_SUITE("layer.bad_env") {
  TEST_CASE("a malformed ROCENANTE_NCCL_MAX_BYTES fails initialisation on every rank, naming it") {
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    std::vector<std::thread> threads;
    std::vector<ncclResult_t> rs(2, ncclSuccess);
    std::vector<std::string> why(2);
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        rocenante_nccl_test_set_device(r);
        ncclComm_t c = nullptr;
        rs[r] = ncclCommInitRank(&c, 2, id, r);
        why[r] = last_error();
        if (c != nullptr) (void)ncclCommDestroy(c);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      CHECK(rs[r] == ncclInvalidUsage);
      CHECK(why[r].find("ROCENANTE_NCCL_MAX_BYTES='lots'") != std::string::npos);
    }
  }
}

TEST_SUITE("layer.disable") {
  TEST_CASE("ROCENANTE_NCCL_DISABLE=1 forwards every call with its arguments, NCCL's ids and communicators included") {
    stub_clear();
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    CHECK(std::string(id.internal, 6) == "STUBID");
    ncclComm_t c = nullptr;
    REQUIRE(ncclCommInitRank(&c, 1, id, 0) == ncclSuccess);
    CHECK(rocenante_nccl_describe(c, nullptr, 0) == -1);  // NCCL's communicator itself
    CHECK(lines_with({"ncclCommInitRank nranks=1 rank=0 id=STUBID"}).size() == 1);
    float x[8] = {};
    const auto s = reinterpret_cast<cudaStream_t>(0x4242);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclAllReduce(x, x + 4, 4, ncclFloat32, ncclSum, c, s) == ncclSuccess);  // what the layer would serve
    CHECK(ncclGroupEnd() == ncclSuccess);
    CHECK(lines_with({"ncclAllReduce send=" + ptr(x) + " recv=" + ptr(x + 4) + " count=4 dtype=7 comm=stub0/1 stream=" +
                      ptr(s) + " op=0"}).size() == 1);
    CHECK(count_lines("ncclGroupStart") == 1);
    CHECK(ncclAllGather(x, x, 1, ncclBfloat16, c, s) == ncclSuccess);
    CHECK(lines_with({"ncclAllGather", "count=1 dtype=9", "comm=stub0/1"}).size() == 1);
    CHECK(ncclCommDestroy(c) == ncclSuccess);
    CHECK(count_lines("ncclCommDestroy comm=stub0/1") == 1);
    // An id of the layer's (a rank where DISABLE is not set made it) is refused here, naming the variable.
    rocenante::nccl_layer::id_fields f;
    REQUIRE(rocenante::nccl_layer::parse_address("127.0.0.1", f));
    f.port = 1;
    const auto bytes = rocenante::nccl_layer::encode(f);
    std::memcpy(id.internal, bytes.data(), sizeof id.internal);
    CHECK(ncclCommInitRank(&c, 1, id, 0) == ncclInvalidUsage);
    CHECK(last_error().find("ROCENANTE_NCCL_DISABLE") != std::string::npos);
  }
}

TEST_SUITE("layer.self") {
  TEST_CASE("the layer refuses itself as the real NCCL: it serves, and a forwarded call fails naming the file") {
    int v = 0;
    REQUIRE(ncclGetVersion(&v) == ncclSuccess);
    CHECK(v == NCCL_VERSION_CODE);  // no real NCCL: the version of the ABI it implements
    run_ranks(2, [&](int r, ncclComm_t c) {
      CHECK(served_round<float>(r, 2, c, 10).empty());
      int x = 0;
      CHECK(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, c, nullptr) == ncclSystemError);
      CHECK(last_error().find("is this layer itself") != std::string::npos);
    });
    // Without a real NCCL, ncclMemAlloc gives the layer's own device memory (host memory in this test build).
    void* p = nullptr;
    REQUIRE(ncclMemAlloc(&p, 256) == ncclSuccess);
    std::memset(p, 7, 256);
    CHECK(ncclMemFree(p) == ncclSuccess);
  }
}

TEST_SUITE("layer.ipv6") {
  TEST_CASE("an id naming an IPv6 address (ROCENANTE_NCCL_ADDR=::1) brings the ranks together over IPv6") {
    {
      const int s = ::socket(AF_INET6, SOCK_STREAM, 0);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_loopback;
      const bool ok = s >= 0 && ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      if (s >= 0) ::close(s);
      if (!ok) {
        std::printf("SKIP: this host cannot bind the IPv6 loopback address ::1\n");
        std::fflush(stdout);
        std::_Exit(77);
      }
    }
    ncclUniqueId id;
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    const auto d = rocenante::nccl_layer::decode(id.internal);
    REQUIRE(d.fields.has_value());
    CHECK(d.fields->family == 6);
    CHECK(d.fields->address_text() == "::1");
    std::vector<std::string> problems(3);
    run_ranks(3, [&](int r, ncclComm_t c) { problems[r] = served_round<float>(r, 3, c, 64); });
    for (const auto& p : problems) CHECK(p.empty());
  }
}
