// python/src/rocenante_ext.cpp — the nanobind extension behind the `rocenante` package (module rocenante._ext).
// A thin layer over host::selected_communicator: arrays arrive through DLPack (nb::ndarray), so NumPy, torch, CuPy
// and JAX arrays all work without tying the build to one of them; the dtype is read from the array here and handed
// to the C++ runtime dispatch (communicator::all_reduce(const void*, void*, count, dtype, algo)). The GIL is released
// during set-up and collectives, and re-acquired only inside a Python bootstrap callback.
//
// Errors: set-up throws the C++ exceptions, translated to rocenante.Error subclasses; a collective returns
// (status, message) and the Python layer raises CollectiveError, so that the message is the C++ one.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include <rocenante/bootstrap/in_process.hpp>
#include <rocenante/core/error.hpp>
#include <rocenante/host/select.hpp>

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

/// Rank-invariant facts of a call's arrays that decide whether it can run (the pointers are not among them: a
/// misaligned pointer is staged, see aligned_buffer). Empty: fine.
std::string array_problem(const array& x, const element& e, const char* what) {
  if (x.device_type() != nb::device::cpu::value)
    return std::string(what) + " lives on a device this build cannot reach (DLPack device type " +
           std::to_string(x.device_type()) + "); this build has the host executor only: pass CPU arrays";
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
  if (a == "ring") return rc::algorithm::algo::ring;
  throw rc::config_error("algo must be \"auto\", \"one_shot\" or \"ring\", got \"" + a + "\"");
}

std::optional<rc::env::transport_choice> parse_transport(const std::string& t) {
  using rc::env::transport_choice;
  if (t == "env") return std::nullopt;  // ROCENANTE_TRANSPORT decides
  if (t == "auto") return transport_choice::automatic;
  if (t == "loopback") return transport_choice::loopback;
  if (t == "socket") return transport_choice::socket;
  if (t == "ibverbs") return transport_choice::ibverbs;
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
};

class communicator {
 public:
  static std::unique_ptr<communicator> in_process(world& w, int rank, const config& c) {
    auto self = std::unique_ptr<communicator>(new communicator);
    self->boot_ = std::make_unique<rc::bootstrap::in_process>(w.get(), rank);
    self->world_ref_ = nb::find(&w);
    self->build(c);
    return self;
  }
  static std::unique_ptr<communicator> callback(int rank, int size, nb::callable fn, const config& c) {
    if (size < 1 || rank < 0 || rank >= size)
      throw rc::config_error("rank " + std::to_string(rank) + " is outside [0, " + std::to_string(size) + ")");
    auto self = std::unique_ptr<communicator>(new communicator);
    self->boot_ = std::make_unique<python_bootstrap>(rank, size, std::move(fn));
    self->build(c);
    return self;
  }
#if ROCENANTE_PY_HAS_TCP
  static std::unique_ptr<communicator> from_env(const config& c, std::optional<double> bootstrap_timeout_s) {
    auto self = std::unique_ptr<communicator>(new communicator);
    rc::bootstrap::tcp_config tc = rc::bootstrap::tcp_config_from_env();
    if (bootstrap_timeout_s) tc.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(*bootstrap_timeout_s * 1000));
    {
      nb::gil_scoped_release nogil;
      self->boot_ = std::make_unique<rc::bootstrap::tcp>(tc);
    }
    self->build(c);
    return self;
  }
