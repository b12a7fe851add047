// transport/socket.hpp — a host transport across processes over TCP, in the role NCCL's socket transport plays:
// what every rank can use when RDMA cannot be (no device, a device DOWN, a cut between ring neighbours) and the
// ranks are not all threads of one process. It plugs into the transport concept exactly as the loopback proxy
// and the ibverbs transport do: the collective stages its bytes in this rank's staging area and posts a
// descriptor; the shared proxy thread (transport/proxy.hpp) drains every queue in ticket order (hazard H1) and
// `post_one` sends the descriptor as one frame on this rank's connection to the peer:
//
//   frame = header {magic, slot, offset, bytes, flag_index, flag_value} (40 bytes) + `bytes` bytes of payload
//           (staging[data_offset(slot) + offset, +bytes)); bytes == 0 for abort flags
//
// At the peer, one receiver thread per rank reads every incoming connection (poll, non-blocking): it checks the
// header (magic, slot, range inside the slot, flag index inside the flag array), receives the payload straight
// into its own window at the same offset, and only when the last payload byte is in, release-stores
// `flag_value` into flag word `flag_index`.
//
// Ordering (hazard H4) — why a rank that sees the flag sees the payload: TCP delivers the bytes of one
// connection in order and exactly once, so the payload of a frame is read before anything that follows it, and
// the receiver thread stores the flag only after its recv() calls have returned every payload byte into the
// window. Those copies are the receiver thread's own writes (the kernel copies into user memory inside the
// thread's recv system call), so they are sequenced before its store_release of the flag; a waiter that reads
// the flag with an acquire load therefore sees every payload byte (release/acquire, one writer thread). The flag
// word is written by one 8-byte atomic store, so it cannot tear (unlike an RDMA WRITE, see ibverbs). The sender
// reads the staging area inside send(): when post_one returns, the kernel holds a copy, so the producer may
// reuse the staging slot exactly as with the other proxy transports.
//
// Connections: two per pair, one per direction. Rank a's proxy writes only on its connection to b, b's receiver
// reads only from it, so no socket is shared between threads. Set-up (collective, every rank calls):
//   1. choose the address (transport/socket/net.hpp: ROCENANTE_SOCKET_IFNAME, else listen on every address and
//      reach peers of the same network namespace at 127.0.0.1), listen on an ephemeral port;
//   2. one bootstrap all_gather of a connection card {magic, version, size, rank, ok, address, port, window size,
//      network-namespace token, nonce}; a bad card or a failed local set-up on any rank fails set-up on every rank
//      (transport_error naming the rank) — every rank sees every card, so no rank is left waiting;
//   3. connect to every peer and send a hello {magic, rank, the peer's nonce}; accept every peer's connection and
//      check its hello. Everything here ends by one deadline, options::timeout_ns after the exchange (30 s when
//      the timeout is 0). A pair that does not connect by then is *marked*, not fatal: reachable(peer) says false
//      (the start-up probe host::selected_communicator reads, as with ibverbs), and only a frame that needs the
//      pair fails the rank, naming the peer.
//
// Failure (fail-stop, never a hang): a send that errors (reset, broken pipe) or does not complete within
// options::timeout_ns (min(timeout, 1 s) at teardown) records a failure naming the peer (failure_message()) and
// writes abort words naming it into this rank's own flags for the sequence being posted and the next one, so the
// rank's current wait fails at once through the protocol's fail-stop path (as the ibverbs transport does on a
// completion error). A connection that breaks mid-frame, a recv error or a malformed header is a failure too (the
// next post then aborts). A frame for a peer whose connection already ended (below) is dropped, and that is all:
// the receiver names that peer where this rank waits for it. Failing the rank there named the wrong peer: after
// rank 2 of 4 was killed, rank 0 saw it, relayed the abort naming rank 2 and closed its communicator; rank 3,
// behind, posted its next collective to rank 0 first, and abort words naming rank 0 over all its flags replaced
// rank 2's name (the recovery case of tests/host/test_multiprocess.cpp failed so, rarely).
// A peer whose connection ends (EOF or an error; a killed process or a normal teardown look the same) is marked
// closed, and the receiver writes abort words naming it into this rank's own flags wherever a wait of the rank's
// current collective would otherwise wait for that peer in vain (peer_closed_aborts): that wait ends at once, also
// on a rank that only receives from the peer, or whose last frame to it was sent before the close was seen. The
// words go only where the closed peer writes in that collective (algorithm::writes_channel: its channel, every
// part; two_shot: its two channels; every channel from the ring predecessor) and only into words that do not hold that sequence yet: everything a peer sent before closing
// arrives before its EOF (TCP keeps order), so a peer that finished the collective has filled every word a wait
// reads, and a rank still waiting for another peer, or itself finished, is not disturbed. Assumption: a peer that
// stops reading (SIGSTOP) stalls this rank's proxy once its socket buffers are full, for at most the timeout; then
// the peer is failed.
//
// The host executor's `socket` and the GPU executor's `cuda_socket` (transport/cuda_window.hpp, host-mapped memory:
// the whole proxy path between processes on a GPU machine without an RDMA device); IPv4 only. Memory per rank: the window and a staging area of
// layout().total_bytes() each, post queues, and the kernel's socket buffers for 2 (n-1) connections.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../algorithm/concepts.hpp"
#include "../bootstrap/concepts.hpp"
#include "../core/env.hpp"
#include "../core/error.hpp"
#include "../core/options.hpp"
#include "../protocol/flags.hpp"
#include "../protocol/layout.hpp"
#include "../protocol/state.hpp"
#include "concepts.hpp"
#include "proxy.hpp"
#include "socket/net.hpp"

