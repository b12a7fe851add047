// benchmarks/nvfp4_error.cpp — numbers for docs/nvfp4.md, measured with the host executor (host::nvfp4_communicator
// over loopback_proxy, so the bytes each rank's proxy moved are counted, not modelled):
//
//   error    bf16 all-reduce, plain one_shot vs NVFP4-wire one_shot_fp4, against the float64 sum of the same bf16
//            inputs: relative RMS error, largest absolute error, and per 16-element block the largest error over
//            the block's largest |reference| (p50, p99, max over blocks); inputs Gaussian N(0,1), Student-t (3 dof),
//            outlier-heavy (N(0,1), 0.1% of elements x100, 4 of every 4096 channels x20); 2, 4, 8 ranks.
//   latency  median time per collective, plain vs NVFP4 wire, 48 KiB .. 16 MiB of bf16 per rank, proxy mode; and the
//            latency of a 1-element fp32 all-reduce: what an agreement round on the global scale would add.
//   wire     bytes rank 0's proxy moved per collective, with the exact formula next to it.
//
// Usage: nvfp4-error [--out DIR] [--elements N] [--quick]        writes DIR/error.json and DIR/latency_host.json
// Each JSON file records the command line, the git commit (ROCENANTE_COMMIT or `git rev-parse HEAD` in the source
// tree), the UTC date and the machine.
#include <rocenante/host/nvfp4.hpp>
#include <rocenante/host/spawn.hpp>
#include <rocenante/transport/loopback_proxy.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/utsname.h>

using namespace rocenante;
using bf16 = __nv_bfloat16;

