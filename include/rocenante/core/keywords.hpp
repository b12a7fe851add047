// core/keywords.hpp — one table of keywords per host enum (log_level, env::transport_choice, env::algo_choice)
// serves both directions: the value's name (to_string) and the parse of an environment variable's value, so the
// two cannot disagree and the error message lists exactly what is accepted. Host only.
#pragma once

#include <cstddef>
#include <string>

#include "error.hpp"

namespace rocenante::detail {

template <class E>
struct keyword {
  const char* text;
  E value;
};

/// The text of `v` in `table`; "?" when the table has none (a value out of range, e.g. from a corrupt card).
template <class E, std::size_t N>
constexpr const char* keyword_text(const keyword<E> (&table)[N], E v) {
  for (const auto& k : table)
    if (k.value == v) return k.text;
  return "?";
}

/// `s` with ASCII upper case letters made lower case.
inline std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

/// The value whose text equals `v`, ignoring ASCII case. Throws config_error "VARIABLE='v' is not one of A, B, C"
/// (the texts in table order) when there is none.
template <class E, std::size_t N>
E parse_keyword(const keyword<E> (&table)[N], const char* variable, const std::string& v) {
  const std::string key = lower(v);
  std::string accepted;
  for (const auto& k : table) {
    if (lower(k.text) == key) return k.value;
    accepted += (accepted.empty() ? "" : ", ") + std::string(k.text);
  }
  throw config_error(std::string(variable) + "='" + v + "' is not one of " + accepted);
}

}  // namespace rocenante::detail
