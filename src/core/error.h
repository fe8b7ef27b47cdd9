// Errors: exceptions whose message a user on a cluster can act on (what, where, expected vs found).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ditbatch {

// Every failure ditbatch reports is an Error. The message is one line, complete on its own.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Bad input from the user (command line, prompt file, weight file): exit status 2 in the app.
class InputError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] inline void fail_input(fmt::format_string<Args...> format, Args&&... args) {
  throw InputError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ditbatch

// Internal invariant checks (programming errors, bad op arguments). Always on: cheap next to the math.
#define DITBATCH_CHECK(cond, ...)                                                            \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::ditbatch::fail("{} ({}:{}: check `{}` failed)", fmt::format(__VA_ARGS__), __FILE__, \
                       __LINE__, #cond);                                                     \
  } while (0)
