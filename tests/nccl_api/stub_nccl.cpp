// tests/nccl_api/stub_nccl.cpp — a stand-in for the real libnccl in the layer's tests (ROCENANTE_NCCL_LIBRARY points
// at it): every function records its call and its arguments and returns ncclSuccess. It computes nothing and writes
// no buffer, so a test can never take a result from it: it only shows what the layer forwarded, with which
// arguments, in which order. Its communicators are STUB objects, its ids start with "STUBID", its version is 2.99.99.
//
// The log: one line per call, "name key=value ...", read with stub_nccl_log() (all lines, newline-separated) and
// emptied with stub_nccl_clear(). Thread-safe: the tests' ranks are threads.
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

namespace {

std::mutex mu;
std::string log_text;
int ids_made = 0;
int ops_made = 0;

struct stub_comm {
  std::uint64_t magic = 0x4d4d4f4342555453ull;  // "STUBCOMM"
  int rank = -1, nranks = 0;
  char id[16] = {};
};

std::string ptr(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}
std::string comm_text(ncclComm_t c) {
  const auto* s = reinterpret_cast<const stub_comm*>(c);
  if (s == nullptr) return "null";
  if (s->magic != 0x4d4d4f4342555453ull) return "foreign:" + ptr(c);
  return "stub" + std::to_string(s->rank) + "/" + std::to_string(s->nranks);
}
void record(const std::string& line) {
  std::lock_guard lock(mu);
  log_text += line + "\n";
}
std::string coll(const char* name, const void* send, const void* recv, size_t count, ncclDataType_t dt, ncclComm_t c,
                 cudaStream_t s) {
  return std::string(name) + " send=" + ptr(send) + " recv=" + ptr(recv) + " count=" + std::to_string(count) +
         " dtype=" + std::to_string(static_cast<int>(dt)) + " comm=" + comm_text(c) + " stream=" + ptr(s);
}

ncclResult_t init(const char* name, ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank, const ncclConfig_t* config) {
  auto* s = new stub_comm;
  s->rank = rank;
  s->nranks = nranks;
  std::memcpy(s->id, id.internal, sizeof s->id);
  *comm = reinterpret_cast<ncclComm_t>(s);
  std::string line = std::string(name) + " nranks=" + std::to_string(nranks) +
                     " rank=" + std::to_string(rank) + " id=" + std::string(id.internal, strnlen(id.internal, 16));
  line += config != nullptr ? " blocking=" + std::to_string(config->blocking) : std::string(" config=null");
  record(line);
  return ncclSuccess;
}

}  // namespace

