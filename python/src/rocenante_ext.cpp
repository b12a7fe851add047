// python/src/rocenante_ext.cpp — the nanobind extension behind the `rocenante` package (module rocenante._ext).
// A thin layer over host::selected_communicator and, in a build with nvcc (ROCENANTE_PY_GPU), the GPU executor:
// gpu_executor.hpp, an interface over gpu::selected_communicator compiled in its own translation unit, so that no
// kernel is compiled here. Arrays arrive through DLPack (nb::ndarray), so NumPy, torch, CuPy and JAX arrays all work
// without tying the build to one of them; the dtype is read from the array here (element_of) and handed to the C++
// runtime dispatch (host::dispatch_dtype, behind both executors). The GIL is released during set-up and
// collectives, and re-acquired only inside a Python bootstrap callback.
//
// Errors: set-up throws the C++ exceptions, translated to rocenante.Error subclasses; a collective returns
// (status, message) and the Python layer raises CollectiveError, so that the message is the C++ one.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <span>
#include <tuple>
#include <variant>
#include <vector>

#include <rocenante/bootstrap/in_process.hpp>
#include <rocenante/core/error.hpp>
#include <rocenante/host/select.hpp>

#if ROCENANTE_PY_GPU
#include "gpu_executor.hpp"
#else
#define ROCENANTE_PY_GPU 0
#endif

#if __has_include(<rocenante/bootstrap/tcp.hpp>)
#include <rocenante/bootstrap/tcp.hpp>
#define ROCENANTE_PY_HAS_TCP 1
#else
#define ROCENANTE_PY_HAS_TCP 0
#endif

namespace nb = nanobind;
using namespace nb::literals;
namespace rc = rocenante;

namespace {

using array = nb::ndarray<nb::ro>;  // read-only view accepted for inputs; outputs are checked for writability below

/// The element type of an array as rocenante sees it, or why there is none ("int32" etc.).
struct element {
  std::optional<rc::dtype> t;
  std::string name;
};

std::string dlpack_name(nb::dlpack::dtype d) {
  const char* kind = "?";
  switch (static_cast<nb::dlpack::dtype_code>(d.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: kind = "bool"; break;
    default: break;
  }
  return std::string(kind) + std::to_string(d.bits) + (d.lanes != 1 ? "x" + std::to_string(d.lanes) : "");
}

/// `as`: an explicit dtype ("bf16" for a uint16 view of bfloat16 data, as NumPy has no bfloat16 of its own).
element element_of(const array& a, const std::optional<std::string>& as) {
  const nb::dlpack::dtype d = a.dtype();
  element e{std::nullopt, dlpack_name(d)};
  if (as) {
    const rc::dtype t = *as == "f32" ? rc::dtype::f32 : *as == "f16" ? rc::dtype::f16 : rc::dtype::bf16;
    if (d.bits == 8 * rc::host::element_bytes(t) && d.lanes == 1) e.t = t;
    e.name += " viewed as " + *as;
    return e;
  }
  if (d.lanes != 1) return e;
  if (d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) && d.bits == 32) e.t = rc::dtype::f32;
  if (d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float) && d.bits == 16) e.t = rc::dtype::f16;
  if (d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat) && d.bits == 16) e.t = rc::dtype::bf16;
  return e;
}

bool c_contiguous(const array& a) {
  if (a.size() == 0) return true;  // strides of an empty array mean nothing
  std::int64_t expect = 1;
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect) return false;
    expect *= static_cast<std::int64_t>(a.shape(i));
  }
  return true;
}

/// Where a communicator's arrays must live: the CPU (host executor), or CUDA device `device` (GPU executor).
struct placement {
  bool gpu = false;
  int device = 0;
};