namespace {

std::string shell(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string provenance(const std::string& command) {
  std::string commit = std::getenv("ROCENANTE_COMMIT") ? std::getenv("ROCENANTE_COMMIT") : "";
#ifdef ROCENANTE_SOURCE_DIR
  if (commit.empty()) commit = shell(std::string("git -C '") + ROCENANTE_SOURCE_DIR + "' rev-parse HEAD 2>/dev/null");
#endif
  char date[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  utsname u{};
  uname(&u);
  std::ostringstream o;
  o << "  \"command\": \"" << command << "\",\n  \"commit\": \"" << commit << "\",\n  \"date\": \"" << date
    << "\",\n  \"machine\": \"" << u.sysname << " " << u.release << " " << u.machine << ", "
    << std::thread::hardware_concurrency() << " hardware threads (shared with other jobs)\",\n"
    << "  \"loadavg_at_start\": \"" << shell("cat /proc/loadavg") << "\",\n"
    << "  \"executor\": \"host::nvfp4_communicator<loopback_proxy>: ranks are threads of one process, a CPU proxy "
       "thread per rank copies each payload\",\n";
  return o.str();
}

enum class dist { gaussian, student_t3, outliers };
const char* dist_name(dist d) { return d == dist::gaussian ? "gaussian" : d == dist::student_t3 ? "student_t3" : "outliers"; }

std::vector<bf16> make_input(dist d, std::size_t count, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::student_t_distribution<float> td(3.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<bf16> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    float x = d == dist::student_t3 ? td(g) : nd(g);
    if (d == dist::outliers) {
      if (u(g) < 1e-3f) x *= 100.0f;
      if (i % 4096 < 4) x *= 20.0f;
    }
    v[i] = __float2bfloat16_rn(x);
  }
  return v;
}

struct error_stats {
  double rel_rms, max_abs, block_p50, block_p99, block_max;
};

error_stats measure(const std::vector<std::vector<bf16>>& in, const std::vector<bf16>& out) {
  const std::size_t count = out.size();
  double se = 0, sr = 0, max_abs = 0;
  std::vector<double> block;
  for (std::size_t b = 0; b < (count + 15) / 16; ++b) {
    double bmax_err = 0, bmax_ref = 0;
    for (std::size_t i = b * 16; i < std::min(count, b * 16 + 16); ++i) {
      double ref = 0;
      for (const auto& x : in) ref += __bfloat162float(x[i]);
      const double e = std::fabs(double(__bfloat162float(out[i])) - ref);
      se += e * e;
      sr += ref * ref;
      max_abs = std::max(max_abs, e);
      bmax_err = std::max(bmax_err, e);
      bmax_ref = std::max(bmax_ref, std::fabs(ref));
    }
    if (bmax_ref > 0) block.push_back(bmax_err / bmax_ref);
  }
  std::sort(block.begin(), block.end());
  auto pct = [&](double p) { return block.empty() ? 0.0 : block[std::min(block.size() - 1, std::size_t(p * block.size()))]; };
  return {std::sqrt(se / sr), max_abs, pct(0.5), pct(0.99), block.empty() ? 0.0 : block.back()};
}

options make_options(std::size_t capacity) {
  options o;  // the GPU defaults for parts: up to 16 parts of at least 4 KiB
  o.capacity_bytes = capacity;
  o.max_parts = 16;
  o.min_part_bytes = 4096;
  o.timeout_ns = 120'000'000'000ull;
  return o;
}

/// Bytes this rank's proxy has sent so far, read after every rank finished and the proxies went idle, so that no
/// post is still in flight. Every rank calls it (barriers).
template <class Comm>
std::uint64_t settled_bytes(bootstrap::in_process& b, Comm& c) {
  b.barrier();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto v = c.transport().stats().bytes;
  b.barrier();
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = ".";
  std::size_t elements = 1 << 20;
  bool quick = false;
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) dir = argv[++i];
    else if (a == "--elements" && i + 1 < argc) elements = std::stoull(argv[++i]);
    else if (a == "--quick") quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--out DIR] [--elements N] [--quick]\n", argv[0]);
      return 2;
    }
  }
  const std::string prov = provenance(command);

  // --- error -------------------------------------------------------------------------------------------------------
  std::ostringstream ej;
  ej << "{\n" << prov << "  \"elements_per_rank\": " << elements << ",\n  \"input_dtype\": \"bf16\",\n"
     << "  \"reference\": \"float64 sum of the bf16 inputs\",\n"
     << "  \"metrics\": \"rel_rms = sqrt(sum err^2 / sum ref^2); max_abs = max |err|; block_* = percentiles over "
        "16-element blocks of max|err| / max|ref| in the block\",\n  \"results\": [\n";
  bool first = true;
  std::atomic<int> failures{0};
  for (dist d : {dist::gaussian, dist::student_t3, dist::outliers}) {
    for (int n : {2, 4, 8}) {
      std::vector<std::vector<bf16>> in(n), plain(n), wire(n);
      std::vector<std::uint64_t> bytes_plain(n), bytes_wire(n);
      std::uint32_t parts = 0;
      host::spawn_ranks(n, [&](bootstrap::in_process& b) {
        const int r = b.rank();
        host::nvfp4_communicator<transport::loopback_proxy> c(b, make_options(elements * 2));
        in[r] = make_input(d, elements, 1000u * n + 17u * r + static_cast<std::uint32_t>(d));
        plain[r].resize(elements);
        wire[r].resize(elements);
        const auto s0 = settled_bytes(b, c);
        if (c.all_reduce(in[r].data(), plain[r].data(), elements) != status::ok) ++failures;
        const auto s1 = settled_bytes(b, c);
        if (c.all_reduce_fp4(in[r].data(), wire[r].data(), elements) != status::ok) ++failures;
        const auto s2 = settled_bytes(b, c);
        bytes_plain[r] = s1 - s0;
        bytes_wire[r] = s2 - s1;
        if (r == 0) parts = c.template fp4_parts<bf16>(elements);
      });
      for (int r = 1; r < n; ++r)
        if (std::memcmp(wire[r].data(), wire[0].data(), elements * 2) != 0 || std::memcmp(plain[r].data(), plain[0].data(), elements * 2) != 0) {
          std::fprintf(stderr, "FAIL: rank %d output differs from rank 0\n", r);
          ++failures;
        }
      const error_stats ep = measure(in, plain[0]), ew = measure(in, wire[0]);
      const std::uint64_t model = (n - 1) * algorithm::one_shot_fp4::payload_bytes(elements, parts);
      std::printf("%-10s n=%d  plain: rel_rms %.3e max_abs %.3e block p50/p99/max %.3e/%.3e/%.3e  wire bytes %llu\n"
                  "%-10s      nvfp4: rel_rms %.3e max_abs %.3e block p50/p99/max %.3e/%.3e/%.3e  wire bytes %llu (model %llu)\n",
                  dist_name(d), n, ep.rel_rms, ep.max_abs, ep.block_p50, ep.block_p99, ep.block_max,
                  (unsigned long long)bytes_plain[0], "", ew.rel_rms, ew.max_abs, ew.block_p50, ew.block_p99, ew.block_max,
                  (unsigned long long)bytes_wire[0], (unsigned long long)model);
      for (int k = 0; k < 2; ++k) {
        const error_stats& e = k ? ew : ep;
        ej << (first ? "" : ",\n") << "    {\"input\": \"" << dist_name(d) << "\", \"ranks\": " << n << ", \"wire\": \""
           << (k ? "nvfp4" : "bf16") << "\", \"rel_rms\": " << e.rel_rms << ", \"max_abs\": " << e.max_abs
           << ", \"block_rel_p50\": " << e.block_p50 << ", \"block_rel_p99\": " << e.block_p99
           << ", \"block_rel_max\": " << e.block_max << ", \"wire_bytes_rank0\": " << (k ? bytes_wire[0] : bytes_plain[0])
           << ", \"wire_bytes_model\": " << (k ? model : (n - 1) * elements * 2) << ", \"parts\": " << (k ? parts : 0)
           << ", \"ranks_identical\": true}";
        first = false;
      }
    }
  }
  ej << "\n  ]\n}\n";
  std::ofstream(dir + "/error.json") << ej.str();

  // --- latency -----------------------------------------------------------------------------------------------------
  std::ostringstream lj;
  lj << "{\n" << prov << "  \"metric\": \"median wall time per collective over reps, measured on rank 0 between "
        "barriers (all ranks enter together)\",\n  \"results\": [\n";
  first = true;
  const std::vector<std::size_t> sizes = {49152, 262144, 1 << 20, 4 << 20, 16 << 20};
  for (int n : {2, 4}) {
    const std::size_t cap = sizes.back();
    host::spawn_ranks(n, [&](bootstrap::in_process& b) {
      const int r = b.rank();
      host::nvfp4_communicator<transport::loopback_proxy> c(b, make_options(cap));
      const std::vector<bf16> x = make_input(dist::gaussian, cap / 2, 77 + r);
      std::vector<bf16> y(cap / 2);
      auto timed = [&](auto&& call, int reps) {
        std::vector<double> t;
        for (int k = 0; k < reps + 1; ++k) {
          b.barrier();
          const auto t0 = std::chrono::steady_clock::now();
          if (call() != status::ok) ++failures;
          const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
          if (k) t.push_back(us);  // first call warms up
        }
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
      };
      for (std::size_t bytes : sizes) {
        const std::size_t count = bytes / 2;
        const int reps = quick ? 3 : (bytes >= (4u << 20) ? 7 : 31);
        const auto s0 = settled_bytes(b, c);
        const double tp = timed([&] { return c.all_reduce(x.data(), y.data(), count); }, reps);
        const auto s1 = settled_bytes(b, c);
        const double tw = timed([&] { return c.all_reduce_fp4(x.data(), y.data(), count); }, reps);
        const auto s2 = settled_bytes(b, c);
        if (r == 0) {
          const std::uint32_t parts = c.template fp4_parts<bf16>(count);
          const double bp = double(s1 - s0) / (reps + 1), bw = double(s2 - s1) / (reps + 1);
          std::printf("latency n=%d bytes=%zu  bf16 %.1f us (%.0f B/coll)  nvfp4 %.1f us (%.0f B/coll, model %llu)\n", n,
                      bytes, tp, bp, tw, bw, (unsigned long long)((n - 1) * algorithm::one_shot_fp4::payload_bytes(count, parts)));
          lj << (first ? "" : ",\n") << "    {\"ranks\": " << n << ", \"bytes\": " << bytes << ", \"bf16_us\": " << tp
             << ", \"nvfp4_us\": " << tw << ", \"bf16_wire_bytes_rank0\": " << bp << ", \"nvfp4_wire_bytes_rank0\": " << bw
             << ", \"nvfp4_wire_bytes_model\": " << (n - 1) * algorithm::one_shot_fp4::payload_bytes(count, parts)
             << ", \"parts\": " << parts << "}";
          first = false;
        }
      }
      float one = 1.0f, out = 0.0f;
      const double ta = timed([&] { return c.all_reduce(&one, &out, 1); }, quick ? 3 : 101);
      if (r == 0) {
        std::printf("agreement round (1-element fp32 all-reduce) n=%d: %.1f us\n", n, ta);
        lj << ",\n    {\"ranks\": " << n << ", \"what\": \"1-element fp32 all-reduce (cost of agreeing on a global scale per "
              "call)\", \"us\": " << ta << "}";
      }
    });
  }
  lj << "\n  ]\n}\n";
  std::ofstream(dir + "/latency_host.json") << lj.str();
  if (failures) std::fprintf(stderr, "FAIL: %d collectives failed or ranks differed\n", failures.load());
  return failures ? 1 : 0;
}
