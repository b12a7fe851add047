// tests/host/compile_fail.cpp — combinations that must not compile, each with the words the library promises
// (STYLE.md: "check it with a static_assert that says in words what is missing"; "the unsupported combination
// fails at compile time with a message"). compile_fail.sh compiles this file once per CASE with -fsyntax-only
// and checks that the compiler refuses it with the expected text. CASE 0 must compile: it proves the harness
// (include paths, flags) is sound, so that the other cases fail for their own reason.
#include <rocenante/rocenante.hpp>

#include "concept_mocks.hpp"  // CASE 1: mock::reduction_no_accum_type; CASE 2: mock::algorithm_no_wire_bytes

using namespace rocenante;

struct handle_with_string : transport::direct_handle {  // CASE 3
  std::string label;
};
struct transport_with_fat_handle {
  static constexpr const char* name = "x";
  using handle_type = handle_with_string;
  handle_type handle() const { return {}; }
};

struct lossy_sum : reduce::sum<float> {  // CASE 4
  static constexpr bool lossy_per_hop = true;
};

using comm_t = host::communicator<transport::loopback>;
using session_t = protocol::session<protocol::host_team, transport::direct_handle>;

#if CASE == 0
void ok(comm_t& c, session_t& s, float* p) {
  (void)c.all_reduce<algorithm::ring>(p, p, 4);
  (void)c.all_gather<algorithm::one_shot>(p, p + 4, 4);
  (void)algorithm::ring::all_reduce<reduce::sum<float>>(s, p, p, 4, 1);
  (void)algorithm::two_shot::all_reduce<reduce::sum<float>>(s, p, p, 4, 1);
  (void)c.all_reduce<algorithm::two_shot>(p, p, 4);
  (void)algorithm::one_shot_fp4::all_reduce<reduce::nvfp4_sum<float>>(s, p, p, 4, 1, nullptr);
  static_assert(reduce::check_reduction<reduce::sum<float>>() && algorithm::check_algorithm<algorithm::ring>() &&
                transport::check_transport<transport::loopback>());
}
#elif CASE == 1
static_assert(reduce::check_reduction<mock::reduction_no_accum_type>());
#elif CASE == 2
static_assert(algorithm::check_algorithm<mock::algorithm_no_wire_bytes>());
#elif CASE == 3
static_assert(transport::check_transport<transport_with_fat_handle>());
#elif CASE == 4
void lossy(session_t& s, float* p) { (void)algorithm::ring::all_reduce<lossy_sum>(s, p, p, 4, 1); }
#elif CASE == 5
void gather_on_ring(comm_t& c, float* p) { (void)c.all_gather<algorithm::ring>(p, p + 4, 4); }
#elif CASE == 6
void unknown_element_type(comm_t& c, double* p) { (void)c.all_reduce(p, p, 4); }
#elif CASE == 7
void nvfp4_wire_on_ring(session_t& s, float* p) { (void)algorithm::ring::all_reduce<reduce::nvfp4_sum<float>>(s, p, p, 4, 1); }
#elif CASE == 8
void plain_sum_on_fp4_wire(session_t& s, float* p) {
  (void)algorithm::one_shot_fp4::all_reduce<reduce::sum<float>>(s, p, p, 4, 1, nullptr);
}
#elif CASE == 9
void nvfp4_wire_on_two_shot(session_t& s, float* p) {
  (void)algorithm::two_shot::all_reduce<reduce::nvfp4_sum<float>>(s, p, p, 4, 1);
}
#elif CASE == 10
void gather_on_two_shot(comm_t& c, float* p) { (void)c.all_gather<algorithm::two_shot>(p, p + 4, 4); }
#endif