/// Rank-invariant facts of a call's arrays that decide whether it can run (the pointers are not among them: a
/// misaligned pointer is staged, see aligned_buffer). Empty: fine.
std::string array_problem(const array& x, const element& e, const char* what, placement where = {}) {
  if (!where.gpu && x.device_type() != nb::device::cpu::value)
    return std::string(what) + " lives on a device the host executor cannot reach (DLPack device type " +
           std::to_string(x.device_type()) + ")" +
           (ROCENANTE_PY_GPU ? "; this communicator runs the host executor: pass CPU arrays, or build it with device=... "
                               "for CUDA arrays"
                             : "; this build has the host executor only: pass CPU arrays");
  if (where.gpu && x.device_type() != nb::device::cuda::value)
    return std::string(what) + " is not a CUDA array (DLPack device type " + std::to_string(x.device_type()) +
           "); this communicator runs on CUDA device " + std::to_string(where.device) + ": pass arrays on that device";
  if (where.gpu && x.device_id() != where.device)
    return std::string(what) + " is on CUDA device " + std::to_string(x.device_id()) + ", this communicator on device " +
           std::to_string(where.device);
  if (!e.t) return std::string(what) + " has dtype " + e.name + "; rocenante reduces float32, float16 and bfloat16";
  if (!c_contiguous(x)) return std::string(what) + " is not C-contiguous; pass a contiguous array (e.g. numpy.ascontiguousarray)";
  return {};
}

/// An array's data, or an aligned copy of it when its address is not a multiple of its element size (views at odd
/// byte offsets): whether a call runs must not depend on a pointer value, which differs between ranks.
struct aligned_buffer {
  void* data = nullptr;
  std::vector<std::uint64_t> copy;
  void* user = nullptr;
  std::size_t bytes = 0;

  aligned_buffer(void* p, std::size_t nbytes, std::size_t elem, bool fill) : data(p), user(p), bytes(nbytes) {
    if (elem == 0 || reinterpret_cast<std::uintptr_t>(p) % elem == 0) return;
    copy.resize((nbytes + 7) / 8);
    data = copy.data();
    if (fill) std::memcpy(data, p, nbytes);
  }
  void write_back() {
    if (data != user) std::memcpy(user, data, bytes);
  }
};

std::optional<rc::algorithm::algo> parse_algo(const std::string& a) {
  if (a == "auto") return std::nullopt;
  if (a == "one_shot") return rc::algorithm::algo::one_shot;
  if (a == "two_shot") return rc::algorithm::algo::two_shot;
  if (a == "ring") return rc::algorithm::algo::ring;
  throw rc::config_error("algo must be \"auto\", \"one_shot\", \"two_shot\" or \"ring\", got \"" + a + "\"");
}

/// `gpu`: the GPU executor's names too (cuda_ipc, nccl); loopback is the host executor's alone.
std::optional<rc::env::transport_choice> parse_transport(const std::string& t, bool gpu) {
  using rc::env::transport_choice;
  if (t == "env") return std::nullopt;  // ROCENANTE_TRANSPORT decides
  if (t == "auto") return transport_choice::automatic;
  if (t == "socket") return transport_choice::socket;
  if (t == "ibverbs") return transport_choice::ibverbs;
  if (!gpu && t == "loopback") return transport_choice::loopback;
  if (gpu && t == "cuda_ipc") return transport_choice::cuda_ipc;
  if (gpu && t == "nccl") return transport_choice::nccl;
  if (gpu)
    throw rc::config_error("transport of a GPU communicator must be \"auto\", \"cuda_ipc\", \"ibverbs\", \"socket\", "
                           "\"nccl\" or \"env\", got \"" + t + "\"");
  throw rc::config_error("transport must be \"auto\", \"loopback\", \"socket\", \"ibverbs\" or \"env\", got \"" + t + "\"");
}

class world {
 public:
  world(int size, double timeout_s)
      : w_(size, std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000))) {}
  rc::bootstrap::in_process_world& get() { return w_; }
  int size() const { return w_.size(); }

 private:
  rc::bootstrap::in_process_world w_;
};

