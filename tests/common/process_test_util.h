// process_test_util.h — running the hstu binary (HSTU_BIN) from tests without a shell: fork +
// execve with extra environment variables and optional resource limits, stdout and stderr
// captured to a file, the outcome as an exit code or the killing signal. Safe to call from
// several threads at once (the child only makes async-signal-safe calls before exec).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace hstu::test {
inline namespace process_test_util {

struct ProcResult {
  int exit_code = -1;  // the exit status, or -1 when a signal ended the process
  int signal = 0;      // the signal that ended it, or 0
  std::string out;     // stdout and stderr together
};

struct ProcOptions {
  std::vector<std::string> env;  // "NAME=value" added to (or replacing in) the environment
  long fsize_limit = -1;         // RLIMIT_FSIZE in bytes (SIGXFSZ ignored: writes fail, EFBIG)
};

inline std::string hstu_bin() {
  const char* bin = std::getenv("HSTU_BIN");
  return bin ? bin : "";
}

// Runs `argv` (argv[0] the program path); output goes to `log_path` and is read back.
inline ProcResult run_process(const std::vector<std::string>& argv, const std::string& log_path,
                              const ProcOptions& opts = {}) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string s(*e);
    bool replaced = false;
    for (const std::string& add : opts.env)
      replaced |= s.substr(0, s.find('=') + 1) == add.substr(0, add.find('=') + 1);
    if (!replaced) env_strings.push_back(s);
  }
  for (const std::string& add : opts.env) env_strings.push_back(add);
  std::vector<char*> envp, args;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    if (opts.fsize_limit >= 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      const rlimit lim{static_cast<rlim_t>(opts.fsize_limit),
                       static_cast<rlim_t>(opts.fsize_limit)};
      ::setrlimit(RLIMIT_FSIZE, &lim);
    }
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ProcResult r;
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  std::ifstream in(log_path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  r.out = os.str();
  return r;
}

}  // namespace process_test_util
}  // namespace hstu::test