extern "C" {

const char* stub_nccl_log() {
  thread_local std::string copy;
  std::lock_guard lock(mu);
  copy = log_text;
  return copy.c_str();
}
void stub_nccl_clear() {
  std::lock_guard lock(mu);
  log_text.clear();
}

ncclResult_t ncclGetVersion(int* v) {
  *v = 29999;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::lock_guard lock(mu);
  std::snprintf(id->internal, sizeof id->internal, "STUBID%d", ++ids_made);
  log_text += std::string("ncclGetUniqueId id=") + id->internal + "\n";
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  return init("ncclCommInitRankConfig", comm, nranks, id, rank, config);
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return init("ncclCommInitRank", comm, nranks, id, rank, nullptr);
}
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int*) {
  for (int i = 0; i < ndev; ++i) {
    ncclUniqueId id{};
    std::strcpy(id.internal, "STUBALL");
    init("ncclCommInitAll", comm + i, ndev, id, i, nullptr);
  }
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
  record("ncclCommDestroy comm=" + comm_text(c));
  delete reinterpret_cast<stub_comm*>(c);
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) {
  record("ncclCommAbort comm=" + comm_text(c));
  delete reinterpret_cast<stub_comm*>(c);
  return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t c) {
  record("ncclCommFinalize comm=" + comm_text(c));
  return ncclSuccess;
}
ncclResult_t ncclCommRevoke(ncclComm_t c, int flags) {
  record("ncclCommRevoke comm=" + comm_text(c) + " flags=" + std::to_string(flags));
  return ncclSuccess;
}
ncclResult_t ncclCommShrink(ncclComm_t c, int* exclude, int count, ncclComm_t* newcomm, ncclConfig_t*, int flags) {
  record("ncclCommShrink comm=" + comm_text(c) + " exclude=" + ptr(exclude) + " count=" + std::to_string(count) +
         " flags=" + std::to_string(flags));
  auto* s = new stub_comm;
  s->rank = 0;
  s->nranks = 1;
  *newcomm = reinterpret_cast<ncclComm_t>(s);
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* e) {
  *e = ncclSuccess;
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t) { return "stub error"; }
const char* ncclGetLastError(ncclComm_t) { return "stub last error"; }
ncclResult_t ncclCommCount(const ncclComm_t c, int* n) {
  record("ncclCommCount comm=" + comm_text(c));
  *n = reinterpret_cast<const stub_comm*>(c)->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t c, int* d) {
  record("ncclCommCuDevice comm=" + comm_text(c));
  *d = 0;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t c, int* r) {
  record("ncclCommUserRank comm=" + comm_text(c));
  *r = reinterpret_cast<const stub_comm*>(c)->rank;
  return ncclSuccess;
}
ncclResult_t ncclCommRegister(const ncclComm_t c, void* buff, size_t size, void** handle) {
  *handle = new int(7);
  record("ncclCommRegister comm=" + comm_text(c) + " buff=" + ptr(buff) + " size=" + std::to_string(size) + " handle=" + ptr(*handle));
  return ncclSuccess;
}
ncclResult_t ncclCommDeregister(const ncclComm_t c, void* handle) {
  record("ncclCommDeregister comm=" + comm_text(c) + " handle=" + ptr(handle));
  delete static_cast<int*>(handle);
  return ncclSuccess;
}
ncclResult_t ncclCommWindowRegister(ncclComm_t c, void* buff, size_t size, ncclWindow_t* win, int flags) {
  *win = reinterpret_cast<ncclWindow_t>(buff);
  record("ncclCommWindowRegister comm=" + comm_text(c) + " buff=" + ptr(buff) + " size=" + std::to_string(size) +
         " flags=" + std::to_string(flags));
  return ncclSuccess;
}
ncclResult_t ncclCommWindowDeregister(ncclComm_t c, ncclWindow_t win) {
  record("ncclCommWindowDeregister comm=" + comm_text(c) + " win=" + ptr(win));
  return ncclSuccess;
}
ncclResult_t ncclMemAlloc(void** p, size_t size) {
  *p = ::operator new(size);
  record("ncclMemAlloc size=" + std::to_string(size));
  return ncclSuccess;
}
ncclResult_t ncclMemFree(void* p) {
  record("ncclMemFree ptr=" + ptr(p));
  ::operator delete(p);
  return ncclSuccess;
}
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t dt, ncclScalarResidence_t residence, ncclComm_t c) {
  std::string value = "?";
  if (residence == ncclScalarHostImmediate && dt == ncclFloat32) value = std::to_string(*static_cast<float*>(scalar));
  {
    std::lock_guard lock(mu);
    *op = static_cast<ncclRedOp_t>(static_cast<int>(ncclNumOps) + ops_made++);
  }
  record("ncclRedOpCreatePreMulSum op=" + std::to_string(static_cast<int>(*op)) + " value=" + value + " dtype=" +
         std::to_string(static_cast<int>(dt)) + " residence=" + std::to_string(static_cast<int>(residence)) + " comm=" + comm_text(c));
  return ncclSuccess;
}
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c) {
  record("ncclRedOpDestroy op=" + std::to_string(static_cast<int>(op)) + " comm=" + comm_text(c));
  return ncclSuccess;
}
ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t c,
                        cudaStream_t s) {
  record(coll("ncclReduce", send, recv, count, dt, c, s) + " op=" + std::to_string(static_cast<int>(op)) + " root=" + std::to_string(root));
  return ncclSuccess;
}
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t s) {
  record(coll("ncclBcast", buff, buff, count, dt, c, s) + " root=" + std::to_string(root));
  return ncclSuccess;
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t s) {
  record(coll("ncclBroadcast", send, recv, count, dt, c, s) + " root=" + std::to_string(root));
  return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
  record(coll("ncclAllReduce", send, recv, count, dt, c, s) + " op=" + std::to_string(static_cast<int>(op)));
  return ncclSuccess;
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t s) {
  record(coll("ncclReduceScatter", send, recv, count, dt, c, s) + " op=" + std::to_string(static_cast<int>(op)));
  return ncclSuccess;
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclComm_t c, cudaStream_t s) {
  record(coll("ncclAllGather", send, recv, count, dt, c, s));
  return ncclSuccess;
}
ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclComm_t c, cudaStream_t s) {
  record(coll("ncclAlltoAll", send, recv, count, dt, c, s));
  return ncclSuccess;
}
ncclResult_t ncclGather(const void* send, void* recv, size_t count, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t s) {
  record(coll("ncclGather", send, recv, count, dt, c, s) + " root=" + std::to_string(root));
  return ncclSuccess;
}
ncclResult_t ncclScatter(const void* send, void* recv, size_t count, ncclDataType_t dt, int root, ncclComm_t c, cudaStream_t s) {
  record(coll("ncclScatter", send, recv, count, dt, c, s) + " root=" + std::to_string(root));
  return ncclSuccess;
}
ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t s) {
  record(coll("ncclSend", send, nullptr, count, dt, c, s) + " peer=" + std::to_string(peer));
  return ncclSuccess;
}
ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t c, cudaStream_t s) {
  record(coll("ncclRecv", nullptr, recv, count, dt, c, s) + " peer=" + std::to_string(peer));
  return ncclSuccess;
}
ncclResult_t ncclGroupStart() {
  record("ncclGroupStart");
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  record("ncclGroupEnd");
  return ncclSuccess;
}
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  info->estimatedTime = 42.0f;
  record("ncclGroupSimulateEnd");
  return ncclSuccess;
}

}  // extern "C"