/// A Python callable all_gather(bytes) -> bytes (every rank's bytes concatenated in rank order) as a C++ bootstrap.
/// Called with the GIL released by the set-up; takes it for the call.
class python_bootstrap {
 public:
  python_bootstrap(int rank, int size, nb::callable fn) : rank_(rank), size_(size), fn_(std::move(fn)) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  void all_gather(const void* send, void* recv, std::size_t bytes) {
    nb::gil_scoped_acquire gil;
    try {
      nb::object r = fn_(nb::bytes(static_cast<const char*>(send), bytes));
      nb::bytes b = nb::cast<nb::bytes>(r);
      const std::size_t want = bytes * static_cast<std::size_t>(size_);
      if (b.size() != want)
        throw rc::bootstrap_error("rank " + std::to_string(rank_) + ": the all_gather callback returned " +
                                  std::to_string(b.size()) + " bytes, expected " + std::to_string(want) +
                                  " (every rank's bytes, in rank order)");
      std::memcpy(recv, b.c_str(), want);
    } catch (nb::python_error& e) {
      const std::string what = nb::borrow<nb::str>(nb::str(e.type().attr("__name__"))).c_str() + std::string(": ") +
                               nb::str(e.value()).c_str();
      throw rc::bootstrap_error("rank " + std::to_string(rank_) + ": the all_gather callback raised " + what);
    } catch (const nb::cast_error&) {
      throw rc::bootstrap_error("rank " + std::to_string(rank_) + ": the all_gather callback must return bytes");
    }
  }
  void barrier() {
    char one = 0;
    std::vector<char> all(static_cast<std::size_t>(size_));
    all_gather(&one, all.data(), 1);
  }

 private:
  int rank_, size_;
  nb::callable fn_;
};

struct config {
  std::uint64_t max_bytes;
  double timeout_s;
  std::string transport;
  std::string algo;
  std::uint64_t symmetric_bytes = 0;  // options::symmetric_bytes: the symmetric input area (0: none)
};

/// One rank of a communicator over the host executor (CPU arrays) or, in a build with nvcc, the GPU executor (CUDA
/// arrays on one device, calls enqueued on a stream): the argument checks, the refusal of a bad call and the state
/// are the same for both; only the call itself differs (run_host, run_gpu).
class communicator {
 public:
  static std::unique_ptr<communicator> in_process(world& w, int rank, const config& c) {
    auto self = std::unique_ptr<communicator>(new communicator);
    self->boot_ = std::make_unique<rc::bootstrap::in_process>(w.get(), rank);
    self->world_ref_ = nb::find(&w);
    self->build(c);
    return self;
  }
  static std::unique_ptr<communicator> callback(int rank, int size, nb::callable fn, const config& c,
                                                std::optional<int> device) {
    if (size < 1 || rank < 0 || rank >= size)
      throw rc::config_error("rank " + std::to_string(rank) + " is outside [0, " + std::to_string(size) + ")");
    auto self = std::unique_ptr<communicator>(new communicator);
    self->boot_ = std::make_unique<python_bootstrap>(rank, size, std::move(fn));
    self->build(c, device);
    return self;
  }
#if ROCENANTE_PY_HAS_TCP
  static std::unique_ptr<communicator> from_env(const config& c, std::optional<double> bootstrap_timeout_s,
                                                std::optional<int> device) {
    auto self = std::unique_ptr<communicator>(new communicator);
    std::optional<std::chrono::milliseconds> timeout;
    if (bootstrap_timeout_s) timeout = std::chrono::milliseconds(static_cast<std::int64_t>(*bootstrap_timeout_s * 1000));
    {
      nb::gil_scoped_release nogil;  // a bad variable is told to rank 0 before the error is raised (tcp::from_env)
      self->boot_ = std::make_unique<rc::bootstrap::tcp>(rc::bootstrap::tcp::from_env(timeout));
    }
    self->build(c, device);
    return self;
  }
#endif

  ~communicator() { close(); }

