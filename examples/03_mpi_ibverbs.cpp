// examples/03_mpi_ibverbs.cpp — ranks as processes started by mpirun, over RDMA (ibverbs, RoCE): the set-up an
// inference engine copies. MPI starts the ranks and carries the set-up exchange (bootstrap::mpi); the ranks decide
// the transport together at start-up (host::selected_communicator: ROCENANTE_TRANSPORT, unset = auto, which takes
// ibverbs when every rank can use it); then all-reduces of several sizes and dtypes with one_shot, ring and the
// size-based auto choice, and an all-gather, each checked against the exact result and compared byte for byte
// across ranks (a hash of every output, gathered with MPI); then an ordered teardown. CPU host executor: no GPU is
// needed (this example has no GPU path).
//
//   mpirun -np 2 -H node0,node1 -x ROCENANTE_IB_HCA=mlx5_0 build/examples/03_mpi_ibverbs
//       one rank per node (ROCENANTE_IB_HCA picks the NIC; unset: the first ACTIVE device). Never run on RDMA
//       hardware so far.
//   mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 tests/softroce/rank-env.sh build/examples/03_mpi_ibverbs
//       inside the Soft-RoCE VM (rank r uses rxe<r>): what the softroce test example_03_mpirun_4_ranks runs
//   build/examples/03_mpi_ibverbs
//       without mpirun: a world of one (the examples suite runs this)
//
// Rank 0 prints the start-up decision and one line per collective; every rank ends with "rank r/n: PASS" (exit 0)
// or "rank r/n: FAIL" (exit 1). A set-up error is thrown on every rank alike (the decision is a vote): each rank
// prints it and the job aborts.
#define OMPI_SKIP_MPICXX 1  // the C API only
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <rocenante/bootstrap/mpi.hpp>
#include <rocenante/host/select.hpp>
#include <rocenante/rocenante.hpp>

// ---- configuration ----------------------------------------------------------------------------------------
constexpr std::size_t  counts[]       = {1, 4099, 262144};  // elements per rank: one; not a multiple of the 16-byte
                                                            // packet; 1 MiB of fp32 (auto picks ring there)
constexpr std::size_t  gather_count   = 1000;               // all-gather: elements per rank
constexpr std::size_t  capacity_bytes = 262144 * 4;         // largest input of one rank, the same on every rank
constexpr std::uint64_t timeout_ms    = 20000;              // bound on every wait for a peer
// Rank r contributes a small integer in [-4, 4] at element i: every sum of up to 16 ranks is exact in fp32, fp16
// and bf16, so the right answer has exactly one encoding and is the same bytes on every rank.
// ---------------------------------------------------------------------------------------------------------------

using namespace rocenante;

namespace {

int input(int rank, std::size_t i) { return static_cast<int>((static_cast<std::size_t>(rank) * 7 + i * 3) % 9) - 4; }

template <class T>
T encode(int v) { return reduce::sum<T>::from_accum(static_cast<float>(v)); }

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "fp32" : std::is_same_v<T, __half> ? "fp16" : "bf16";
}

