// benchmarks/perf/host_sweep.hpp — the host executor's measurement, generic over the communicator and the
// bootstrap: one row (warm-up, timed iterations after a barrier, the byte-exact check, every rank's samples and
// verdict gathered through the bootstrap) and the whole sweep. Used by rocenante_perf.cpp (ranks as threads,
// host::communicator<loopback>) and perf/process.cpp (one rank per process, host::selected_communicator).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <rocenante/rocenante.hpp>

#include "perf.hpp"

namespace rocenante::perf {

// ---- one row ----------------------------------------------------------------------------------------------

inline double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Every rank calls with the same arguments. Returns the row, the same on every rank: samples, statistics, status
/// and #wrong are gathered through the bootstrap. `Comm` is host::communicator<Transport> or
/// host::selected_communicator (the calls name the algorithm with a tag, which both accept).
template <class A, class T, class Comm, class Boot>
row measure(Comm& comm, Boot& boot, const config& cfg, std::uint64_t size, std::uint64_t seed) {
  const int n = boot.size(), me = boot.rank();
  const bool gather = cfg.coll == collective_kind::all_gather;
  row out_row;
  shape_row<T>(out_row, cfg.coll, n, size);
  out_row.algorithm = A::id;
  const std::uint64_t count = out_row.count, out_count = gather ? count * n : count;

  std::vector<T> in(count), out(out_count);
  for (std::uint64_t i = 0; i < count; ++i) in[i] = from_int<T>(input_value(seed, me, i));

  auto call = [&]() -> status {
    if (gather) {
      if constexpr (A::supports_all_gather) return comm.all_gather(in.data(), out.data(), count);  // one_shot
      return status::not_supported;
    }
    return comm.all_reduce(in.data(), out.data(), count, A{});
  };
  status first = status::ok;
  std::string why;
  auto note = [&](status s) {
    if (s != status::ok && first == status::ok) {
      first = s;
      why = comm.last_error();
    }
  };

  proxy_snapshot before, after;
  const bool proxied = proxy_now(comm, before);
  for (int w = 0; w < cfg.warmup; ++w) note(call());
  std::vector<double> mine(static_cast<std::size_t>(cfg.iters));
  for (int it = 0; it < cfg.iters; ++it) {
    boot.barrier();
    const double t0 = now_us();
    const status s = call();
    mine[it] = now_us() - t0;
    note(s);
  }

  // Check: one more collective into an output full of NaN bytes, then compare bytes with the expected bytes.
  std::vector<std::uint8_t> wrong_bits;
  if (cfg.check) {
    std::memset(static_cast<void*>(out.data()), 0xff, out_count * sizeof(T));
    boot.barrier();
    note(call());
    if (cfg.corrupt_rank == me) reinterpret_cast<unsigned char*>(out.data())[out_count * sizeof(T) - 1] ^= 1u;
    wrong_bits.assign((out_count + 7) / 8, 0);
    for (std::uint64_t j = 0; j < out_count; ++j) {
      const T expect = expected_value<T>(seed, n, count, j, gather);
      if (std::memcmp(&expect, &out[j], sizeof(T)) != 0) wrong_bits[j / 8] |= std::uint8_t(1u << (j % 8));
    }
  }

  // Gather every rank's samples, status, first error and wrong elements (through the bootstrap, so that a
  // multi-process backend works the same way).
  std::vector<double> all(static_cast<std::size_t>(n) * cfg.iters);
  boot.all_gather(mine.data(), all.data(), mine.size() * sizeof(double));
  gather_verdict(boot, out_row, first, why);
  if (cfg.check) out_row.wrong = count_wrong_anywhere(boot, wrong_bits);
  // After the gathers: every peer has finished the last call, so this rank's proxy has taken all its descriptors.
  if (proxied && proxy_now(comm, after))
    out_row.proxy = proxy_per_call(before, after, std::uint64_t(cfg.warmup) + std::uint64_t(cfg.iters) + (cfg.check ? 1 : 0));
  if (out_row.state != status::ok)  // what each rank's proxy had taken: a lost flag vs a descriptor never posted
    if (const std::string q = proxy_queue_state(comm); !q.empty()) std::printf("#   rank %d proxy: %s\n", boot.rank(), q.c_str());

  finish_row(out_row, all, n, cfg.iters, cfg.coll);
  return out_row;
}

// ---- the sweep, generic over communicator and bootstrap ---------------------------------------------------

/// One rank's whole sweep over a communicator that every rank has built. Every rank calls with the same
/// arguments; rank 0 prints each row as it completes (with the p99 column when `print_p99`). Rows are appended to
/// `rows` on rank 0, or on every rank when `rows_on_every_rank` (one process per rank: each has its own vector;
/// ranks as threads share one, which only rank 0 may touch).
template <class Comm, class Boot>
void sweep(Comm& comm, Boot& boot, const config& cfg, std::vector<row>& rows, bool rows_on_every_rank = false,
           bool print_p99 = false) {
  const auto sizes = sweep_sizes(cfg);
  std::uint64_t seed = 1;
  for (dtype t : cfg.dtypes) {
    for (algo a : cfg.algos) {
      for (std::uint64_t size : sizes) {
        ++seed;
        const std::uint64_t unit = (t == dtype::f32 ? 4 : 2) * (cfg.coll == collective_kind::all_gather ? boot.size() : 1);
        if (size < unit) continue;  // not one element per rank at this size
        row r;
        auto run_one = [&]<class T>(T*) {
          r = host::with_algorithm(a, [&]<class A>(A) { return measure<A, T>(comm, boot, cfg, size, seed); });
        };
        if (t == dtype::f32) run_one(static_cast<float*>(nullptr));
        else if (t == dtype::f16) run_one(static_cast<__half*>(nullptr));
        else run_one(static_cast<__nv_bfloat16*>(nullptr));
        if (boot.rank() == 0) print_row(r, cfg.coll, print_p99);
        if (boot.rank() == 0) print_proxy(r);
        if (boot.rank() == 0 && rows_on_every_rank)  // one rank per process: each rank's own message
          for (std::size_t q = 0; q < r.rank_errors.size(); ++q)
            if (!r.rank_errors[q].empty()) std::printf("#   rank %zu: %s\n", q, r.rank_errors[q].c_str());
        if (boot.rank() == 0 || rows_on_every_rank) rows.push_back(r);
        if (r.state != status::ok) return;  // every rank saw the same gathered status: stop together
      }
    }
  }
}

/// Ranks as threads: one host::communicator<Transport> per rank, then the sweep (rank 0 fills `rows`).
template <class Transport, class Boot>
void run_rank(Boot& boot, const config& cfg, std::vector<row>& rows) {
  options opts;
  opts.capacity_bytes = capacity_for(cfg);
  opts.timeout_ns = static_cast<std::uint64_t>(cfg.timeout_s * 1e9);
  if (cfg.call_post_max_bytes >= 0) opts.call_post_max_bytes = static_cast<std::uint64_t>(cfg.call_post_max_bytes);
  host::communicator<Transport> comm(boot, opts);
  sweep(comm, boot, cfg, rows);
}

}  // namespace rocenante::perf
