// tests/host/test_staging_transport.cpp — the `shared_staging` side of the transport contract, which the
// loopback never exercises: a test transport whose put_ptr() is one local staging buffer for every peer and
// whose signal() moves [off, off+bytes) into the peer's window before it publishes the flag (what a proxy or
// a NIC does). The algorithms must give the same bits over it, and every range they signal must lie inside
// the slot and be whole packets — an RDMA transport posts exactly that range. Also: a transport that differs
// between ranks fails set-up naming the field.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "reference_case.hpp"

using namespace rtest;

namespace {

/// Every signal() whose range is not inside the slot or not whole packets, over the whole program.
std::atomic<std::uint64_t> violations{0};
std::mutex first_violation_mu;
std::string first_violation;

void reset_violations() {
  violations = 0;
  std::lock_guard lock(first_violation_mu);
  first_violation.clear();
}

struct staging_handle {
  static constexpr bool shared_staging = true;

  transport::direct_handle windows;  // every rank's window, for the copy signal() makes
  std::byte* staging;                // this rank's staging buffer, laid out like a window

  int rank() const { return windows.rank(); }
  int ranks() const { return windows.ranks(); }
  memory_scope scope() const { return memory_scope::system; }
  const protocol::window_layout& layout() const { return windows.layout(); }
  std::byte* put_ptr(int, std::uint32_t slot, std::uint64_t off) { return staging + layout().data_offset(slot) + off; }
  const std::byte* recv_ptr(std::uint32_t slot, std::uint64_t off) const { return windows.recv_ptr(slot, off); }
  std::uint64_t* local_flag(std::uint64_t index) { return windows.local_flag(index); }
  void signal(int peer, std::uint32_t slot, std::uint64_t off, std::uint64_t bytes, std::uint64_t index,
              std::uint64_t value) {
    const protocol::window_layout& l = layout();
    const bool inside = slot < slot_count && off <= l.slot_bytes && bytes <= l.slot_bytes - off;
    const bool packets = off % packet_bytes == 0 && bytes % packet_bytes == 0;
    const bool peer_ok = peer >= 0 && peer < ranks() && peer != rank();
    if (!inside || !packets || !peer_ok) {
      if (violations++ == 0) {
        std::lock_guard lock(first_violation_mu);
        first_violation = "rank " + std::to_string(rank()) + " signalled peer " + std::to_string(peer) + " slot " +
                          std::to_string(slot) + " off " + std::to_string(off) + " bytes " + std::to_string(bytes) +
                          " (slot_bytes " + std::to_string(l.slot_bytes) + ")";
      }
    } else if (bytes != 0) {
      std::memcpy(windows.windows_[peer] + l.data_offset(slot) + off, staging + l.data_offset(slot) + off, bytes);
    }
    detail::store_release(reinterpret_cast<std::uint64_t*>(windows.windows_[peer]) + index, value, scope());
  }
};
static_assert(transport::transport_handle<staging_handle>);

class staging_transport {
 public:
  static constexpr const char* name = "staging_test";
  using handle_type = staging_handle;

  staging_transport(bootstrap::bootstrap_ref boot, const protocol::window_layout& layout, const options& opts)
      : windows_(boot, layout, opts), staging_(std::make_unique<transport::host_window>(layout)) {
    handle_.windows = windows_.handle();
    handle_.staging = staging_->base;
  }
  handle_type handle() const { return handle_; }

 private:
  transport::loopback windows_;
  std::unique_ptr<transport::host_window> staging_;
  handle_type handle_{};
};
static_assert(transport::check_transport<staging_transport>());

/// A staging transport that posts whole calls as the RDMA transport over two rails does (each rail's share of the
/// range, then a flag per rail; the last rail's share ends with the call trailer), but whose flag writes tear: each
/// flag first holds this call's sequence beside the low half of the old word's signature, for `tear` (the waiter
/// polls it), then the whole word. An RDMA WRITE of 8 bytes may place its bytes in any order; Soft-RoCE's did.
struct tearing_handle : staging_handle {
  std::uint32_t rails() const { return 2; }
  bool post_call(std::uint32_t, std::uint32_t slot, std::uint64_t off, std::uint64_t bytes, std::uint64_t index,
                 std::uint64_t value) {
    const protocol::window_layout& l = layout();
    const std::uint64_t units = protocol::ceil_div(bytes, 64);
    for (int k = 1; k < ranks(); ++k) {
      const int peer = (rank() + k) % ranks();
      for (std::uint32_t d = 0; d < 2; ++d) {
        const std::uint64_t b0 = units * d / 2 * 64, b1 = d == 1 ? bytes : units / 2 * 64;
        const std::uint64_t at = l.data_offset(slot) + off + b0;
        std::memcpy(windows.windows_[peer] + at, staging + at, b1 - b0);
        auto* flag = reinterpret_cast<std::uint64_t*>(windows.windows_[peer]) + index + std::uint64_t{d} * l.channels;
        const std::uint64_t old = detail::load_acquire(flag);
        const std::uint64_t torn = (value & 0x0000ffffffffffffull) | (old & 0xffff000000000000ull);
        if (torn != value) {
          detail::store_release(flag, torn);
          tears.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::microseconds(300));
        }
        detail::store_release(flag, value);
      }
    }
    return true;
  }
  static inline std::atomic<std::uint64_t> tears{0};
};
static_assert(algorithm::one_shot::posts_calls<tearing_handle>);
static_assert(!algorithm::one_shot::posts_calls<staging_handle>);