namespace rocenante::transport {

namespace sock {

/// What precedes every payload on a connection.
struct frame {
  std::uint32_t magic;
  std::uint32_t slot;
  std::uint64_t offset;
  std::uint64_t bytes;
  std::uint64_t flag_index;
  std::uint64_t flag_value;
};
static_assert(sizeof(frame) == 40);

/// Why a frame's header cannot be applied to `layout` (empty: it can).
inline std::string check_frame(const frame& f, const protocol::window_layout& layout) {
  if (f.magic != frame_magic) return "a frame with a bad magic number (corrupt stream, or not RoCEnante)";
  if (f.slot >= slot_count) return "a frame for slot " + std::to_string(f.slot);
  if (f.offset > layout.slot_bytes || f.bytes > layout.slot_bytes - f.offset)
    return "a frame for bytes [" + std::to_string(f.offset) + ", +" + std::to_string(f.bytes) + ") of a " +
           std::to_string(layout.slot_bytes) + "-byte slot";
  if (f.flag_index >= layout.flag_count())
    return "a frame for flag " + std::to_string(f.flag_index) + " of " + std::to_string(layout.flag_count());
  return {};
}

}  // namespace sock

/// Configuration of the socket transport beyond options: from the environment by default.
struct socket_config {
  env::socket_ifname ifname;  ///< ROCENANTE_SOCKET_IFNAME; empty: the default (socket/net.hpp, choose_address)
  idle_policy idle{};         ///< the proxy's idle policy (hazard H20)

  /// ROCENANTE_SOCKET_IFNAME from the environment (config_error naming it when the value is bad).
  static socket_config from_env() {
    socket_config c;
    c.ifname = env::socket_ifname_from_env();
    return c;
  }
};

/// What the socket transport measured, beyond the proxy's counters.
struct socket_stats : proxy_stats {
  std::uint64_t frames_received = 0;  ///< frames applied by the receiver thread
  std::uint64_t bytes_received = 0;   ///< their payload bytes
  std::uint64_t send_waits = 0;       ///< frames that found a connection's send buffer full
};

/// Over `Mapping`'s memory: host_mapping (the host executor: plain host memory) or, in transport/cuda_window.hpp,
/// cuda_mapping (GPU kernels: window, staging and post queues in pinned host-mapped memory that the kernel reads
/// and writes in place, as with the ibverbs transport; the receiver thread writes payload and flags there).
template <class Mapping>
class basic_socket {
 public:
  static constexpr const char* name = "socket";
  using handle_type = proxy_handle;

  /// Collective: every rank calls. Configuration from ROCENANTE_SOCKET_IFNAME.
  basic_socket(bootstrap::bootstrap_ref boot, const protocol::window_layout& layout, const options& opts)
      : basic_socket(boot, layout, opts, socket_config::from_env()) {}

