// tests/host/test_socket.cpp — the socket transport (transport/socket.hpp) with ranks as threads of one process,
// over 127.0.0.1 (ROCENANTE_SOCKET_IFNAME unset: every rank in one network namespace): agreement with the exact
// reference for one_shot, two_shot and ring, all-reduce and all-gather, fp32 and bf16, counts {1, 7, 16, 4099, capacity}
// (reference_case.hpp: bit-exact to the documented order, byte-identical across ranks, guards intact); a peer
// that closes its connections, and one that never connects, reported naming it within the bound; the abort words
// a closed connection leaves (only where the closed peer still owed a word of the current collective); configuration
// mismatches and bad connection cards and frames refused naming the rank; and start-up selection with
// ROCENANTE_TRANSPORT=socket.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <thread>

#include <rocenante/host/select.hpp>
#include <rocenante/transport/socket.hpp>

#include "reference_case.hpp"

using namespace rtest;
using socket_comm = host::communicator<transport::socket>;

namespace {

protocol::window_layout small_layout(int n, std::uint64_t capacity = 16 * 1024) {
  options o;
  o.capacity_bytes = capacity;
  o.max_parts = 2;
  return host::make_layout<one_shot, ring, algorithm::two_shot>(n, o);
}

/// A listening socket on 127.0.0.1 that never accepts: connections to it complete (the kernel's backlog) and
/// go nowhere. The fake rank of "never arrives" publishes it.
struct silent_listener {
  transport::sock::fd fd;
  std::uint16_t port_be = 0;
  silent_listener() : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd.get(), 8) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_be = a.sin_port;
  }
};

}  // namespace

TEST_SUITE("host.socket.reference") {
  TEST_CASE("one_shot all-reduce over sockets matches the float64 reference, bit for bit rank order, fp32 and bf16") {
    for (int n : {2, 3, 4}) {
      CAPTURE(n);
      check_all_reduce_against_reference<one_shot, float, transport::socket>(n, reference_options(n != 3), 400 + n);
      check_all_reduce_against_reference<one_shot, __nv_bfloat16, transport::socket>(n, reference_options(n == 3),
                                                                                      410 + n);
    }
  }

  TEST_CASE("ring all-reduce over sockets matches the float64 reference, bit for bit chunk order, fp32 and bf16") {
    for (int n : {2, 3, 4}) {
      CAPTURE(n);
      check_all_reduce_against_reference<ring, float, transport::socket>(n, reference_options(n == 3), 420 + n);
      check_all_reduce_against_reference<ring, __nv_bfloat16, transport::socket>(n, reference_options(n != 3), 430 + n);
    }
  }

  TEST_CASE("two_shot all-reduce over sockets matches the float64 reference, bit for bit rank order, fp32 and bf16") {
    for (int n : {2, 3, 4}) {
      CAPTURE(n);
      check_all_reduce_against_reference<algorithm::two_shot, float, transport::socket>(n, reference_options(n != 3), 440 + n);
      check_all_reduce_against_reference<algorithm::two_shot, __nv_bfloat16, transport::socket>(n, reference_options(n == 3),
                                                                                               450 + n);
    }
  }

  TEST_CASE("all-gather over sockets concatenates exactly, fp32 and bf16, at 2 and 4 ranks") {
    check_all_gather<float, transport::socket>(2, reference_options(true), 440);
    check_all_gather<__nv_bfloat16, transport::socket>(4, reference_options(false), 441);
  }

  TEST_CASE("every payload byte and every frame crosses a connection: the receiver's counters") {
    std::vector<transport::socket_stats> st(3);
    std::vector<std::string> where(3);
    host::spawn_ranks(3, [&](bootstrap::in_process& boot) {
      options o = reference_options(false);
      socket_comm comm(boot, o);
      std::vector<float> in(1000, 1.0f), out(1000);
      REQUIRE(comm.all_reduce<one_shot>(in.data(), out.data(), in.size()) == status::ok);
      REQUIRE(out[999] == 3.0f);
      boot.barrier();  // every rank's frames have been applied (each rank waited for them)
      st[boot.rank()] = comm.transport().stats();
      where[boot.rank()] = comm.transport().describe();
      for (int q = 0; q < 3; ++q) CHECK(comm.transport().reachable(q));
      CHECK_FALSE(comm.transport().failed());
    });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      MESSAGE(where[r]);
      CHECK(contains(where[r], "127.0.0.1 within a host"));
      // one_shot, a call posted once: one descriptor, one frame to each of the 2 peers, 4000 bytes and the 16-byte
      // call trailer each; the same received.
      CHECK(st[r].posts == 1);
      CHECK(st[r].calls == 1);
      CHECK(st[r].writes == 2);
      CHECK(st[r].bytes == 2 * (4000 + 16));
      CHECK(st[r].frames_received == 2);
      CHECK(st[r].bytes_received == 2 * (4000 + 16));
    }
  }
}