  /// (status, message): status "ok" and an empty message on success. `stream`: the GPU executor's stream (a
  /// cudaStream_t's value); the host executor ignores it (the Python layer refuses a stream there).
  std::tuple<std::string, std::string> all_reduce(nb::handle xo, nb::handle outo, const std::string& algo,
                                                   std::optional<std::string> as, std::uintptr_t stream) {
    live();
    std::optional<rc::algorithm::algo> a;
    std::string why;
    try {
      a = parse_algo(algo);
    } catch (const rc::config_error& err) {
      why = err.what();  // refused like bad input, so that the peers do not wait for this rank
    }
    const bool has_out = !outo.is_none();
    array x, y;
    if (why.empty()) why = take(xo, x, "input", !has_out);
    if (why.empty() && has_out) why = take(outo, y, "output", true);
    if (!why.empty()) return refuse(why, rc::status::invalid_argument, stream);
    if (!has_out) y = x;
    const element e = element_of(x, as);
    why = array_problem(x, e, "input", where_);
    if (why.empty() && has_out) why = array_problem(y, element_of(y, as), "output", where_);
    if (why.empty() && element_of(y, as).name != e.name) why = "output dtype differs from the input's (" + e.name + ")";
    if (why.empty() && y.size() != x.size())
      why = "output has " + std::to_string(y.size()) + " elements, the input " + std::to_string(x.size());
    if (!why.empty()) return refuse(why, e.t ? rc::status::invalid_argument : rc::status::not_supported, stream);
#if ROCENANTE_PY_GPU
    if (gpu_) return run_gpu([&] { return gpu_->all_reduce(x.data(), const_cast<void*>(y.data()), x.size(), *e.t, a, stream); });
#endif
    auto& c = *comm_;
    return run_host(x, y, e, [&](const void* in, void* o) {
      return a ? c.all_reduce(in, o, x.size(), *e.t, *a) : c.all_reduce(in, o, x.size(), *e.t, rc::algorithm::automatic{});
    });
  }

  std::tuple<std::string, std::string> all_gather(nb::handle xo, nb::handle outo, std::optional<std::string> as,
                                                   std::uintptr_t stream) {
    live();
    array x, out;
    std::string why = take(xo, x, "input", false);
    if (why.empty()) why = take(outo, out, "output", true);
    if (!why.empty()) return refuse(why, rc::status::invalid_argument, stream);
    const element e = element_of(x, as);
    why = array_problem(x, e, "input", where_);
    if (why.empty()) why = array_problem(out, element_of(out, as), "output", where_);
    if (why.empty() && element_of(out, as).name != e.name) why = "output dtype differs from the input's (" + e.name + ")";
    const std::size_t want = x.size() * static_cast<std::size_t>(size_);
    if (why.empty() && out.size() != want)
      why = "output has " + std::to_string(out.size()) + " elements; all_gather needs size() * input elements = " +
            std::to_string(want);
    if (why.empty() && overlap(x, out)) why = "input and output overlap";
    if (!why.empty()) return refuse(why, e.t ? rc::status::invalid_argument : rc::status::not_supported, stream);
#if ROCENANTE_PY_GPU
    if (gpu_) return run_gpu([&] { return gpu_->all_gather(x.data(), const_cast<void*>(out.data()), x.size(), *e.t, stream); });
#endif
    auto& c = *comm_;
    return run_host(x, out, e, [&](const void* in, void* o) { return c.all_gather(in, o, x.size(), *e.t); });
  }

  /// Empty when a call with this array would run; rank-invariant (no pointers), never poisons.
  std::string refusal(nb::handle xo, const std::string& algo, const std::string& collective,
                      std::optional<std::string> as) {
    live();
    array x;
    if (std::string why = take(xo, x, "input", false); !why.empty()) return why;
    const element e = element_of(x, as);
    std::string why = array_problem(x, e, "input", where_);
    if (!why.empty()) return why;
    const auto coll = collective == "all_gather" ? rc::protocol::collective::all_gather : rc::protocol::collective::all_reduce;
#if ROCENANTE_PY_GPU
    if (gpu_) return gpu_->refusal(x.size(), *e.t, parse_algo(algo), coll);
#endif
    return comm_->refusal(x.size(), *e.t, parse_algo(algo), coll);
  }