#endif

  ~communicator() { close(); }

  /// (status, message): status "ok" and an empty message on success.
  std::tuple<std::string, std::string> all_reduce(nb::handle xo, nb::handle outo, const std::string& algo,
                                                   std::optional<std::string> as) {
    auto& c = live();
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
    if (!why.empty()) return refuse(c, why, rc::status::invalid_argument);
    if (!has_out) y = x;
    const element e = element_of(x, as);
    why = array_problem(x, e, "input");
    if (why.empty() && has_out) why = array_problem(y, element_of(y, as), "output");
    if (why.empty() && element_of(y, as).name != e.name) why = "output dtype differs from the input's (" + e.name + ")";
    if (why.empty() && y.size() != x.size())
      why = "output has " + std::to_string(y.size()) + " elements, the input " + std::to_string(x.size());
    if (!why.empty()) return refuse(c, why, e.t ? rc::status::invalid_argument : rc::status::not_supported);
    return run(c, x, y, e, [&](const void* in, void* o) {
      return a ? c.all_reduce(in, o, x.size(), *e.t, *a) : c.all_reduce(in, o, x.size(), *e.t, rc::algorithm::automatic{});
    });
  }

  std::tuple<std::string, std::string> all_gather(nb::handle xo, nb::handle outo, std::optional<std::string> as) {
    auto& c = live();
    array x, out;
    std::string why = take(xo, x, "input", false);
    if (why.empty()) why = take(outo, out, "output", true);
    if (!why.empty()) return refuse(c, why, rc::status::invalid_argument);
    const element e = element_of(x, as);
    why = array_problem(x, e, "input");
    if (why.empty()) why = array_problem(out, element_of(out, as), "output");
    if (why.empty() && element_of(out, as).name != e.name) why = "output dtype differs from the input's (" + e.name + ")";
    const std::size_t want = x.size() * static_cast<std::size_t>(c.size());
    if (why.empty() && out.size() != want)
      why = "output has " + std::to_string(out.size()) + " elements; all_gather needs size() * input elements = " +
            std::to_string(want);
    if (why.empty() && overlap(x, out)) why = "input and output overlap";
    if (!why.empty()) return refuse(c, why, e.t ? rc::status::invalid_argument : rc::status::not_supported);
    return run(c, x, out, e, [&](const void* in, void* o) { return c.all_gather(in, o, x.size(), *e.t); });
  }

  /// Empty when a call with this array would run; rank-invariant (no pointers), never poisons.
  std::string refusal(nb::handle xo, const std::string& algo, const std::string& collective,
                      std::optional<std::string> as) {
    auto& c = live();
    array x;
    if (std::string why = take(xo, x, "input", false); !why.empty()) return why;
    const element e = element_of(x, as);
    std::string why = array_problem(x, e, "input");
    if (!why.empty()) return why;
    const auto coll = collective == "all_gather" ? rc::protocol::collective::all_gather : rc::protocol::collective::all_reduce;
    return c.refusal(x.size(), *e.t, parse_algo(algo), coll);
  }

  /// Refuses this call for a reason the Python layer found (as a bad array would be refused: peers are told).
  std::tuple<std::string, std::string> reject(const std::string& why) {
    auto& c = live();
    rc::status st;
    {
      nb::gil_scoped_release nogil;
      st = c.reject(why);
    }
    return {rc::to_string(st), c.last_error()};
  }

  std::tuple<bool, std::string, std::string> health() const {
    if (!comm_) return {false, "closed", "rocenante rank " + std::to_string(rank_) + ": the communicator is closed"};
    const rc::host::health h = comm_->check_health();
    return {h.ok(), rc::to_string(h.state), h.message};
  }
  std::string last_error() const { return comm_ ? comm_->last_error() : std::string(); }
  std::string decision() const { return decision_; }
  std::string transport() const { return transport_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool closed() const { return !comm_; }

  /// Frees the communicator; returns without waiting for peers (a dead peer cannot hold it up).
  void close() {
    if (!comm_) return;
    std::unique_ptr<rc::host::selected_communicator> c = std::move(comm_);
    if (PyGILState_Check()) {
      nb::gil_scoped_release nogil;
      c.reset();
    } else {
      c.reset();
    }
  }

 private:
  communicator() = default;

  void build(const config& c) {
    rc::options o;
    o.capacity_bytes = c.max_bytes;
    o.timeout_ns = static_cast<std::uint64_t>(c.timeout_s * 1e9);
    rc::host::select_config sc;
    sc.transport = parse_transport(c.transport);
    if (c.algo != "env") {  // "env": ROCENANTE_ALGO decides
      const std::optional<rc::algorithm::algo> a = parse_algo(c.algo);
      sc.algo = !a ? rc::env::algo_choice::automatic
                   : *a == rc::algorithm::algo::ring ? rc::env::algo_choice::ring : rc::env::algo_choice::one_shot;
    }
    std::visit([&](auto& b) {
      nb::gil_scoped_release nogil;
      comm_ = std::make_unique<rc::host::selected_communicator>(*b, o, sc);
    }, boot_);
    rank_ = comm_->rank();
    size_ = comm_->size();
    decision_ = comm_->selected().summary();
    transport_ = rc::host::to_string(comm_->transport());
  }

  rc::host::selected_communicator& live() {
    if (!comm_)
      throw rc::collective_error("rocenante rank " + std::to_string(rank_) +
                                 ": the communicator is closed; build a new one (every rank, collectively)");
    return *comm_;
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
  static std::tuple<std::string, std::string> refuse(rc::host::selected_communicator& c, const std::string& why,
                                                     rc::status code) {
    rc::status st;
    {
      nb::gil_scoped_release nogil;
      st = c.reject(why, code);
    }
    return {rc::to_string(st), c.last_error()};
  }

  /// Runs `call(in, out)` with the GIL released, staging misaligned arrays.
  template <class F>
  std::tuple<std::string, std::string> run(rc::host::selected_communicator& c, array& x, array& y, const element& e,
                                           F&& call) {
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
    return {rc::to_string(st), c.last_error()};
  }

  std::variant<std::unique_ptr<rc::bootstrap::in_process>, std::unique_ptr<python_bootstrap>
#if ROCENANTE_PY_HAS_TCP
               , std::unique_ptr<rc::bootstrap::tcp>
#endif
               > boot_;
  nb::object world_ref_;  // keeps the in-process world alive while a rank of it exists
  std::unique_ptr<rc::host::selected_communicator> comm_;
  std::string decision_, transport_;
  int rank_ = 0, size_ = 0;
};

}  // namespace

