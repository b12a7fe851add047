// tools/gpu/mpi-stand-in/mpi.cpp — mpi.h's calls over bootstrap::tcp (bootstrap/tcp.hpp), for running nccl-tests'
// MPI build where no MPI is installed (mpi.h says what it is for). Each process is a rank of bootstrap::tcp's
// from_env(): ROCENANTE_BOOTSTRAP=host:port with ROCENANTE_RANK / ROCENANTE_WORLD_SIZE (or torchrun's variables).
// Every call is one all_gather through rank 0 (bounded by ROCENANTE_BOOTSTRAP_TIMEOUT_MS); reductions are done on
// every rank in rank order, so every rank gets the same bytes. A failure prints why and exits the process (an MPI
// error handler's default), so that no rank waits for a dead one beyond the bootstrap's bound.
//
// Built by tools/gpu/nccl-layer.sh: g++ -std=c++20 -O2 -shared -fPIC -Iinclude -Itools/gpu/mpi-stand-in
// -isystem /usr/local/cuda/include tools/gpu/mpi-stand-in/mpi.cpp -o DIR/lib/libmpi.so
#include "mpi.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <rocenante/bootstrap/tcp.hpp>

namespace {

std::unique_ptr<rocenante::bootstrap::tcp> world;

[[noreturn]] void die(const char* what, const std::string& why) {
  std::fprintf(stderr, "mpi-stand-in: %s: %s\n", what, why.c_str());
  std::fflush(stderr);
  std::_Exit(3);
}

rocenante::bootstrap::tcp& w(const char* what) {
  if (!world) die(what, "MPI_Init was not called");
  return *world;
}

std::size_t type_bytes(MPI_Datatype t) {
  switch (t) {
    case MPI_BYTE: case MPI_CHAR: return 1;
    case MPI_INT: case MPI_FLOAT: return 4;
    case MPI_LONG: case MPI_LONG_LONG: case MPI_INT64_T: case MPI_UNSIGNED_LONG: case MPI_DOUBLE: return 8;
    default: return 0;
  }
}

template <class T>
void reduce_into(T* acc, const T* x, int count, MPI_Op op) {
  for (int i = 0; i < count; ++i) {
    if (op == MPI_SUM) acc[i] += x[i];
    else if (op == MPI_MAX) acc[i] = x[i] > acc[i] ? x[i] : acc[i];
    else acc[i] = x[i] < acc[i] ? x[i] : acc[i];
  }
}

/// Every rank's `bytes` from `send`, in rank order.
std::vector<unsigned char> gather_all(const void* send, std::size_t bytes, const char* what) {
  auto& b = w(what);
  std::vector<unsigned char> all(bytes * static_cast<std::size_t>(b.size()));
  try {
    b.all_gather(send, all.data(), bytes);
  } catch (const std::exception& e) {
    die(what, e.what());
  }
  return all;
}

void check_comm(MPI_Comm c, const char* what) {
  if (c != MPI_COMM_WORLD) die(what, "only MPI_COMM_WORLD exists here (MPI_Comm_split keeps every rank together)");
}

}  // namespace

extern "C" {

int MPI_Init(int*, char***) {
  try {
    world = std::make_unique<rocenante::bootstrap::tcp>(rocenante::bootstrap::tcp::from_env());
  } catch (const std::exception& e) {
    die("MPI_Init", e.what());
  }
  return MPI_SUCCESS;
}

int MPI_Finalize(void) {
  if (world) world->barrier();
  world.reset();
  return MPI_SUCCESS;
}

int MPI_Comm_size(MPI_Comm c, int* size) {
  check_comm(c, "MPI_Comm_size");
  *size = w("MPI_Comm_size").size();
  return MPI_SUCCESS;
}

int MPI_Comm_rank(MPI_Comm c, int* rank) {
  check_comm(c, "MPI_Comm_rank");
  *rank = w("MPI_Comm_rank").rank();
  return MPI_SUCCESS;
}

int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm* newcomm) {
  check_comm(c, "MPI_Comm_split");
  const std::int32_t mine[2] = {color, key};
  const auto all = gather_all(mine, sizeof mine, "MPI_Comm_split");
  const auto* v = reinterpret_cast<const std::int32_t*>(all.data());
  const int n = w("MPI_Comm_split").size();
  for (int q = 0; q < n; ++q)
    if (v[2 * q] != v[0] || (q > 0 && v[2 * q + 1] < v[2 * q - 1]))
      die("MPI_Comm_split", "the ranks asked for several colors or a new order; this stand-in keeps one communicator "
                            "(leave NCCL_TESTS_SPLIT and NCCL_TESTS_SPLIT_MASK unset)");
  *newcomm = MPI_COMM_WORLD;
  return MPI_SUCCESS;
}

