// launcher.cpp — starts and supervises the ranks of `hstu launch`: fork/exec with pipes, a poll
// loop that prefixes their lines, a self-pipe for forwarded signals, and the stop-the-others rule.
#include "dist/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

extern char** environ;

namespace hstu::dist {
namespace {

using Clock = std::chrono::steady_clock;

// ---- signals: the handler writes the signal number into a pipe the loop polls
// --------------------

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

// Installs the forwarding handlers for its lifetime.
class SignalForwarding {
 public:
  SignalForwarding() {
    HSTU_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0,
               "hstu launch: pipe(): ", std::strerror(errno));
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalForwarding() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::close(g_signal_pipe[0]);
    ::close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }
  int fd() const { return g_signal_pipe[0]; }

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_{};
};

// ---- output: complete lines (or carriage-return segments) with the rank's prefix ----------------

void write_all(int fd, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return;  // the terminal went away: drop the output, keep supervising
    p += put;
    n -= static_cast<size_t>(put);
  }
}

struct OutStream {
  int fd;              // read end of the child's pipe (-1 once closed)
  int to;              // 1 or 2
  std::string prefix;  // "[rank r] ", or "" for mpirun's tagged lines
  std::string buf;

  void emit(const std::string& line, char end) {
    const std::string text = prefix.empty() ? untag_mpirun_line(line) : prefix + line;
    write_all(to, end ? text + end : text + "\n");
  }
  // Consumes what the pipe has; false at EOF.
  bool pump() {
    char chunk[65536];
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (got <= 0) {
      if (!buf.empty()) emit(buf, '\0');
      buf.clear();
      return false;
    }
    buf.append(chunk, static_cast<size_t>(got));
    size_t start = 0;
    for (size_t i = 0; i < buf.size(); ++i)
      if (buf[i] == '\n' || buf[i] == '\r') {
        emit(buf.substr(start, i - start), buf[i]);
        start = i + 1;
      }
    buf.erase(0, start);
    if (buf.size() > (1u << 20)) {  // a megabyte without a line end: pass it on as it is
      emit(buf, '\0');
      buf.clear();
    }
    return true;
  }
};

struct Child {
  pid_t pid = -1;
  int rank = 0;
  bool running = true;
  int status = 0;  // exit status, or 128 + signal
};

// Starts `argv` with `envp` in its own process group, stdout/stderr into new pipes.
Child spawn(int rank, const std::vector<std::string>& argv, const std::vector<std::string>& envp,
            OutStream& out, OutStream& err) {
  int po[2], pe[2];
  HSTU_CHECK(::pipe2(po, O_CLOEXEC) == 0 && ::pipe2(pe, O_CLOEXEC) == 0,
             "hstu launch: pipe(): ", std::strerror(errno));
  std::vector<char*> av, ev;
  for (const std::string& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  for (const std::string& e : envp) ev.push_back(const_cast<char*>(e.c_str()));
  ev.push_back(nullptr);
  const pid_t pid = ::fork();
  HSTU_CHECK(pid >= 0, "hstu launch: fork(): ", std::strerror(errno));
  if (pid == 0) {  // the child: only async-signal-safe calls until exec
    ::setpgid(0, 0);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(po[1], 1);
    ::dup2(pe[1], 2);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvpe(av[0], av.data(), ev.data());
    const char* why = std::strerror(errno);
    const char* msg = "hstu launch: cannot run ";
    [[maybe_unused]] ssize_t n = ::write(2, msg, std::strlen(msg));
    n = ::write(2, av[0], std::strlen(av[0]));
    n = ::write(2, ": ", 2);
    n = ::write(2, why, std::strlen(why));
    n = ::write(2, "\n", 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so that a signal sent right away reaches the group
  ::close(po[1]);
  ::close(pe[1]);
  ::fcntl(po[0], F_SETFL, O_NONBLOCK);
  ::fcntl(pe[0], F_SETFL, O_NONBLOCK);
  out.fd = po[0];
  err.fd = pe[0];
  Child c;
  c.pid = pid;
  c.rank = rank;
  return c;
}

// The environment of the launcher with `set` overriding (NAME=value entries) and `drop` removed.
std::vector<std::string> environment(const std::vector<std::string>& set,
                                     const std::vector<std::string>& drop) {
  auto name_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e), name = name_of(kv);
    const bool replaced = std::any_of(set.begin(), set.end(),
                                      [&](const std::string& s) { return name_of(s) == name; });
    if (!replaced && std::find(drop.begin(), drop.end(), name) == drop.end()) env.push_back(kv);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

// OMP_NUM_THREADS for ranks that share this node's cores, when the user chose none.
void share_cores(std::vector<std::string>& set, int ranks_here) {
  if (std::getenv("OMP_NUM_THREADS") || ranks_here <= 1) return;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  set.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1, cores / ranks_here)));
}