NB_MODULE(_ext, m) {
  m.doc() = "RoCEnante bindings (use the rocenante package, not this module)";
  m.attr("has_tcp_bootstrap") = bool(ROCENANTE_PY_HAS_TCP);
  m.attr("has_gpu") = false;

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
      .def(nb::init<std::uint64_t, double, std::string, std::string>(), "max_bytes"_a, "timeout"_a, "transport"_a, "algo"_a);

  nb::class_<communicator>(m, "Communicator")
      .def_static("in_process", &communicator::in_process, "world"_a, "rank"_a, "config"_a)
      .def_static("callback", &communicator::callback, "rank"_a, "size"_a, "all_gather"_a, "config"_a)
#if ROCENANTE_PY_HAS_TCP
      .def_static("from_env", &communicator::from_env, "config"_a, "bootstrap_timeout"_a.none())
#endif
      .def("all_reduce", &communicator::all_reduce, "x"_a, "out"_a.none(), "algo"_a, "as_dtype"_a.none())
      .def("all_gather", &communicator::all_gather, "x"_a, "out"_a, "as_dtype"_a.none())
      .def("refusal", &communicator::refusal, "x"_a, "algo"_a, "collective"_a, "as_dtype"_a.none())
      .def("reject", &communicator::reject, "why"_a)
      .def("health", &communicator::health)
      .def_prop_ro("last_error", &communicator::last_error)
      .def_prop_ro("decision", &communicator::decision)
      .def_prop_ro("transport", &communicator::transport)
      .def_prop_ro("rank", &communicator::rank)
      .def_prop_ro("size", &communicator::size)
      .def_prop_ro("closed", &communicator::closed)
      .def("close", &communicator::close);
}