TEST_SUITE("host.socket.failure") {
  TEST_CASE("a peer that closes its connections is reported by every other rank, naming it, at once") {
    constexpr int n = 4;
    options o = reference_options(false);
    o.timeout_ns = 5'000'000'000ull;
    std::vector<status> st(n, status::internal);
    std::vector<host::health> h(n);
    std::vector<std::string> failure(n), health_after(n);
    std::vector<double> seconds(n, 0);
    host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
      const int r = boot.rank();
      auto comm = std::make_unique<socket_comm>(boot, o);
      std::vector<float> in(500, 1.0f), out(500);
      for (int i = 0; i < 3; ++i) REQUIRE(comm->all_reduce(in.data(), out.data(), in.size()) == status::ok);
      if (r == 3) comm.reset();  // closes every connection of rank 3
      boot.barrier();            // rank 3's connections are closed before the others call again
      if (r == 3) {
        boot.barrier();  // the survivors' final barrier: none closes its own connections before all have looked
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the receivers see the close (poll: 50 ms)
      stopwatch t;
      st[r] = comm->all_reduce(in.data(), out.data(), in.size());
      seconds[r] = t.seconds();
      h[r] = comm->check_health();
      // The receiver's note on the closed connection, written when it saw the close (before this call); the
      // frames for rank 3 are dropped without failing the transport (transport/socket.hpp, "Failure").
      failure[r] = comm->transport().failure_message();
      health_after[r] = comm->check_health().message;
      boot.barrier();  // a survivor that tears down early would be a closed peer of the others' pending frames
    });
    for (int r = 0; r < n - 1; ++r) {
      CAPTURE(r);
      INFO(h[r].message);
      INFO(failure[r]);
      CHECK(st[r] == status::timeout);
      CHECK(h[r].failure.peer == 3);
      CHECK(contains(h[r].message, "rank 3"));
      // The fast path: the receiver found the connection closed and aborted the wait, long before the 5 s timeout.
      CHECK(seconds[r] < 1.0);
      CHECK(contains(failure[r], "rank " + std::to_string(r) + ": rank 3 closed its connection to this rank"));
      // and check_health() carries the transport's cause
      CHECK(contains(health_after[r], "[this rank's transport: rank " + std::to_string(r) + ": rank 3 closed its connection"));
    }
  }

  TEST_CASE("a frame for a peer whose connection ended is dropped: the words that peers delivered keep what they say") {
    // 3 ranks as threads on the bare transport. Rank 1 closes (it died); rank 0 relays an abort naming rank 1 into
    // rank 2's window (its channel, part 0, sequence 5) and closes its transport (a survivor that recovers); rank
    // 2, behind, then posts its own word of sequence 5 to rank 0. That frame has no reader: it is dropped, and the
    // words of sequence 5 in rank 2's window say who missed it — rank 0's relay still naming rank 1, rank 1's
    // words aborted naming rank 1 (the receiver, peer_closed_aborts). Failing rank 2 for the frame wrote abort
    // words naming rank 0 over all of them: a recovering world's slow rank then named a survivor instead of the
    // rank that died (the recovery case of tests/host/test_multiprocess.cpp, once in CI).
    constexpr int n = 3;
    const protocol::window_layout layout = small_layout(n);
    const std::uint32_t sig = protocol::call_signature(protocol::collective::all_reduce,
                                                       static_cast<std::uint32_t>(algorithm::algo::one_shot), 1, 0, 100);
    const auto abort_naming = [](int q) {
      return protocol::make_flag(5, protocol::abort_signature(static_cast<std::uint32_t>(protocol::failure_kind::timeout), q));
    };
    options o;
    o.timeout_ns = 2'000'000'000ull;
    std::vector<std::uint64_t> words(layout.flag_count(), 0);
    bool failed = true;
    std::string note;
    host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
      const int r = boot.rank();
      auto s = std::make_unique<transport::socket>(boot, layout, o, transport::socket_config{});
      auto hd = s->handle();
      boot.barrier();
      if (r == 1) s.reset();
      boot.barrier();  // rank 1's connections are closed
      if (r == 0) {
        REQUIRE(hd.signal(2, 1, 0, 0, layout.flag_index(1, 0, 0), abort_naming(1)));
        s.reset();  // sends what it posted, then closes
      }
      boot.barrier();  // rank 0's connections are closed
      if (r == 2) {
        stopwatch w;
        while (detail::load_acquire(hd.local_flag(layout.flag_index(1, 0, 0))) != abort_naming(1) && w.seconds() < 10.0)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0's close is seen (a round: 50 ms)
        REQUIRE(hd.signal(0, 1, 0, 0, layout.flag_index(1, 0, 2), protocol::make_flag(5, sig)));
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the proxy took it; the receiver looked again
        for (std::uint64_t i = 0; i < layout.flag_count(); ++i) words[i] = detail::load_acquire(hd.local_flag(i));
        failed = s->failed();
        note = s->failure_message();
      }
      boot.barrier();
    });
    INFO(note);
    CHECK_FALSE(failed);
    CHECK(words[layout.flag_index(1, 0, 0)] == abort_naming(1));  // rank 0's relay, as it arrived
    CHECK(words[layout.flag_index(1, 1, 0)] == abort_naming(0));  // rank 0 closed owing part 1 of its channel
    CHECK(words[layout.flag_index(1, 0, 1)] == abort_naming(1));  // rank 1 owed both parts of its channel
    CHECK(words[layout.flag_index(1, 1, 1)] == abort_naming(1));
    for (std::uint32_t p = 0; p < layout.max_parts; ++p)
      for (std::uint32_t ch = 0; ch < layout.channels; ++ch) {
        CAPTURE(p);
        CAPTURE(ch);
        CHECK(words[layout.flag_index(0, p, ch)] == protocol::flag_unset);  // sequence 6's slot: untouched
      }
  }

  TEST_CASE("a peer that never connects is marked unreachable within the timeout, and a frame for it fails naming it") {
    constexpr int n = 3;  // ranks 0 and 1 are real, rank 2 publishes a card and never connects or accepts
    const protocol::window_layout layout = small_layout(n);
    options o;
    o.timeout_ns = 1'000'000'000ull;
    silent_listener fake;
    std::vector<double> setup_s(n, 0);
    std::vector<std::string> why(n), failure(n);
    std::vector<int> reach(n * n, -1);
    std::vector<std::uint64_t> abort_word(n, 0);
    host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
      const int r = boot.rank();
      if (r == 2) {
        transport::sock::card c{};
        c.magic = transport::sock::card_magic;
        c.version = transport::sock::card_version;
        c.size = sizeof c;
        c.rank = 2;
        c.ok = 1;
        c.any = 1;
        c.port = fake.port_be;
        c.window_bytes = layout.total_bytes();
        c.netns = transport::sock::netns_token();
        c.nonce = 42;
        (void)transport::exchange_cards(boot, c, [] {});  // the card exchange as the transport makes it (a vote)
        return;
      }
      stopwatch t;
      transport::socket s(boot, layout, o, transport::socket_config{});
      setup_s[r] = t.seconds();
      for (int q = 0; q < n; ++q) reach[r * n + q] = s.reachable(q) ? 1 : 0;
      why[r] = s.unreachable_reason(2);
      // A frame for rank 2 (sequence 7): the proxy fails it, names rank 2 and aborts this rank's own flags.
      auto hd = s.handle();
      const std::uint64_t idx = layout.flag_index(1, 0, 0);
      REQUIRE(hd.signal(2, 1, 0, 64, idx, protocol::make_flag(7, 0x123)));
      stopwatch w;
      while (!s.failed() && w.seconds() < 5.0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      failure[r] = s.failure_message();
      abort_word[r] = detail::load_acquire(hd.local_flag(idx));
    });
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      INFO(why[r]);
      INFO(failure[r]);
      CHECK(setup_s[r] >= 0.9);        // it waited for rank 2 until the deadline...
      CHECK(setup_s[r] < 1.0 + 1.5);   // ...and not much longer
      CHECK(reach[r * n + 0] == 1);
      CHECK(reach[r * n + 1] == 1);
      CHECK(reach[r * n + 2] == 0);
      CHECK(contains(why[r], "rank 2 did not connect to this rank within 1000"));
      CHECK(contains(failure[r], "socket connection to rank 2"));
      CHECK(contains(failure[r], "a frame for a peer that start-up could not connect"));
      CHECK(protocol::is_abort(protocol::flag_signature(abort_word[r])));
      CHECK(protocol::abort_rank(protocol::flag_signature(abort_word[r])) == 2);
      CHECK(protocol::flag_seq(abort_word[r]) == 7);
    }
  }

  // What the receiver writes into its own rank's flags when a peer's connection ends (socket.hpp,
  // peer_closed_aborts), read straight from the window: 3 ranks as threads on the bare transport, descriptors
  // posted by hand. Rank 0 has posted a descriptor of sequence 5 (slot 1) of `algo`; rank `closer` posts the words
  // in `delivered` (part, channel) to rank 0 and then destroys its transport. Rank 0's window then holds, in slot 1:
  // the delivered words unchanged, abort words naming `closer` exactly at the indices in `aborted`, and nothing
  // anywhere else; then rank 0 posts a descriptor of sequence 6 (slot 0), a collective that begins after the close.
  struct closed_peer_case {
    algorithm::algo algo;
    int closer;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> delivered, aborted, aborted_next;
  };
  void check_closed_peer(const closed_peer_case& c) {
    constexpr int n = 3;
    const protocol::window_layout layout = small_layout(n);  // 2 parts, 6 channels (two_shot: 2 n)
    const std::uint32_t sig = protocol::call_signature(protocol::collective::all_reduce,
                                                       static_cast<std::uint32_t>(c.algo), 1, 0, 100);
    const auto abort_of = [&](std::uint32_t seq) {
      return protocol::make_flag(seq, protocol::abort_signature(
                                          static_cast<std::uint32_t>(protocol::failure_kind::timeout), c.closer));
    };
    options o;
    o.timeout_ns = 2'000'000'000ull;
    std::vector<std::uint64_t> words(layout.flag_count(), 0), next_words(layout.flag_count(), 0), other(layout.flag_count(), 0);
    std::string note;
    host::spawn_ranks(n, [&](bootstrap::in_process& boot) {
      const int r = boot.rank();
      auto s = std::make_unique<transport::socket>(boot, layout, o, transport::socket_config{});
      auto hd = s->handle();
      auto wait_for = [&](std::uint64_t idx, std::uint64_t want) {
        stopwatch w;
        while (detail::load_acquire(hd.local_flag(idx)) != want && w.seconds() < 10.0)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return detail::load_acquire(hd.local_flag(idx)) == want;
      };
      const int other_rank = 3 - c.closer;  // the rank that is neither 0 nor the closer
      if (r == 0) {  // this rank's current collective: sequence 5, a descriptor to the other rank taken and sent
        REQUIRE(hd.signal(other_rank, 1, 0, 0, layout.flag_index(1, 0, 0), protocol::make_flag(5, sig)));
      } else if (r == other_rank) {
        CHECK(wait_for(layout.flag_index(1, 0, 0), protocol::make_flag(5, sig)));
      } else {
        for (auto [part, ch] : c.delivered)
          REQUIRE(hd.signal(0, 1, 0, 0, layout.flag_index(1, part, ch), protocol::make_flag(5, sig)));
      }
      boot.barrier();  // rank 0's descriptor is taken (the other rank received it)
      if (r == c.closer) {
        s.reset();  // sends what it posted, then closes its connections
        boot.barrier();
        boot.barrier();
        return;
      }
      boot.barrier();
      if (r == 0) {
        // Waits (bounded, for a loaded machine) until the words expected in `slot` are there, then a little longer,
        // so that a word written where none is expected would be seen too; returns every word of the window.
        auto settle = [&](std::uint32_t slot, std::uint32_t seq, const std::vector<std::pair<std::uint32_t, std::uint32_t>>& expected) {
          stopwatch w;
          auto all_there = [&] {
            for (auto [part, ch] : expected)
              if (detail::load_acquire(hd.local_flag(layout.flag_index(slot, part, ch))) != abort_of(seq)) return false;
            return true;
          };
          while (!all_there() && w.seconds() < 10.0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a round of the receiver is 50 ms at most
          std::vector<std::uint64_t> got(layout.flag_count());
          for (std::uint64_t i = 0; i < layout.flag_count(); ++i) got[i] = detail::load_acquire(hd.local_flag(i));
          return got;
        };
        // The close is seen within a receiver round; the delivered words arrived before it (TCP keeps order).
        stopwatch w;
        while (!contains(s->failure_message(), "closed its connection") && w.seconds() < 10.0)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        words = settle(1, 5, c.aborted);
        note = s->failure_message();
        // A collective that begins after the close: its first descriptor, once the proxy takes it, makes the
        // receiver look again.
        REQUIRE(hd.signal(other_rank, 0, 0, 0, layout.flag_index(0, 0, 0), protocol::make_flag(6, sig)));
        next_words = settle(0, 6, c.aborted_next);
      } else {
        // The other rank posted nothing: no collective of its own to abort, whatever closed. Looked at once its
        // receiver has seen the close, and a while after.
        stopwatch w;
        while (!contains(s->failure_message(), "closed its connection") && w.seconds() < 10.0)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        for (std::uint64_t i = 0; i < layout.flag_count(); ++i) other[i] = detail::load_acquire(hd.local_flag(i));
      }
      boot.barrier();
    });
    INFO(note);
    CHECK(contains(note, "rank 0: rank " + std::to_string(c.closer) + " closed its connection to this rank"));
    auto in = [](const std::vector<std::pair<std::uint32_t, std::uint32_t>>& v, std::uint32_t p, std::uint32_t ch) {
      return std::find(v.begin(), v.end(), std::make_pair(p, ch)) != v.end();
    };
    for (std::uint32_t slot = 0; slot < 2; ++slot)
      for (std::uint32_t p = 0; p < layout.max_parts; ++p)
        for (std::uint32_t ch = 0; ch < layout.channels; ++ch) {
          CAPTURE(slot);
          CAPTURE(p);
          CAPTURE(ch);
          const std::uint64_t i = layout.flag_index(slot, p, ch);
          const std::uint64_t want = slot == 0                ? protocol::flag_unset
                                     : in(c.delivered, p, ch) ? protocol::make_flag(5, sig)
                                     : in(c.aborted, p, ch)   ? abort_of(5)
                                                              : protocol::flag_unset;
          CHECK(words[i] == want);
          const std::uint64_t want_next = slot == 1 ? want : in(c.aborted_next, p, ch) ? abort_of(6) : protocol::flag_unset;
          CHECK(next_words[i] == want_next);
          // the other rank received rank 0's two descriptors at (slot, 0, 0) and nothing else
          if (!(p == 0 && ch == 0)) CHECK(other[i] == protocol::flag_unset);
        }
  }

  TEST_CASE("a closed peer leaves abort words only where it owed a word of this rank's current collective") {
    using A = algorithm::algo;
    SUBCASE("one_shot, the peer delivered part 0 and closed: its other part is aborted, the live peer's channel kept") {
      check_closed_peer({A::one_shot, 2, {{0, 2}}, {{1, 2}}, {{0, 2}, {1, 2}}});
    }
    SUBCASE("one_shot, the peer closed before its word: both parts of its channel aborted") {
      check_closed_peer({A::one_shot, 1, {}, {{0, 1}, {1, 1}}, {{0, 1}, {1, 1}}});
    }
    SUBCASE("ring, the predecessor delivered step 0 and closed: every other word of the slot aborted") {
      std::vector<std::pair<std::uint32_t, std::uint32_t>> rest, all;
      for (std::uint32_t p = 0; p < 2; ++p)
        for (std::uint32_t ch = 0; ch < small_layout(3).channels; ++ch) {
          if (p != 0 || ch != 0) rest.emplace_back(p, ch);
          all.emplace_back(p, ch);
        }
      check_closed_peer({A::ring, 2, {{0, 0}}, rest, all});
    }
    SUBCASE("ring, the successor closed: it writes nothing into this rank, so nothing is aborted") {
      check_closed_peer({A::ring, 1, {}, {}, {}});
    }
    SUBCASE("two_shot, the peer delivered its reduce-scatter word of part 0 and closed: its other three words aborted") {
      // rank 2 writes channel 2 (reduce-scatter) and channel 3 + 2 = 5 (its all-gathered chunk) of every part
      check_closed_peer({A::two_shot, 2, {{0, 2}}, {{1, 2}, {0, 5}, {1, 5}}, {{0, 2}, {1, 2}, {0, 5}, {1, 5}}});
    }
    SUBCASE("two_shot, the peer closed before any word: both channels of both parts aborted, the live peer's kept") {
      check_closed_peer({A::two_shot, 1, {}, {{0, 1}, {1, 1}, {0, 4}, {1, 4}}, {{0, 1}, {1, 1}, {0, 4}, {1, 4}}});
    }
  }

  TEST_CASE("teardown returns promptly although a peer is gone") {
    options o = reference_options(false);
    o.timeout_ns = 10'000'000'000ull;
    std::vector<double> teardown(2, 0);
    host::spawn_ranks(2, [&](bootstrap::in_process& boot) {
      auto comm = std::make_unique<socket_comm>(boot, o);
      std::vector<float> in(100, 1.0f), out(100);
      REQUIRE(comm->all_reduce(in.data(), out.data(), in.size()) == status::ok);
      if (boot.rank() == 1) comm.reset();
      boot.barrier();
      if (boot.rank() == 1) return;
      stopwatch t;
      comm.reset();
      teardown[0] = t.seconds();
    });
    CHECK(teardown[0] < 1.0);
  }
}