// Runs the children to the end; the launcher's exit status.
// `via_mpirun`: the one child is mpirun (which ends the job itself when a rank fails).
int supervise(std::vector<Child>& children, std::vector<OutStream>& streams, SignalForwarding& sf,
              double grace_s, bool via_mpirun) {
  auto label = [via_mpirun](int rank) {
    return via_mpirun ? std::string("mpirun") : "rank " + std::to_string(rank);
  };
  int failed = -1, got_signal = 0, status = 0;
  bool stopping = false, killed = false;
  Clock::time_point kill_at{}, drain_until{};
  auto signal_all = [&](int sig) {
    for (const Child& c : children)
      if (::kill(-c.pid, sig) != 0 && c.running) ::kill(c.pid, sig);
  };
  auto stop_all = [&] {
    if (stopping) return;
    stopping = true;
    signal_all(SIGTERM);
    kill_at = Clock::now() +
              std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
  };
  while (true) {
    // Reap.
    for (Child& c : children) {
      if (!c.running) continue;
      int st = 0;
      const pid_t r = ::waitpid(c.pid, &st, WNOHANG);
      if (r != c.pid) continue;
      c.running = false;
      c.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (c.status != 0 && failed < 0 && !got_signal) {
        failed = c.rank;
        status = c.status;
        std::fprintf(stderr, "hstu launch: %s exited with status %d; stopping the %s\n",
                     label(c.rank).c_str(), c.status, via_mpirun ? "job" : "other ranks");
        stop_all();
      }
    }
    const bool all_done =
        std::none_of(children.begin(), children.end(), [](const Child& c) { return c.running; });
    if (all_done && drain_until == Clock::time_point{})
      drain_until = Clock::now() + std::chrono::seconds(2);  // output of orphaned grandchildren
    const bool streams_open =
        std::any_of(streams.begin(), streams.end(), [](const OutStream& s) { return s.fd >= 0; });
    if (all_done && (!streams_open || Clock::now() > drain_until)) break;
    if (stopping && !killed && Clock::now() > kill_at) {
      killed = true;
      signal_all(SIGKILL);
    }
    // Wait for output, a signal, or 50 ms (the next reap).
    std::vector<pollfd> fds;
    fds.push_back({sf.fd(), POLLIN, 0});
    for (const OutStream& s : streams)
      if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 50) < 0 && errno != EINTR)
      HSTU_THROW("hstu launch: poll(): ", std::strerror(errno));
    unsigned char sig = 0;
    while (::read(sf.fd(), &sig, 1) == 1) {
      if (!got_signal) {
        got_signal = sig;
        std::fprintf(stderr, "hstu launch: got signal %d; passing it to %s\n", sig,
                     via_mpirun ? "mpirun" : "the ranks");
        signal_all(sig);
        if (!stopping) {
          stopping = true;
          kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(grace_s));
        }
      } else if (!killed) {  // a second signal: no more waiting
        killed = true;
        signal_all(SIGKILL);
      }
    }
    for (OutStream& s : streams)
      if (s.fd >= 0 && !s.pump()) {
        ::close(s.fd);
        s.fd = -1;
      }
  }
  for (OutStream& s : streams)
    if (s.fd >= 0) {
      ::close(s.fd);
      s.fd = -1;
    }
  if (failed >= 0) {
    std::string stopped;
    for (const Child& c : children)
      if (c.rank != failed && c.status != 0)
        stopped += (stopped.empty() ? "" : ", ") + std::to_string(c.rank);
    std::fprintf(stderr, "hstu launch: %s failed (exit status %d)%s%s\n", label(failed).c_str(),
                 status, stopped.empty() ? "" : "; stopped ranks: ", stopped.c_str());
    return status;
  }
  if (got_signal) return 128 + got_signal;
  for (const Child& c : children)
    if (c.status != 0) return c.status;  // after a signal or a late failure
  return 0;
}

void check_spec(const LaunchSpec& s) {
  HSTU_CHECK(!s.command.empty(), "hstu launch: no command to run (hstu launch [options] -- CMD)");
  HSTU_CHECK(s.nproc_per_node >= 1, "hstu launch: --nproc-per-node must be at least 1");
  HSTU_CHECK(s.nnodes >= 1 && s.node_rank >= 0 && s.node_rank < s.nnodes,
             "hstu launch: --node-rank ", s.node_rank, " is not below --nnodes ", s.nnodes);
  HSTU_CHECK(s.master_port >= 0 && s.master_port <= 65535, "hstu launch: --master-port ",
             s.master_port, " is not a TCP port");
  HSTU_CHECK(s.grace_s >= 0, "hstu launch: the grace period must not be negative");
}

}  // namespace

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  HSTU_CHECK(fd >= 0, "socket(): ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  HSTU_CHECK(ok, "could not find a free TCP port: ", std::strerror(errno));
  return ntohs(a.sin_port);
}