class tearing_transport {
 public:
  static constexpr const char* name = "tearing_test";
  using handle_type = tearing_handle;
  tearing_transport(bootstrap::bootstrap_ref boot, const protocol::window_layout& layout, const options& opts)
      : inner_(boot, layout, opts) {
    static_cast<staging_handle&>(handle_) = inner_.handle();
  }
  handle_type handle() const { return handle_; }

 private:
  staging_transport inner_;
  handle_type handle_{};
};
static_assert(transport::check_transport<tearing_transport>());

std::string violation_report() {
  std::lock_guard lock(first_violation_mu);
  return first_violation;
}

const int rank_counts[] = {2, 3, 4, 8};

}  // namespace

TEST_SUITE("host.staging") {
  TEST_CASE("one_shot over a staging transport matches the reference and signals only whole packets inside the "
            "slot") {
    reset_violations();
    for (int n : rank_counts) {
      CAPTURE(n);
      check_all_reduce_against_reference<one_shot, float, staging_transport>(n, reference_options(true), 200 + n);
      check_all_gather<__half, staging_transport>(n, reference_options(n % 2 == 0), 210 + n);
    }
    INFO(violation_report());
    CHECK(violations.load() == 0);
  }

  TEST_CASE("ring over a staging transport matches the reference") {
    for (int n : rank_counts) {
      CAPTURE(n);
      check_all_reduce_against_reference<ring, float, staging_transport>(n, reference_options(false), 220 + n);
      check_all_reduce_against_reference<ring, __half, staging_transport>(n, reference_options(true), 230 + n);
    }
  }

  TEST_CASE("ring signals only ranges inside the slot, also for chunks past the end of a short vector") {
    // 3 ranks, 1 element: one packet, chunk length 1, so chunks 1 and 2 lie wholly past the vector. Their
    // (empty) ranges must still be named inside the slot: an RDMA transport would post them as they are.
    reset_violations();
    options o = reference_options(false);
    std::vector<status> st(3, status::internal);
    host::spawn_ranks(3, [&](bootstrap::in_process& b) {
      host::communicator<staging_transport> comm(b, o);
      std::vector<float> in(1, 1.0f), out(1);
      st[b.rank()] = comm.all_reduce<ring>(in.data(), out.data(), 1);
    });
    for (status s : st) CHECK(s == status::ok);
    INFO(violation_report());
    CHECK(violations.load() == 0);
  }

  TEST_CASE("whole calls over two rails whose flag writes tear: every call exact, no false mismatch; a real one is "
            "still one") {
    // Calls alternate two shapes every second call, so a slot's old flag word always carries the other signature
    // and every torn word shows this sequence beside a foreign half: only the call trailer tells it from a peer in
    // another call. The reference check: exact sums, identical bytes on every rank.
    for (int n : {2, 3, 4}) {
      CAPTURE(n);
      options o = reference_options(false);
      o.max_parts = 2;  // one flag per rail
      tearing_handle::tears = 0;
      std::vector<std::string> err(n);
      host::spawn_ranks(n, [&](bootstrap::in_process& b) {
        host::communicator<tearing_transport> comm(b, o);
        const int r = b.rank();
        for (int i = 0; i < 40 && err[r].empty(); ++i) {
          const std::size_t count = (i / 2) % 2 ? 1000 : 2048 + 8;
          std::vector<float> in(count), out(count, -1.0f);
          for (std::size_t j = 0; j < count; ++j) in[j] = float((r + 1) * (i + 1)) + float(j % 7);
          if (status st = comm.all_reduce(in.data(), out.data(), count); st != status::ok) {
            err[r] = "call " + std::to_string(i) + ": " + comm.last_error();
            break;
          }
          for (std::size_t j = 0; j < count; ++j) {
            float want = 0;
            for (int q = 0; q < n; ++q) want += float((q + 1) * (i + 1)) + float(j % 7);
            if (out[j] != want) {
              err[r] = "call " + std::to_string(i) + ": element " + std::to_string(j) + " wrong";
              break;
            }
          }
        }
      });
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        CHECK(err[r].empty());
      }
      CHECK(tearing_handle::tears.load() > 0);  // the case tested what it says
    }
    // A peer in another call (same bytes, another dtype): its trailer holds its own word, a mismatch on both sides.
    options o = reference_options(false);
    o.max_parts = 2;
    o.timeout_ns = 5'000'000'000ull;
    std::vector<status> st(2, status::internal);
    host::spawn_ranks(2, [&](bootstrap::in_process& b) {
      host::communicator<tearing_transport> comm(b, o);
      std::vector<float> in(512, 1.0f), out(512);
      std::vector<__half> hin(1024, __float2half(1.0f)), hout(1024);
      st[b.rank()] = b.rank() == 0 ? comm.all_reduce(in.data(), out.data(), 512) : comm.all_reduce(hin.data(), hout.data(), 1024);
    });
    CHECK(st[0] == status::mismatch);
    CHECK(st[1] == status::mismatch);
  }

  TEST_CASE("a transport that differs between ranks makes every constructor throw config_mismatch_error on "
            "'transport'") {
    std::vector<std::string> field(3);
    host::spawn_ranks(3, [&](bootstrap::in_process& b) {
      try {
        if (b.rank() == 1) {
          host::communicator<staging_transport> comm(b, options{});
        } else {
          host::communicator<transport::loopback> comm(b, options{});
        }
      } catch (const config_mismatch_error& e) {
        field[b.rank()] = e.field();
      }
    });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(field[r] == "transport");
    }
  }
}