TEST_SUITE("host.socket.config") {
  TEST_CASE("ranks whose windows differ fail set-up on every rank, each naming the other") {
    std::vector<std::string> errors(2);
    host::spawn_ranks(2, [&](bootstrap::in_process& boot) {
      const auto layout = small_layout(2, boot.rank() == 0 ? 16 * 1024 : 32 * 1024);
      try {
        transport::socket s(boot, layout, options{}, transport::socket_config{});
      } catch (const transport_error& e) {
        errors[boot.rank()] = e.what();
      }
    });
    CHECK(contains(errors[0], "socket (seen by rank 0): rank 1's window is"));
    CHECK(contains(errors[1], "socket (seen by rank 1): rank 0's window is"));
  }

  TEST_CASE("ROCENANTE_SOCKET_IFNAME matching nothing on one rank fails set-up on every rank, naming rank and variable") {
    std::vector<std::string> errors(3);
    host::spawn_ranks(3, [&](bootstrap::in_process& boot) {
      transport::socket_config c;
      if (boot.rank() == 1) c.ifname = env::parse_socket_ifname("=no-such-if0");
      try {
        transport::socket s(boot, small_layout(3), options{}, c);
      } catch (const transport_error& e) {
        errors[boot.rank()] = e.what();
      }
    });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(errors[r].find("set-up step 'connection cards' failed on rank 1: socket: "
                           "ROCENANTE_SOCKET_IFNAME='=no-such-if0' matches no UP interface with an IPv4 address") == 0);
    }
  }

  TEST_CASE("ROCENANTE_SOCKET_IFNAME=lo: every rank listens on the loopback interface only, and collectives work") {
    std::vector<std::string> where(2);
    host::spawn_ranks(2, [&](bootstrap::in_process& boot) {
      transport::socket_config c;
      c.ifname = env::parse_socket_ifname("lo");
      transport::socket s(boot, small_layout(2), options{}, c);
      where[boot.rank()] = s.describe();
      CHECK(s.reachable(1 - boot.rank()));
    });
    CHECK(contains(where[0], "listening on lo 127.0.0.1; port "));
  }

  TEST_CASE("communicators whose timeouts differ fail set-up on every rank as a timeout_ns mismatch") {
    std::vector<std::string> fields(2);
    host::spawn_ranks(2, [&](bootstrap::in_process& boot) {
      options o;
      o.timeout_ns = boot.rank() == 0 ? 1'000'000'000ull : 2'000'000'000ull;
      try {
        socket_comm comm(boot, o);
      } catch (const config_mismatch_error& e) {
        fields[boot.rank()] = e.field();
      }
    });
    CHECK(fields[0] == "timeout_ns");
    CHECK(fields[1] == "timeout_ns");
  }

  TEST_CASE("a bad connection card is refused naming the rank: magic, size, version, rank, window, port") {
    using transport::sock::card;
    const card good{.magic = transport::sock::card_magic, .version = transport::sock::card_version, .size = sizeof(card),
                    .rank = 2, .ok = 1, .any = 0, .addr = 0, .port = htons(4000), .pad = 0, .window_bytes = 8192,
                    .netns = 0, .nonce = 0, .ifname = {}, .error = {}};
    auto why = [](const card& c) { return transport::sock::validate_card(c, 2, 8192); };
    CHECK(why(good).empty());
    struct corruption {
      const char* what;
      void (*apply)(card&);
      std::string message;  // what validate_card says: all of it (whole) or a part of it
      bool whole;
    };
    const corruption corruptions[] = {
        {"magic", [](card& c) { c.magic ^= 1; },
         "rank 2 sent a socket connection card with a bad magic number (not RoCEnante, or corrupt)", true},
        {"size", [](card& c) { c.size -= 8; }, "rank 2 sent a socket connection card of", false},
        {"version", [](card& c) { c.version += 1; }, "rank 2 speaks socket connection-card version", false},
        {"rank", [](card& c) { c.rank = 3; }, "rank 2's socket card claims rank 3", true},
        {"window", [](card& c) { c.window_bytes = 4096; }, "rank 2's window is 4096 bytes, this rank's 8192", true},
        {"port", [](card& c) { c.port = 0; }, "rank 2's socket card has no port", true},
        // a failed rank is reported with its own message, not as a mismatch
        {"failed rank", [](card& c) { c.ok = 0; c.window_bytes = 1; }, "", true},
    };
    for (const corruption& x : corruptions) {
      CAPTURE(x.what);
      card c = good;
      x.apply(c);
      if (x.whole) CHECK(why(c) == x.message);
      else CHECK(contains(why(c), x.message));
    }
  }

  TEST_CASE("a malformed frame header is refused: magic, slot, range past the slot, flag index") {
    const protocol::window_layout l = small_layout(2);
    transport::sock::frame good{transport::sock::frame_magic, 1, 0, l.slot_bytes, l.flag_count() - 1, 5};
    CHECK(transport::sock::check_frame(good, l).empty());
    auto f = good;
    f.magic = 0;
    CHECK(contains(transport::sock::check_frame(f, l), "bad magic"));
    f = good;
    f.slot = 2;
    CHECK(transport::sock::check_frame(f, l) == "a frame for slot 2");
    f = good;
    f.offset = 16;  // 16 + slot_bytes runs past the slot
    CHECK(contains(transport::sock::check_frame(f, l), "-byte slot"));
    f = good;
    f.offset = ~std::uint64_t{0} - 4;  // offset + bytes would wrap
    f.bytes = 8;
    CHECK(contains(transport::sock::check_frame(f, l), "-byte slot"));
    f = good;
    f.flag_index = l.flag_count();
    CHECK(contains(transport::sock::check_frame(f, l), "a frame for flag"));
  }
}