std::string untag_mpirun_line(const std::string& line) {
  static const std::regex tag(R"(^\[\d+,(\d+)\]<std(out|err)>: ?)");
  std::smatch m;
  if (!std::regex_search(line, m, tag)) return line;
  return "[rank " + m[1].str() + "] " + m.suffix().str();
}

std::string default_mpirun() {
  if (const char* m = std::getenv("HSTU_MPIRUN")) return m;
#if defined(HSTU_MPIEXEC_PATH)
  if (::access(HSTU_MPIEXEC_PATH, X_OK) == 0) return HSTU_MPIEXEC_PATH;
#endif
  return "mpirun";
}

int launch_direct(const LaunchSpec& spec) {
  check_spec(spec);
  HSTU_CHECK(spec.nnodes == 1 || (spec.master_port > 0 && !spec.master_addr.empty()),
             "hstu launch: a job of ", spec.nnodes,
             " nodes needs --master-addr (node 0's address, reachable from every node) and "
             "--master-port");
  const int port = spec.master_port > 0 ? spec.master_port : free_tcp_port();
  const std::string addr = spec.master_addr.empty() ? "127.0.0.1" : spec.master_addr;
  const int world = spec.nnodes * spec.nproc_per_node;
  SignalForwarding sf;
  std::vector<Child> children;
  std::vector<OutStream> streams(2 * static_cast<size_t>(spec.nproc_per_node));
  for (int local = 0; local < spec.nproc_per_node; ++local) {
    const int rank = spec.node_rank * spec.nproc_per_node + local;
    std::vector<std::string> set = {"RANK=" + std::to_string(rank),
                                    "WORLD_SIZE=" + std::to_string(world),
                                    "LOCAL_RANK=" + std::to_string(local),
                                    "LOCAL_WORLD_SIZE=" + std::to_string(spec.nproc_per_node),
                                    "GROUP_RANK=" + std::to_string(spec.node_rank),
                                    "MASTER_ADDR=" + addr,
                                    "MASTER_PORT=" + std::to_string(port)};
    share_cores(set, spec.nproc_per_node);
    // torchrun's agent store is not running here: the bootstrap uses MASTER_PORT itself.
    const std::vector<std::string> env =
        environment(set, {"TORCHELASTIC_USE_AGENT_STORE", "HSTU_BOOTSTRAP_PORT"});
    OutStream& out = streams[2 * static_cast<size_t>(local)];
    OutStream& err = streams[2 * static_cast<size_t>(local) + 1];
    out = {-1, 1, "[rank " + std::to_string(rank) + "] ", {}};
    err = {-1, 2, "[rank " + std::to_string(rank) + "] ", {}};
    children.push_back(spawn(rank, spec.command, env, out, err));
  }
  return supervise(children, streams, sf, spec.grace_s, false);
}

int launch_mpirun(const LaunchSpec& spec, const std::string& mpirun) {
  check_spec(spec);
  HSTU_CHECK(spec.nnodes == 1,
             "hstu launch: CPU ranks on several nodes: run mpirun with a hostfile yourself "
             "(mpirun -np N --hostfile HOSTS hstu train ... --device cpu; see README)");
  std::vector<std::string> argv = {mpirun,        "-np",  std::to_string(spec.nproc_per_node),
                                   "--bind-to",   "none", "--oversubscribe",
                                   "--tag-output"};
  argv.insert(argv.end(), spec.command.begin(), spec.command.end());
  std::vector<std::string> set;
  share_cores(set, spec.nproc_per_node);
  // The ranks must read mpirun's variables, not torchrun-style ones this shell may carry.
  const std::vector<std::string> env =
      environment(set, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"});
  std::fprintf(stderr, "hstu launch: CPU ranks run under MPI:");
  for (const std::string& a : argv) std::fprintf(stderr, " %s", a.c_str());
  std::fprintf(stderr, "\n");
  SignalForwarding sf;
  std::vector<OutStream> streams(2);
  streams[0] = {-1, 1, "", {}};
  streams[1] = {-1, 2, "", {}};
  std::vector<Child> children = {spawn(0, argv, env, streams[0], streams[1])};
  return supervise(children, streams, sf, spec.grace_s, true);
}

}  // namespace hstu::dist