int MPI_Comm_free(MPI_Comm* c) {
  *c = 0;
  return MPI_SUCCESS;
}

int MPI_Barrier(MPI_Comm c) {
  check_comm(c, "MPI_Barrier");
  try {
    w("MPI_Barrier").barrier();
  } catch (const std::exception& e) {
    die("MPI_Barrier", e.what());
  }
  return MPI_SUCCESS;
}

int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm c) {
  check_comm(c, "MPI_Bcast");
  const std::size_t bytes = type_bytes(type) * static_cast<std::size_t>(count);
  const auto all = gather_all(buf, bytes, "MPI_Bcast");
  std::memcpy(buf, all.data() + static_cast<std::size_t>(root) * bytes, bytes);
  return MPI_SUCCESS;
}

int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm c) {
  check_comm(c, "MPI_Allreduce");
  const std::size_t elem = type_bytes(type), bytes = elem * static_cast<std::size_t>(count);
  if (elem == 0 || (op != MPI_SUM && op != MPI_MAX && op != MPI_MIN)) die("MPI_Allreduce", "a type or operator this stand-in lacks");
  const auto all = gather_all(send == MPI_IN_PLACE ? recv : send, bytes, "MPI_Allreduce");
  const int n = w("MPI_Allreduce").size();
  std::vector<unsigned char> acc(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(bytes));
  for (int q = 1; q < n; ++q) {
    const unsigned char* x = all.data() + static_cast<std::size_t>(q) * bytes;
    switch (type) {
      case MPI_INT: reduce_into(reinterpret_cast<std::int32_t*>(acc.data()), reinterpret_cast<const std::int32_t*>(x), count, op); break;
      case MPI_FLOAT: reduce_into(reinterpret_cast<float*>(acc.data()), reinterpret_cast<const float*>(x), count, op); break;
      case MPI_DOUBLE: reduce_into(reinterpret_cast<double*>(acc.data()), reinterpret_cast<const double*>(x), count, op); break;
      case MPI_UNSIGNED_LONG: reduce_into(reinterpret_cast<std::uint64_t*>(acc.data()), reinterpret_cast<const std::uint64_t*>(x), count, op); break;
      case MPI_LONG: case MPI_LONG_LONG: case MPI_INT64_T:
        reduce_into(reinterpret_cast<std::int64_t*>(acc.data()), reinterpret_cast<const std::int64_t*>(x), count, op);
        break;
      default: reduce_into(reinterpret_cast<std::uint8_t*>(acc.data()), x, count * static_cast<int>(elem), op); break;
    }
  }
  std::memcpy(recv, acc.data(), bytes);
  return MPI_SUCCESS;
}

int MPI_Allgather(const void* send, int scount, MPI_Datatype stype, void* recv, int rcount, MPI_Datatype rtype, MPI_Comm c) {
  check_comm(c, "MPI_Allgather");
  const std::size_t bytes = type_bytes(rtype) * static_cast<std::size_t>(rcount);
  const int me = w("MPI_Allgather").rank();
  const void* mine = send == MPI_IN_PLACE ? static_cast<unsigned char*>(recv) + static_cast<std::size_t>(me) * bytes : send;
  if (send != MPI_IN_PLACE && type_bytes(stype) * static_cast<std::size_t>(scount) != bytes)
    die("MPI_Allgather", "send and receive sizes differ");
  const auto all = gather_all(mine, bytes, "MPI_Allgather");
  std::memcpy(recv, all.data(), all.size());
  return MPI_SUCCESS;
}

int MPI_Gather(const void* send, int scount, MPI_Datatype stype, void* recv, int rcount, MPI_Datatype rtype, int root, MPI_Comm c) {
  check_comm(c, "MPI_Gather");
  const std::size_t bytes = type_bytes(stype) * static_cast<std::size_t>(scount);
  const auto all = gather_all(send, bytes, "MPI_Gather");
  if (w("MPI_Gather").rank() == root) {
    if (type_bytes(rtype) * static_cast<std::size_t>(rcount) != bytes) die("MPI_Gather", "send and receive sizes differ");
    std::memcpy(recv, all.data(), all.size());
  }
  return MPI_SUCCESS;
}

int MPI_Abort(MPI_Comm, int code) {
  std::fprintf(stderr, "mpi-stand-in: MPI_Abort(%d)\n", code);
  std::_Exit(code == 0 ? 1 : code);
}

}  // extern "C"