  /// Collective: every rank calls. Listens, exchanges connection cards through `boot`, connects every pair
  /// (bounded by options::timeout_ns), starts the receiver and proxy threads. A failure on any rank before the
  /// connections (no matching interface, bind/listen failed, a bad card) fails set-up on every rank with a
  /// transport_error naming that rank; a pair that does not connect is marked (reachable()).
  basic_socket(bootstrap::bootstrap_ref boot, const protocol::window_layout& layout, const options& opts, socket_config cfg)
      : layout_(layout), cfg_(std::move(cfg)), timeout_ns_(opts.timeout_ns), me_(boot.rank()),
        n_(check_ranks(boot.size())), mem_(layout) {
    const std::uint64_t bytes = layout.total_bytes();
    sock::card mine{};
    stamp_card(mine, sock::card_magic, sock::card_version, me_);
    mine.window_bytes = bytes;
    mine.netns = sock::netns_token();
    mine.nonce = make_nonce();
    const std::vector<sock::card> all = exchange_cards(boot, mine, [&] { listen_on(mine); });
    check_cards(all, mine);
    connect_all(all, mine);
    listen_.reset();
    handle_ = mem_.handle(me_, n_, layout, opts.timeout_ns);
    receiver_ = std::thread([this] { receive_loop(); });
    proxy_.start(this, mem_.queue_array(), layout_.max_parts, cfg_.idle);
  }

  basic_socket(const basic_socket&) = delete;
  basic_socket& operator=(const basic_socket&) = delete;

  /// Sends what this rank already published (peers may wait for it; each send bounded by min(timeout, 1 s)),
  /// stops the proxy, then the receiver, and closes every connection. Returns promptly with dead peers.
  ~basic_socket() {
    proxy_.stop();
    rx_stop_.store(true, std::memory_order_release);
    if (receiver_.joinable()) receiver_.join();
  }

  handle_type handle() const { return handle_; }

  /// Test hooks: a paused proxy posts nothing (a descheduled proxy; hazard H1).
  void pause() { proxy_.pause(); }
  void resume() { proxy_.resume(); }

  /// True once a send failed, a connection broke mid-frame or a malformed frame arrived; failure_message()
  /// names the peer.
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  /// The failure (failed()); without one, the first peer whose connection ended (what a wait aborted by the
  /// receiver, see the header, failed for); empty when neither happened.
  std::string failure_message() const {
    std::lock_guard lock(fail_mu_);
    return failed_.load(std::memory_order_relaxed) ? failure_ : closed_note_;
  }
  /// steady_clock time (detail::now_ns) at which the first failure was recorded; 0 when none.
  std::uint64_t failure_time_ns() const {
    std::lock_guard lock(fail_mu_);
    return failure_ns_;
  }

  /// Whether this rank's connection to `peer` and `peer`'s connection to this rank were both established at
  /// set-up (this rank's view; host::selected_communicator gathers the matrix). Self: true.
  bool reachable(int peer) const { return reach_.reachable(peer); }
  /// Why the pair with `peer` did not connect (empty when it did).
  std::string unreachable_reason(int peer) const { return reach_.reason(peer); }

  /// "listening on every address, 127.0.0.1 within a host, eth0 10.0.0.2 across hosts; port 40123".
  std::string describe() const { return choice_.text() + "; port " + std::to_string(port_); }