  /// Refuses this call for a reason the Python layer found (as a bad array would be refused: peers are told).
  std::tuple<std::string, std::string> reject(const std::string& why, std::uintptr_t stream) {
    live();
    return refuse(why, rc::status::invalid_argument, stream);
  }

  std::tuple<bool, std::string, std::string> health() const {
    if (closed()) return {false, "closed", "rocenante rank " + std::to_string(rank_) + ": the communicator is closed"};
#if ROCENANTE_PY_GPU
    const rc::host::health h = gpu_ ? gpu_->check_health() : comm_->check_health();
#else
    const rc::host::health h = comm_->check_health();
#endif
    return {h.ok(), rc::to_string(h.state), h.message};
  }
  std::string last_error() const {
#if ROCENANTE_PY_GPU
    if (gpu_) return gpu_->last_error();
#endif
    return comm_ ? comm_->last_error() : std::string();
  }
  std::uint64_t failures() const {
#if ROCENANTE_PY_GPU
    if (gpu_) return gpu_->failures();
#endif
    return comm_ ? comm_->failures() : 0;
  }
  std::string decision() const { return decision_; }
  /// This rank's symmetric input area as (address, bytes): device memory of a GPU communicator, host memory of the
  /// host executor; (0, 0) where the transport has none (options::symmetric_bytes).
  std::pair<std::uintptr_t, std::size_t> symmetric_input() {
#if ROCENANTE_PY_GPU
    if (gpu_) return gpu_->symmetric_input();
#endif
    if (!comm_) return {0, 0};
    const std::span<std::byte> a = comm_->symmetric_input();
    return {reinterpret_cast<std::uintptr_t>(a.data()), a.size()};
  }
  std::uint32_t first_call_sequence() const { return first_call_seq_; }
  std::string transport() const { return transport_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The CUDA device of a GPU communicator; None for the host executor.
  std::optional<int> device() const { return where_.gpu ? std::optional<int>(where_.device) : std::nullopt; }
  bool closed() const {
#if ROCENANTE_PY_GPU
    if (gpu_) return false;
#endif
    return !comm_;
  }

  /// Frees the communicator; returns without waiting for peers (a dead peer cannot hold it up).
  void close() {
    std::unique_ptr<rc::host::selected_communicator> c = std::move(comm_);
#if ROCENANTE_PY_GPU
    std::unique_ptr<rc::python::gpu_executor> g = std::move(gpu_);
#endif
    if (PyGILState_Check()) {
      nb::gil_scoped_release nogil;
      c.reset();
#if ROCENANTE_PY_GPU
      g.reset();
#endif
    }
  }

 private:
  communicator() = default;

  void build(const config& c, std::optional<int> device = std::nullopt) {
    rc::options o;
    o.capacity_bytes = c.max_bytes;
    o.timeout_ns = static_cast<std::uint64_t>(c.timeout_s * 1e9);
    o.symmetric_bytes = c.symmetric_bytes;
    rc::host::select_config sc;
    sc.transport = parse_transport(c.transport, device.has_value());
    if (c.algo != "env") {  // "env": ROCENANTE_ALGO decides
      const std::optional<rc::algorithm::algo> a = parse_algo(c.algo);
      sc.algo = !a                                    ? rc::env::algo_choice::automatic
                : *a == rc::algorithm::algo::ring     ? rc::env::algo_choice::ring
                : *a == rc::algorithm::algo::two_shot ? rc::env::algo_choice::two_shot
                                                      : rc::env::algo_choice::one_shot;
    }
    if (device) {
#if ROCENANTE_PY_GPU
      const rc::python::gpu_settings gs{o.capacity_bytes, o.timeout_ns, *device, o.symmetric_bytes};
      std::visit([&](auto& b) {
        nb::gil_scoped_release nogil;
        gpu_ = rc::python::make_gpu_executor(rc::bootstrap::bootstrap_ref(*b), gs, sc);
      }, boot_);
      rank_ = gpu_->rank();
      size_ = gpu_->size();
      decision_ = gpu_->decision();
      first_call_seq_ = gpu_->first_call_sequence();
      transport_ = gpu_->transport();
      where_ = {true, gpu_->device()};
      return;
#else
      throw rc::config_error("this build of rocenante has the host executor only (built without nvcc): reinstall it "
                             "with -Csetup-args=-Dcuda=enabled for CUDA arrays");
#endif
    }
    std::visit([&](auto& b) {
      nb::gil_scoped_release nogil;
      comm_ = std::make_unique<rc::host::selected_communicator>(*b, o, sc);
    }, boot_);
    rank_ = comm_->rank();
    size_ = comm_->size();
    decision_ = comm_->decision();
    first_call_seq_ = comm_->first_call_sequence();
    transport_ = rc::host::to_string(comm_->transport());
  }

  void live() const {
    if (closed())
      throw rc::collective_error("rocenante rank " + std::to_string(rank_) +
                                 ": the communicator is closed; build a new one (every rank, collectively)");
  }

  static bool overlap(const array& a, const array& b) {
    const auto* x = static_cast<const std::byte*>(a.data());
    const auto* y = static_cast<const std::byte*>(b.data());
    return x < y + b.nbytes() && y < x + a.nbytes();
  }

  /// Reads `h` as an array into `a` (DLPack or the buffer protocol); `write`: it must be writable. Empty: fine.
  static std::string take(nb::handle h, array& a, const char* what, bool write) {
    if (!nb::try_cast(h, a))
      return std::string(what) + " is not an array (DLPack or buffer protocol): got " +
             nb::type_name(h.type()).c_str();
    nb::ndarray<> w;
    if (write && !nb::try_cast(h, w)) return std::string(what) + " is read-only; pass a writable array";
    return {};
  }

  /// Refuses the call for `why`, telling the peers (they raise too instead of waiting out the timeout).
  std::tuple<std::string, std::string> refuse(const std::string& why, rc::status code, std::uintptr_t stream) {
    rc::status st;
    {
      nb::gil_scoped_release nogil;
#if ROCENANTE_PY_GPU
      if (gpu_) st = gpu_->reject(why, stream);
      else
#endif
        st = comm_->reject(why, code);
    }
    (void)stream;
    return {rc::to_string(st), last_error()};
  }

  /// Runs a GPU call (enqueue only) with the GIL released.
  template <class F>
  std::tuple<std::string, std::string> run_gpu(F&& call) {
    rc::status st;
    {
      nb::gil_scoped_release nogil;
      st = call();
    }
    if (st == rc::status::ok) return {"ok", ""};
    return {rc::to_string(st), last_error()};
  }

  /// Runs `call(in, out)` with the GIL released, staging misaligned arrays.
  template <class F>
  std::tuple<std::string, std::string> run_host(array& x, array& y, const element& e, F&& call) {
    rc::status st;
    {
      const std::size_t elem = rc::host::element_bytes(*e.t);
      const bool in_place = x.data() == y.data();
      aligned_buffer in(const_cast<void*>(x.data()), x.nbytes(), elem, true);
      std::optional<aligned_buffer> out;
      if (!in_place) out.emplace(const_cast<void*>(y.data()), y.nbytes(), elem, false);
      void* out_ptr = in_place ? in.data : out->data;
      {
        nb::gil_scoped_release nogil;
        st = call(in.data, out_ptr);
      }
      if (st == rc::status::ok) {
        if (in_place) in.write_back();
        else out->write_back();
      }
    }
    if (st == rc::status::ok) return {"ok", ""};
    return {rc::to_string(st), last_error()};
  }

  std::variant<std::unique_ptr<rc::bootstrap::in_process>, std::unique_ptr<python_bootstrap>
#if ROCENANTE_PY_HAS_TCP
               , std::unique_ptr<rc::bootstrap::tcp>
#endif
               > boot_;
  nb::object world_ref_;  // keeps the in-process world alive while a rank of it exists
  std::unique_ptr<rc::host::selected_communicator> comm_;
#if ROCENANTE_PY_GPU
  std::unique_ptr<rc::python::gpu_executor> gpu_;
#endif
  placement where_;
  std::string decision_, transport_;
  std::uint32_t first_call_seq_ = 1;
  int rank_ = 0, size_ = 0;
};

}  // namespace

