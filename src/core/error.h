// error.h — the one error type of hstu and the check macros that raise it.
//
// Library code never exits: it throws hstu::Error carrying the source location and a message a
// user can act on (naming the file and line of bad input where there is one). Only src/cli turns
// errors into exit codes.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace hstu {

class Error : public std::runtime_error {
 public:
  Error(const std::string& msg, const char* file, int line)
      : std::runtime_error(msg), where_(std::string(file) + ":" + std::to_string(line)) {}
  // Source location in hstu's code that raised the error (for bug reports, not for users).
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

namespace detail {
// Concatenates any streamable arguments into one string.
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
// The message of a failed check: the caller's text, or the condition when there is none.
inline std::string check_message(const char* cond, const std::string& msg) {
  return msg.empty() ? std::string("internal check failed: ") + cond : msg;
}
}  // namespace detail

}  // namespace hstu

// Throws hstu::Error with the concatenated message.
#define HSTU_THROW(...) throw ::hstu::Error(::hstu::detail::cat(__VA_ARGS__), __FILE__, __LINE__)

// Checks a condition; on failure throws with the message (or the condition text if none).
#define HSTU_CHECK(cond, ...)                                          \
  do {                                                                 \
    if (!(cond))                                                       \
      HSTU_THROW(::hstu::detail::check_message(                        \
          #cond, ::hstu::detail::cat("" __VA_OPT__(, ) __VA_ARGS__))); \
  } while (0)
