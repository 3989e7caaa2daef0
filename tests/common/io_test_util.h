// io_test_util.h — helpers of the io tests: running a command (a Python check) with its output
// captured (or required to succeed), and whether python3 can import a module (the tests skip,
// naming it, when not).
#pragma once

#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

namespace hstu::test {

struct CommandResult {
  int exit_code;       // the command's exit status (-1 if it did not exit normally)
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r{-1, ""};
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p)) r.output += buf;
  const int status = ::pclose(p);
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

// Runs cmd; a non-zero exit fails the test with the command and its output. Returns whether it
// exited 0 (for ASSERT_TRUE when what follows needs its results).
inline bool run_command_ok(const std::string& cmd) {
  const CommandResult r = run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << ":\n" << r.output;
  return r.exit_code == 0;
}

// Empty when python3 can import `module`, else why not (for GTEST_SKIP).
inline std::string python_lacks(const std::string& module) {
  if (std::system("python3 --version > /dev/null 2>&1") != 0) return "python3 not found";
  if (std::system(("python3 -c 'import " + module + "' > /dev/null 2>&1").c_str()) != 0)
    return "python3 module '" + module + "' not found (pip install " + module + ")";
  return "";
}

}  // namespace hstu::test