TEST_SUITE("host.socket.select") {
  TEST_CASE("ROCENANTE_TRANSPORT=socket: every rank runs on socket, no fallback, every pair connects, exact") {
    ::setenv("ROCENANTE_TRANSPORT", "socket", 1);  // the real path: read from the environment at set-up
    std::vector<host::selection> seen(3);
    host::spawn_ranks(3, [&](bootstrap::in_process& boot) {
      host::selected_communicator comm(boot, options{});
      seen[boot.rank()] = comm.selected();
      std::vector<__nv_bfloat16> in(333, __float2bfloat16(static_cast<float>(boot.rank() + 1))), out(333);
      REQUIRE(comm.all_reduce(in.data(), out.data(), in.size()) == status::ok);
      CHECK(__bfloat162float(out[0]) == 6.0f);
      CHECK(__bfloat162float(out[332]) == 6.0f);
      REQUIRE(comm.all_reduce(in.data(), out.data(), in.size(), ring{}) == status::ok);
      CHECK(__bfloat162float(out[100]) == 6.0f);
      CHECK(comm.get<host::selected_communicator::socket_comm>() != nullptr);
      CHECK(comm.check_health().ok());
    });
    ::unsetenv("ROCENANTE_TRANSPORT");
    for (const auto& s : seen) {
      CHECK(s.requested == env::transport_choice::socket);
      CHECK(s.chosen == host::transport_kind::socket);
      CHECK(s.preferred == host::transport_kind::socket);
      CHECK_FALSE(s.fell_back);
      CHECK(s.reason.find("socket usable on every rank (rank 0: listening on every address, 127.0.0.1 within a host") == 0);
      CHECK(s.connectivity.describe() == "every pair of 3 ranks connects");
    }
  }

  TEST_CASE("forced socket with a bad ROCENANTE_SOCKET_IFNAME on one rank fails on every rank, naming rank and reason") {
    std::vector<std::string> errors(2);
    host::spawn_ranks(2, [&](bootstrap::in_process& boot) {
      host::select_config c;
      env::settings s;
      s.transport = env::transport_choice::socket;
      if (boot.rank() == 1) s.socket_if = env::parse_socket_ifname("=no-such-if0");
      c.settings = s;
      try {
        host::selected_communicator comm(boot, options{}, c);
      } catch (const transport_error& e) {
        errors[boot.rank()] = e.what();
      }
    });
    for (const auto& e : errors) {
      CHECK(e.find("no transport usable by every rank (ROCENANTE_TRANSPORT=socket): socket unusable: rank 1: socket: "
                   "ROCENANTE_SOCKET_IFNAME='=no-such-if0' matches no UP interface") == 0);
      CHECK(contains(e, "the transport was forced, so there is no fallback"));
    }
    CHECK(errors[0] == errors[1]);
  }

  TEST_CASE("auto across processes: the fallback after ibverbs is socket, and the reason names the failing rank") {
    // Ranks in one process cannot have different process tokens; the table is built as vote_probes builds it for
    // processes (auto, host executor, loopback dropped), with rank 2's ibverbs probe failing.
    host::vote_table t;
    t.ranks = 4;
    t.requested = env::transport_choice::automatic;
    t.order = {host::transport_kind::ibverbs, host::transport_kind::socket};
    t.v.resize(4);
    for (int q = 0; q < 4; ++q)
      for (int k = 0; k < host::transport_kinds; ++k)
        t.v[q][k] = host::verdict::make(static_cast<host::transport_kind>(k), q, host::probe_code::ok, "ok");
    t.fail(host::transport_kind::ibverbs, 2, host::probe_code::device_unusable, "RDMA device rxe2 port 1: port is DOWN");
    const host::selection s = host::decide(t);
    CHECK(s.chosen == host::transport_kind::socket);
    CHECK(s.fell_back);
    CHECK(s.failing_ranks() == std::vector<int>{2});
    CHECK(s.split);  // ranks 0, 1 and 3 could have used ibverbs: a WARN
    CHECK(s.reason == "ibverbs unusable: rank 2: RDMA device rxe2 port 1: port is DOWN; every rank falls back to socket together");
    CHECK(host::host_candidates::order(env::transport_choice::automatic) ==
          std::vector<host::transport_kind>{host::transport_kind::ibverbs, host::transport_kind::loopback,
                                            host::transport_kind::socket});
    host::placement_facts apart;
    apart.one_process = false;
    CHECK(host::host_candidates::arrange(env::transport_choice::automatic,
                                         host::host_candidates::order(env::transport_choice::automatic), apart) ==
          std::vector<host::transport_kind>{host::transport_kind::ibverbs, host::transport_kind::socket});
    CHECK(host::host_candidates::order(env::transport_choice::socket) ==
          std::vector<host::transport_kind>{host::transport_kind::socket});
  }
}