NB_MODULE(_ext, m) {
  m.doc() = "RoCEnante bindings (use the rocenante package, not this module)";
  m.attr("has_tcp_bootstrap") = bool(ROCENANTE_PY_HAS_TCP);
  m.attr("has_gpu") = bool(ROCENANTE_PY_GPU);  // built with the GPU executor (nvcc); whether a GPU is usable: below

  // Asks the CUDA runtime only when called (never at import: a CUDA call before fork() breaks the children's CUDA).
  m.def("gpu_unavailable", []() -> std::string {
#if ROCENANTE_PY_GPU
    return rc::python::gpu_unavailable();
#else
    return "this build of rocenante has the host executor only (built without nvcc)";
#endif
  });
  m.def("gpu_count", []() -> int {
#if ROCENANTE_PY_GPU
    return rc::python::gpu_count();
#else
    return 0;
#endif
  });

  // Base first: a translator registered later is tried first, so subclasses must come after their base.
  static nb::exception<rc::error> error(m, "Error", PyExc_RuntimeError);
  static nb::exception<rc::config_error> config_error(m, "ConfigError", error);
  static nb::exception<rc::config_mismatch_error> mismatch(m, "ConfigMismatchError", config_error);
  static nb::exception<rc::bootstrap_error> bootstrap_error(m, "BootstrapError", error);
  static nb::exception<rc::transport_error> transport_error(m, "TransportError", error);
  static nb::exception<rc::collective_error> collective_error(m, "CollectiveError", error);

  nb::class_<world>(m, "World")
      .def(nb::init<int, double>(), "size"_a, "timeout"_a)
      .def_prop_ro("size", &world::size);

  nb::class_<config>(m, "Config")
      .def(nb::init<std::uint64_t, double, std::string, std::string, std::uint64_t>(), "max_bytes"_a, "timeout"_a,
           "transport"_a, "algo"_a, "symmetric_bytes"_a = 0);

  nb::class_<communicator>(m, "Communicator")
      .def_static("in_process", &communicator::in_process, "world"_a, "rank"_a, "config"_a)
      .def_static("callback", &communicator::callback, "rank"_a, "size"_a, "all_gather"_a, "config"_a, "device"_a.none())
#if ROCENANTE_PY_HAS_TCP
      .def_static("from_env", &communicator::from_env, "config"_a, "bootstrap_timeout"_a.none(), "device"_a.none())
#endif
      .def("all_reduce", &communicator::all_reduce, "x"_a, "out"_a.none(), "algo"_a, "as_dtype"_a.none(), "stream"_a = 0)
      .def("all_gather", &communicator::all_gather, "x"_a, "out"_a, "as_dtype"_a.none(), "stream"_a = 0)
      .def("refusal", &communicator::refusal, "x"_a, "algo"_a, "collective"_a, "as_dtype"_a.none())
      .def("reject", &communicator::reject, "why"_a, "stream"_a = 0)
      .def("health", &communicator::health)
      .def_prop_ro("last_error", &communicator::last_error)
      .def_prop_ro("failures", &communicator::failures)
      .def_prop_ro("decision", &communicator::decision)
      .def("symmetric_input", &communicator::symmetric_input)
      .def_prop_ro("first_call_sequence", &communicator::first_call_sequence)
      .def_prop_ro("transport", &communicator::transport)
      .def_prop_ro("rank", &communicator::rank)
      .def_prop_ro("size", &communicator::size)
      .def_prop_ro("device", &communicator::device)
      .def_prop_ro("closed", &communicator::closed)
      .def("close", &communicator::close);
}
