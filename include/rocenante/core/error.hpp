// core/error.hpp — exceptions thrown by set-up paths (bootstrap, configuration, transport creation).
// Each message says what failed and what to do about it. Host only: never included by device code.
#pragma once

#include <stdexcept>
#include <string>

namespace rocenante {

/// Base of every exception the library throws. Catch this to handle any set-up failure.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A configuration value is invalid on this rank (before any communication happens).
class config_error : public error {
 public:
  using error::error;
};

/// Ranks passed different configurations; thrown on every rank, naming the first differing field.
class config_mismatch_error : public config_error {
 public:
  config_mismatch_error(std::string field, const std::string& what) : config_error(what), field_(std::move(field)) {}
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

/// The bootstrap (exchange of set-up data between ranks) failed or timed out.
class bootstrap_error : public error {
 public:
  using error::error;
};

/// A transport could not be created or connected (allocation, registration, device discovery).
class transport_error : public error {
 public:
  using error::error;
};

/// A collective failed; thrown only by convenience wrappers (`check`), never by the launch path itself.
class collective_error : public error {
 public:
  using error::error;
};

}  // namespace rocenante