  socket_stats stats() const {
    socket_stats s;
    static_cast<proxy_stats&>(s) = proxy_.stats();
    s.frames_received = frames_rx_.load(std::memory_order_relaxed);
    s.bytes_received = bytes_rx_.load(std::memory_order_relaxed);
    s.send_waits = send_waits_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  friend class proxy_thread;

  /// Receiver-side state of one incoming connection (receiver thread only).
  struct rx_state {
    sock::fd conn;
    sock::frame hdr{};
    std::size_t hdr_got = 0;
    std::uint64_t left = 0;     ///< payload bytes still to receive for `hdr`
    std::byte* dst = nullptr;   ///< where they go
  };

  static int check_ranks(int n) {
    if (n > max_ranks)
      throw config_error("socket: " + std::to_string(n) + " ranks exceed max_ranks (" + std::to_string(max_ranks) + ")");
    return n;
  }

  static std::uint64_t make_nonce() {
    std::uint64_t z = detail::now_ns() ^ (static_cast<std::uint64_t>(::getpid()) << 32) ^
                      reinterpret_cast<std::uintptr_t>(&z);
    z += 0x9e3779b97f4a7c15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  std::uint64_t connect_deadline() const {
    return detail::now_ns() + (timeout_ns_ != 0 ? timeout_ns_ : 30'000'000'000ull);
  }

  void listen_on(sock::card& mine) {
    choice_ = sock::choose_address(cfg_.ifname);
    sock::fd l(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!l) throw transport_error("socket: socket() failed (" + sock::errno_text(errno) + ")");
    const int one = 1;
    ::setsockopt(l.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = choice_.any ? htonl(INADDR_ANY) : choice_.addr_be;
    a.sin_port = 0;
    if (::bind(l.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0)
      throw transport_error("socket: bind to " + sock::ip_text(a.sin_addr.s_addr) + " failed (" +
                            sock::errno_text(errno) + ")");
    if (::listen(l.get(), 2 * max_ranks) != 0)
      throw transport_error("socket: listen failed (" + sock::errno_text(errno) + ")");
    socklen_t len = sizeof a;
    if (::getsockname(l.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw transport_error("socket: getsockname failed (" + sock::errno_text(errno) + ")");
    port_ = ntohs(a.sin_port);
    mine.any = choice_.any ? 1 : 0;
    mine.addr = choice_.addr_be;
    mine.port = a.sin_port;
    copy_text(mine.ifname, sizeof mine.ifname, choice_.ifname);
    listen_ = std::move(l);
  }

  void check_cards(const std::vector<sock::card>& all, const sock::card& mine) const {
    const std::string first = first_card_problem(
        all, [&](const sock::card& c, int q) { return sock::validate_card(c, q, mine.window_bytes); });
    if (!first.empty()) throw transport_error("socket (seen by rank " + std::to_string(me_) + "): " + first);
  }

  /// Where this rank connects to reach `c`'s rank; 0 when it cannot (`why` says why).
  std::uint32_t target_of(const sock::card& c, const sock::card& mine, std::string& why) const {
    if (c.any && c.netns == mine.netns) return htonl(INADDR_LOOPBACK);
    if (c.addr != 0) return c.addr;
    why = "rank " + std::to_string(c.rank) +
          " runs on another host or network namespace and has no non-loopback IPv4 interface to listen on; set "
          "ROCENANTE_SOCKET_IFNAME on every rank";
    return 0;
  }

  void connect_all(const std::vector<sock::card>& all, const sock::card& mine) {
    const std::size_t n = static_cast<std::size_t>(n_);
    out_.resize(n);
    rx_.resize(n);
    reach_.reset(me_, n_);
    closed_ = std::make_unique<std::atomic<bool>[]>(n);
    close_why_.assign(n, std::string());
    aborted_word_.assign(n, protocol::flag_unset);
    peer_addr_.assign(n, std::string());
    std::vector<std::string> why_out(n), why_in(n);
    if (n_ < 2) return;
    const std::uint64_t deadline = connect_deadline();
    const double budget_ms = static_cast<double>(timeout_ns_ != 0 ? timeout_ns_ : 30'000'000'000ull) / 1e6;

    // 1. Start a non-blocking connect to every peer.
    std::vector<int> pending;
    for (int q = 0; q < n_; ++q) {
      if (q == me_) continue;
      std::string why;
      const std::uint32_t ip = target_of(all[q], mine, why);
      if (ip == 0) {
        why_out[q] = why;
        continue;
      }
      peer_addr_[q] = sock::ip_text(ip) + ":" + std::to_string(ntohs(all[q].port));
      sock::fd f(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!f) {
        why_out[q] = "socket() failed (" + sock::errno_text(errno) + ")";
        continue;
      }
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = ip;
      a.sin_port = all[q].port;
      if (::connect(f.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
        why_out[q] = "connect to " + peer_addr_[q] + " failed (" + sock::errno_text(errno) + ")";
        continue;
      }
      out_[q].conn = std::move(f);
      pending.push_back(q);
    }
    // 2. Wait for each connect, then send the hello (16 bytes: a fresh connection takes them at once).
    while (!pending.empty()) {
      std::vector<pollfd> p;
      for (int q : pending) p.push_back(pollfd{out_[q].conn.get(), POLLOUT, 0});
      ::poll(p.data(), p.size(), sock::poll_ms(deadline));
      std::vector<int> still;
      for (std::size_t i = 0; i < p.size(); ++i) {
        const int q = pending[i];
        if (p[i].revents == 0) {
          if (detail::now_ns() >= deadline) {
            why_out[q] = "connect to " + peer_addr_[q] + " did not complete within " + std::to_string(budget_ms) + " ms";
            out_[q].conn.reset();
          } else {
            still.push_back(q);
          }
          continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(out_[q].conn.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          why_out[q] = "connect to " + peer_addr_[q] + " failed (" + sock::errno_text(err) + ")";
          out_[q].conn.reset();
          continue;
        }
        sock::set_nodelay(out_[q].conn.get());
        const sock::hello h{sock::hello_magic, me_, all[q].nonce};
        const std::string w = sock::write_exact(out_[q].conn.get(), &h, sizeof h, deadline);
        if (!w.empty()) {
          why_out[q] = "hello to " + peer_addr_[q] + ": " + w;
          out_[q].conn.reset();
        }
      }
      pending.swap(still);
    }
    // 3. Accept every peer's connection; its hello says who it is. Strays (wrong magic or nonce) are dropped.
    int accepted = 0;
    std::string strays;
    while (accepted < n_ - 1 && detail::now_ns() < deadline) {
      pollfd p{listen_.get(), POLLIN, 0};
      ::poll(&p, 1, sock::poll_ms(deadline));
      for (;;) {
        sockaddr_in from{};
        socklen_t len = sizeof from;
        sock::fd c(::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!c) break;
        sock::hello h{};
        const std::string r = sock::read_exact(c.get(), &h, sizeof h, deadline);
        const std::string who = sock::ip_text(from.sin_addr.s_addr) + ":" + std::to_string(ntohs(from.sin_port));
        if (!r.empty() || h.magic != sock::hello_magic || h.nonce != mine.nonce || h.rank < 0 || h.rank >= n_ ||
            h.rank == me_ || rx_[h.rank].conn) {
          strays += (strays.empty() ? "" : ", ") + who + (r.empty() ? " (bad hello)" : " (" + r + ")");
          continue;
        }
        sock::set_nodelay(c.get());
        rx_[h.rank].conn = std::move(c);
        ++accepted;
      }
    }
    for (int q = 0; q < n_; ++q) {
      if (q == me_) continue;
      if (!rx_[q].conn)
        why_in[q] = "rank " + std::to_string(q) + " did not connect to this rank within " + std::to_string(budget_ms) +
                    " ms" + (strays.empty() ? "" : " (connections refused: " + strays + ")");
      if (!why_out[q].empty() || !why_in[q].empty()) {
        reach_.ok[q] = 0;
        reach_.why[q] = why_out[q] + (why_out[q].empty() || why_in[q].empty() ? "" : "; ") + why_in[q];
      }
    }
  }

  // ---- receiver thread -------------------------------------------------------------------------------------

  void receive_loop() {
    auto* window = mem_.window.get();
    auto* flags = reinterpret_cast<std::uint64_t*>(window);
    while (!rx_stop_.load(std::memory_order_acquire)) {
      // Peers already closed: abort what this rank's current collective would wait for from them. Checked on every
      // round (at most 50 ms apart), because the collective may begin after the close was seen.
      peer_closed_aborts(flags);
      std::vector<pollfd> p;
      std::vector<int> who;
      for (int q = 0; q < n_; ++q)
        if (rx_[q].conn) {
          p.push_back(pollfd{rx_[q].conn.get(), POLLIN, 0});
          who.push_back(q);
        }
      if (p.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      if (::poll(p.data(), p.size(), 50) <= 0) continue;
      for (std::size_t i = 0; i < p.size(); ++i)
        if (p[i].revents != 0) receive_from(who[i], window, flags);
    }
  }

  /// For every peer whose incoming connection ended: abort words naming it, for this rank's current collective,
  /// into the flag words that peer writes in it and that do not hold the collective's sequence yet (see the
  /// header). The current collective is the one of the last descriptor the proxy took (taken_word_): a rank waits
  /// only after posting that collective's first descriptor, so it is at that sequence or, with its next
  /// descriptors not yet taken, one later, and then the proxy takes them within a round and this runs again.
  /// Harmless where no wait comes: a word of this sequence that is not written is one no wait of this
  /// collective reads, or one the closed peer owed; the slot's older words belong to collectives this rank has
  /// finished (the two-slot argument, protocol/session.hpp). Receiver thread only: it is the only thread that
  /// writes frames' flags, so no word of this sequence can arrive between the check and the store.
  void peer_closed_aborts(std::uint64_t* flags) {
    if (closed_count_ == 0) return;
    const std::uint64_t word = taken_word_.load(std::memory_order_acquire);
    if (word == protocol::flag_unset) return;  // no collective has posted yet
    const std::uint32_t seq = protocol::flag_seq(word), sig = protocol::flag_signature(word);
    const std::uint32_t slot = seq & 1u;
    const std::uint32_t algo = protocol::signature_algorithm(sig);
    for (int q = 0; q < n_; ++q) {
      if (q == me_ || !closed_[q].load(std::memory_order_relaxed) || aborted_word_[q] == word) continue;
      aborted_word_[q] = word;
      const std::uint64_t value = protocol::make_flag(
          seq, protocol::abort_signature(static_cast<std::uint32_t>(protocol::failure_kind::timeout), q));
      for (std::uint32_t p = 0; p < layout_.max_parts; ++p)
        for (std::uint32_t ch = 0; ch < layout_.channels; ++ch) {
          if (!algorithm::writes_channel(algo, n_, me_, q, ch)) continue;  // a word q does not write in this call
          std::uint64_t* f = flags + layout_.flag_index(slot, p, ch);
          const std::uint64_t seen = detail::load_acquire(f);
          if (seen != protocol::flag_unset && protocol::flag_seq(seen) == seq) continue;  // arrived (or aborted)
          detail::store_release(f, value);
        }
    }
  }

  /// Reads what `q`'s connection holds, applying each complete frame: payload into the window, then the flag.
  void receive_from(int q, std::byte* window, std::uint64_t* flags) {
    rx_state& s = rx_[q];
    for (;;) {
      ssize_t k;
      if (s.hdr_got < sizeof s.hdr) {
        k = ::recv(s.conn.get(), reinterpret_cast<char*>(&s.hdr) + s.hdr_got, sizeof s.hdr - s.hdr_got, 0);
        if (k > 0) {
          s.hdr_got += static_cast<std::size_t>(k);
          if (s.hdr_got < sizeof s.hdr) continue;
          const std::string bad = sock::check_frame(s.hdr, layout_);
          if (!bad.empty()) {
            close_peer(q, "rank " + std::to_string(q) + " sent " + bad, true);
            return;
          }
          s.left = s.hdr.bytes;
          s.dst = window + layout_.data_offset(s.hdr.slot) + s.hdr.offset;
          if (s.left == 0) apply(s, flags);
          continue;
        }
      } else {
        k = ::recv(s.conn.get(), s.dst, s.left, 0);
        if (k > 0) {
          s.dst += k;
          s.left -= static_cast<std::uint64_t>(k);
          if (s.left == 0) apply(s, flags);
          continue;
        }
      }
      if (k == 0) {
        if (s.hdr_got == 0)
          close_peer(q, "rank " + std::to_string(q) + " closed its connection to this rank", false);
        else
          close_peer(q, "rank " + std::to_string(q) + "'s connection closed in the middle of a frame", true);
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close_peer(q, "receiving from rank " + std::to_string(q) + " failed (" + sock::errno_text(errno) + ")",
                 errno != ECONNRESET || s.hdr_got != 0);
      return;
    }
  }

  /// The payload of `s.hdr` is in the window: publish its flag (release: payload before flag, see the header).
  void apply(rx_state& s, std::uint64_t* flags) {
    sock::kernel_acquire();  // ThreadSanitizer only: the frame's sender ran its send before this (net.hpp)
    detail::store_release(flags + s.hdr.flag_index, s.hdr.flag_value);
    frames_rx_.fetch_add(1, std::memory_order_relaxed);
    bytes_rx_.fetch_add(s.hdr.bytes, std::memory_order_relaxed);
    s.hdr_got = 0;
    s.left = 0;
  }

  /// `q`'s incoming connection is gone: the proxy fails the next frame for `q`; `broken` (not a clean close
  /// between frames) is a failure now.
  void close_peer(int q, const std::string& why, bool broken) {
    rx_[q].conn.reset();
    close_why_[q] = why;
    closed_[q].store(true, std::memory_order_release);
    ++closed_count_;
    if (broken) record_failure(q, why);
    {
      std::lock_guard lock(fail_mu_);
      if (closed_note_.empty()) closed_note_ = "rank " + std::to_string(me_) + ": " + why;
    }
    peer_closed_aborts(reinterpret_cast<std::uint64_t*>(mem_.window.get()));
  }

  // ---- proxy thread ----------------------------------------------------------------------------------------

  void record_failure(int peer, const std::string& what) {
    std::lock_guard lock(fail_mu_);
    if (failed_.load(std::memory_order_relaxed)) return;
    failed_peer_.store(peer, std::memory_order_relaxed);
    const std::string at = peer_addr_[peer].empty() ? "" : " (" + peer_addr_[peer] + ")";
    failure_ = "rank " + std::to_string(me_) + ": socket connection to rank " + std::to_string(peer) + at + ": " +
               what + "; rank " + std::to_string(peer) +
               " is dead or unreachable, or closed its communicator; the communicator fails over to the protocol's "
               "fail-stop path";
    failure_ns_ = detail::now_ns();
    failed_.store(true, std::memory_order_release);
  }

  void fail_peer(int peer, const std::string& what) {
    out_[peer].failed = true;
    out_[peer].conn.reset();
    record_failure(peer, what);
    abort_.publish_last(mem_.window.get(), layout_, failed_peer_.load(std::memory_order_relaxed));
  }

  /// Header and payload in as few system calls as the socket allows, before `deadline`.
  std::string send_frame(int f, const sock::frame& h, const std::byte* payload, std::uint64_t deadline) {
    const std::uint64_t total = sizeof h + h.bytes;
    std::uint64_t put = 0;
    bool waited = false;
    while (put < total) {
      iovec iov[2];
      int k = 0;
      if (put < sizeof h) {
        iov[k++] = iovec{const_cast<char*>(reinterpret_cast<const char*>(&h)) + put, sizeof h - put};
        if (h.bytes) iov[k++] = iovec{const_cast<std::byte*>(payload), h.bytes};
      } else {
        iov[k++] = iovec{const_cast<std::byte*>(payload) + (put - sizeof h), total - put};
      }
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = static_cast<std::size_t>(k);
      const ssize_t r = ::sendmsg(f, &m, MSG_NOSIGNAL);
      if (r >= 0) {
        put += static_cast<std::uint64_t>(r);
        continue;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return "send failed (" + sock::errno_text(errno) + ")";
      if (!waited) send_waits_.fetch_add(1, std::memory_order_relaxed), waited = true;
      if (detail::now_ns() >= deadline)
        return "a frame of " + std::to_string(total) + " bytes was not taken within " +
               std::to_string(static_cast<double>(deadline_budget()) / 1e6) + " ms (" + std::to_string(put) + " sent)";
      pollfd p{f, POLLOUT, 0};
      ::poll(&p, 1, sock::poll_ms(deadline));
    }
    return {};
  }

  std::uint64_t deadline_budget() const {
    if (proxy_.stopping()) return timeout_ns_ != 0 && timeout_ns_ < 1'000'000'000ull ? timeout_ns_ : 1'000'000'000ull;
    return timeout_ns_ != 0 ? timeout_ns_ : ~std::uint64_t{0} / 2;
  }

  /// One frame per peer; a whole call (all_peers) sends the same frame to every peer, starting after this rank.
  void post_one(const post& e) {
    const std::uint32_t seq = protocol::flag_seq(e.flag_value);
    abort_.taken(seq);
    if (!protocol::is_abort(protocol::flag_signature(e.flag_value)))  // the receiver's peer_closed_aborts
      taken_word_.store(e.flag_value, std::memory_order_release);
    if (failed()) abort_.publish(mem_.window.get(), layout_, seq, failed_peer_.load(std::memory_order_relaxed));
    if (e.peer != all_peers) return send_to(static_cast<int>(e.peer), e);
    for (int k = 1; k < n_; ++k) send_to((me_ + k) % n_, e);
  }

  void send_to(int peer, const post& e) {
    const std::uint64_t at = layout_.data_offset(e.slot) + e.offset;
    if (peer == me_) {  // never posted by the algorithms; applied locally for completeness
      if (e.bytes) std::memcpy(mem_.window.get() + at, mem_.staging.get() + at, e.bytes);
      detail::store_release(reinterpret_cast<std::uint64_t*>(mem_.window.get()) + e.flag_index, e.flag_value);
      return;
    }
    peer_out& o = out_[peer];
    if (o.failed) return;
    if (!reach_.ok[peer]) {
      fail_peer(peer, "a frame for a peer that start-up could not connect (" + reach_.why[peer] + ")");
      return;
    }
    if (closed_[peer].load(std::memory_order_acquire)) {  // nobody reads it; the receiver names the peer (header)
      o.failed = true;
      o.conn.reset();
      return;
    }
    const sock::frame h{sock::frame_magic, e.slot, e.offset, e.bytes, e.flag_index, e.flag_value};
    const std::uint64_t deadline = proxy_.stopping() ? deadline_ns_ : detail::now_ns() + deadline_budget();
    const std::byte* payload = mem_.staging.get() + at;
#ifdef ROCENANTE_TSAN
    // ThreadSanitizer only (net.hpp): the read of staging must come before the release that the peer's receiver
    // acquires, and the peer may receive the frame before sendmsg() returns here; so read it into a proxy-private
    // copy first, release, then send the copy.
    tsan_copy_.assign(payload, payload + e.bytes);
    payload = tsan_copy_.data();
    sock::kernel_release();
#endif
    proxy_.count_writes(1);  // payload and flag travel in one frame; counted before the peer can see it
    const std::string why = send_frame(o.conn.get(), h, payload, deadline);
    if (!why.empty()) {
      fail_peer(peer, why);
      return;
    }
    proxy_.count_bytes(e.bytes);
  }

  // Hooks of the shared proxy loop: at teardown every send waits at most min(timeout, 1 s).
  void before_final_drain() { deadline_ns_ = detail::now_ns() + deadline_budget(); }

  /// Sender-side state of one outgoing connection (proxy thread only, after set-up).
  struct peer_out {
    sock::fd conn;
    bool failed = false;
  };

  protocol::window_layout layout_;
  socket_config cfg_;
  std::uint64_t timeout_ns_;
  int me_ = 0, n_ = 0;
  proxy_memory<Mapping> mem_;
  sock::address_choice choice_;
  std::uint16_t port_ = 0;
  sock::fd listen_;
  std::vector<peer_out> out_;                     // [peer]: proxy thread
  std::vector<rx_state> rx_;                      // [peer]: receiver thread
  pair_reach reach_;                              // set-up outcome; written before the threads start
  std::vector<std::string> peer_addr_;            // [peer]: "ip:port" this rank connected to
  std::unique_ptr<std::atomic<bool>[]> closed_;   // [peer]: incoming connection gone (receiver writes, proxy reads)
  std::vector<std::string> close_why_;            // [peer]: written before closed_ is released
  std::vector<std::uint64_t> aborted_word_;       // [peer]: taken_word_ peer_closed_aborts last ran for (receiver)
  int closed_count_ = 0;                          // peers closed (receiver thread only)
  std::string closed_note_;                       // the first close, for failure_message() (under fail_mu_)
  std::atomic<std::uint64_t> taken_word_{protocol::flag_unset};  // flag word of the last call descriptor taken
  proxy_handle handle_{};
  mutable std::mutex fail_mu_;
  std::atomic<bool> failed_{false};
  std::atomic<int> failed_peer_{-1};
  std::string failure_;
  std::uint64_t failure_ns_ = 0;
  local_abort abort_;                             // proxy thread only
  std::uint64_t deadline_ns_ = ~std::uint64_t{0};
  std::atomic<std::uint64_t> frames_rx_{0}, bytes_rx_{0}, send_waits_{0};
  std::atomic<bool> rx_stop_{false};
  std::vector<std::byte> tsan_copy_;  // ThreadSanitizer builds only (post_one)
  std::thread receiver_;
  proxy_thread proxy_;  // last member: stopped first
};
/// The host executor's socket transport.
using socket = basic_socket<host_mapping>;
static_assert(check_transport<socket>());

}  // namespace rocenante::transport