std::uint64_t fnv1a(const void* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

/// Collective over MPI_COMM_WORLD: true when every rank's `bytes` hash the same.
bool identical_on_every_rank(const void* p, std::size_t bytes, int size) {
  const std::uint64_t mine = fnv1a(p, bytes);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
  MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (std::uint64_t h : all)
    if (h != mine) return false;
  return true;
}

struct runner {
  host::selected_communicator& comm;
  int rank, size;
  int failures = 0;

  /// Every rank calls with the same arguments. `algo`: "one_shot", "ring" or "auto" (the configured choice).
  template <class T>
  void all_reduce(std::size_t count, const std::string& algo) {
    std::vector<T> in(count), out(count), expect(count);
    for (std::size_t i = 0; i < count; ++i) {
      in[i] = encode<T>(input(rank, i));
      int sum = 0;
      for (int q = 0; q < size; ++q) sum += input(q, i);
      expect[i] = encode<T>(sum);
    }
    std::memset(static_cast<void*>(out.data()), 0xff, count * sizeof(T));  // NaN bytes: nothing left to chance
    status st;
    std::string ran = algo;
    if (algo == "one_shot") {
      st = comm.all_reduce(in.data(), out.data(), count, algorithm::one_shot{});
    } else if (algo == "ring") {
      st = comm.all_reduce(in.data(), out.data(), count, algorithm::ring{});
    } else {
      st = comm.all_reduce(in.data(), out.data(), count);  // ROCENANTE_ALGO (auto: by size and rank count)
      ran = comm.algorithm_for(count * sizeof(T)) == algorithm::algo::ring ? "auto -> ring" : "auto -> one_shot";
    }
    report("all_reduce", type_name<T>(), count, ran, st, out.data(), expect.data(), count * sizeof(T));
  }

  template <class T>
  void all_gather(std::size_t count) {
    std::vector<T> in(count), out(count * size), expect(count * size);
    for (std::size_t i = 0; i < count; ++i) in[i] = encode<T>(input(rank, i));
    for (int q = 0; q < size; ++q)
      for (std::size_t i = 0; i < count; ++i) expect[q * count + i] = encode<T>(input(q, i));
    std::memset(static_cast<void*>(out.data()), 0xff, out.size() * sizeof(T));
    const status st = comm.all_gather(in.data(), out.data(), count);
    report("all_gather", type_name<T>(), count, "one_shot", st, out.data(), expect.data(), out.size() * sizeof(T));
  }

  void report(const char* what, const char* type, std::size_t count, const std::string& algo, status st,
              const void* out, const void* expect, std::size_t bytes) {
    const std::size_t elem = std::strcmp(type, "fp32") == 0 ? 4 : 2;
    std::size_t wrong = 0;
    for (std::size_t j = 0; j < bytes; j += elem)
      wrong += std::memcmp(static_cast<const char*>(out) + j, static_cast<const char*>(expect) + j, elem) != 0;
    const bool same = identical_on_every_rank(out, bytes, size);  // every rank takes part, whatever happened
    const bool ok = st == status::ok && wrong == 0 && same;
    if (!ok) {
      ++failures;
      std::printf("rank %d: %s %s %zu %s: status %s, %zu wrong element(s)%s%s%s\n", rank, what, type, count,
                  algo.c_str(), to_string(st), wrong, same ? "" : ", ranks hold different bytes",
                  st == status::ok ? "" : ": ", comm.last_error().c_str());
    } else if (rank == 0) {
      std::printf("%-10s %-4s %6zu elements  %-18s exact, identical bytes on all %d ranks\n", what, type, count,
                  algo.c_str(), size);
    }
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int failures = 0;
  try {
    bootstrap::mpi boot;  // duplicates MPI_COMM_WORLD: set-up traffic never meets the application's messages
    options opts;
    opts.capacity_bytes = capacity_bytes;
    opts.timeout_ns = timeout_ms * 1'000'000;
    // Collective: probe, vote, build, connectivity check, start-up test collective. Throws rocenante::error on
    // every rank alike when no transport is usable by every rank (or a forced one failed on some rank).
    host::selected_communicator comm(boot, opts);
    if (rank == 0) {
      std::printf("decision: %s\n", comm.selected().summary().c_str());
      std::fflush(stdout);
    }

    runner run{comm, rank, size};
    for (std::size_t n : counts)
      for (const char* a : {"one_shot", "ring", "auto"}) run.all_reduce<float>(n, a);
    for (std::size_t n : counts)
      for (const char* a : {"one_shot", "ring", "auto"}) run.all_reduce<__nv_bfloat16>(n, a);
    run.all_reduce<__half>(counts[1], "one_shot");
    run.all_reduce<__half>(counts[1], "ring");
    run.all_gather<float>(gather_count);
    run.all_gather<__nv_bfloat16>(gather_count);
    failures = run.failures;

    const host::health h = comm.check_health();
    if (!h.ok()) {
      ++failures;
      std::printf("rank %d: communicator unhealthy: %s\n", rank, h.message.c_str());
    }
    // Teardown: no rank deregisters its memory while a peer may still be inside the last collective.
    boot.barrier();
  } catch (const std::exception& e) {  // set-up: rocenante::error (or MPI's, through bootstrap_error)
    std::printf("rank %d/%d: FAIL: %s\n", rank, size, e.what());
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);  // peers may be waiting in an exchange this rank will never enter
  }
  // The communicator and the bootstrap are gone (end of the scope above); MPI is still up for the verdict.
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  std::printf("rank %d/%d: %s\n", rank, size, total == 0 ? "PASS" : "FAIL");
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
