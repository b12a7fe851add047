// tests/host/test_staging_transport.cpp — the `shared_staging` side of the transport contract, which the
// loopback never exercises: a test transport whose put_ptr() is one local staging buffer for every peer and
// whose signal() moves [off, off+bytes) into the peer's window before it publishes the flag (what a proxy or
// a NIC does). The algorithms must give the same bits over it, and every range they signal must lie inside
// the slot and be whole packets — an RDMA transport posts exactly that range. Also: a transport that differs
// between ranks fails set-up naming the field.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <atomic>
#include <memory>
#include <mutex>

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
