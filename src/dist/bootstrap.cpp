// bootstrap.cpp — the job hash and the rendezvous that hands rank 0's NCCL id to every rank
// (TCP for torchrun / `hstu launch` / SLURM launches, the communicator for MPI launches).
#include "dist/bootstrap.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "dist/comm.h"

#if defined(HSTU_WITH_NCCL)
#include <nccl.h>
#endif
#if defined(HSTU_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace hstu::dist {
namespace {

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// ---- TCP plumbing ------------------------------------------------------------------------------

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x48535455;  // "HSTU"
constexpr uint32_t kVersion = 1;

// What a rank sends rank 0 on connecting.
struct Hello {
  uint32_t magic, version;
  int32_t rank, world;
  uint64_t job_hash;
  uint32_t payload_bytes;
};
// Rank 0's answer; `message_bytes` of text (the error, when status != 0) and the payload follow.
struct Reply {
  uint32_t magic, status;
  uint64_t root_hash;
  uint32_t message_bytes, payload_bytes;
};

int remaining_ms(Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms.count(), 1 << 30)));
}

// Closes the descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads exactly n bytes before the deadline; false on timeout, EOF or error.
bool read_full(int fd, void* buf, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int rc = ::poll(&pfd, 1, remaining_ms(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return false;
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool write_full(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

bool send_reply(int fd, uint32_t status, uint64_t root_hash, const std::string& message,
                std::span<const uint8_t> payload) {
  const Reply r{kMagic, status, root_hash, static_cast<uint32_t>(message.size()),
                static_cast<uint32_t>(status == 0 ? payload.size() : 0)};
  return write_full(fd, &r, sizeof r) && write_full(fd, message.data(), message.size()) &&
         (status != 0 || write_full(fd, payload.data(), payload.size()));
}

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << std::hex << v;
  return os.str();
}

std::string endpoint(const TcpBootstrap& a) {
  return (a.master_addr.empty() ? std::string("?") : a.master_addr) + ":" + std::to_string(a.port);
}

// Rank 0: listen, collect every rank's hello, answer all of them.
void serve(const TcpBootstrap& a, std::span<uint8_t> payload, uint64_t hash) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(a.timeout_s));
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  HSTU_CHECK(listener.fd >= 0, "bootstrap: socket(): ", std::strerror(errno));
  const int one = 1;
  ::setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(a.port));
  // A previous job's listener may still be closing: retry for a few seconds.
  const auto bind_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
  while (::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    if (err != EADDRINUSE || Clock::now() >= bind_deadline)
      HSTU_THROW("bootstrap: rank 0 cannot listen on port ", a.port, ": ", std::strerror(err),
                 " (choose a free MASTER_PORT, or set HSTU_BOOTSTRAP_PORT)");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  HSTU_CHECK(::listen(listener.fd, std::max(16, a.world_size)) == 0,
             "bootstrap: listen(): ", std::strerror(errno));

  std::vector<Fd> peers(static_cast<size_t>(a.world_size));
  std::vector<Fd> strays;  // connections of processes that cannot be ranks of this job
  std::vector<uint64_t> hashes(static_cast<size_t>(a.world_size), hash);
  std::vector<std::string> problems;
  int joined = 1;
  while (joined < a.world_size) {
    pollfd pfd{listener.fd, POLLIN, 0};
    const int rc = ::poll(&pfd, 1, remaining_ms(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) break;  // the deadline
    Fd conn(::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.fd < 0) continue;
    Hello h{};
    // A hello follows the connect at once; a silent or foreign client is dropped.
    const auto hello_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    if (!read_full(conn.fd, &h, sizeof h, hello_deadline) || h.magic != kMagic ||
        h.version != kVersion)
      continue;
    if (h.world != a.world_size)
      problems.push_back("rank " + std::to_string(h.rank) + " was started with a world size of " +
                         std::to_string(h.world) + ", rank 0 with " + std::to_string(a.world_size));
    if (h.rank <= 0 || h.rank >= a.world_size || peers[static_cast<size_t>(h.rank)].fd >= 0) {
      problems.push_back("a process claims rank " + std::to_string(h.rank) +
                         (h.rank <= 0 || h.rank >= a.world_size ? ", which is not a rank of "
                                                                : ", which another already has,"
                                                                  " in ") +
                         std::to_string(a.world_size));
      strays.push_back(std::move(conn));
      continue;
    }
    if (h.payload_bytes != payload.size())
      problems.push_back("rank " + std::to_string(h.rank) + " expects " +
                         std::to_string(h.payload_bytes) + " bytes, rank 0 sends " +
                         std::to_string(payload.size()));
    hashes[static_cast<size_t>(h.rank)] = h.job_hash;
    peers[static_cast<size_t>(h.rank)] = std::move(conn);
    ++joined;
  }
  std::string missing;
  for (int r = 1; r < a.world_size; ++r)
    if (peers[static_cast<size_t>(r)].fd < 0)
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  if (!missing.empty())
    problems.push_back("rank 0 waited " + std::to_string(static_cast<int>(a.timeout_s)) +
                       " s (HSTU_DIST_TIMEOUT) on port " + std::to_string(a.port) +
                       " and rank(s) " + missing + " of " + std::to_string(a.world_size) +
                       " never connected: were they started, with MASTER_ADDR/MASTER_PORT "
                       "pointing at rank 0's host?");
  std::string differ;
  for (int r = 1; r < a.world_size; ++r)
    if (peers[static_cast<size_t>(r)].fd >= 0 && hashes[static_cast<size_t>(r)] != hash)
      differ += "; rank " + std::to_string(r) + " = " + hex(hashes[static_cast<size_t>(r)]);
  if (!differ.empty())
    problems.push_back("ranks disagree on the job hash (config + build): rank 0 = " + hex(hash) +
                       differ + ". Every rank must run the same hstu build with the same config");
  std::string message;
  for (const std::string& p : problems) message += (message.empty() ? "" : "; ") + p;
  for (const Fd& p : peers)
    if (p.fd >= 0) send_reply(p.fd, message.empty() ? 0 : 1, hash, message, payload);
  for (const Fd& p : strays) send_reply(p.fd, 1, hash, message, payload);
  HSTU_CHECK(message.empty(), "bootstrap: ", message);
}

// Ranks > 0: connect to rank 0 (retrying until the deadline), check in, receive the payload.
void join(const TcpBootstrap& a, std::span<uint8_t> payload, uint64_t hash) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(a.timeout_s));
  HSTU_CHECK(!a.master_addr.empty(), "bootstrap: rank ", a.rank,
             " has no rank 0 address to connect to: set MASTER_ADDR (and MASTER_PORT)");
  std::string last_error = "no attempt";
  auto pause = std::chrono::milliseconds(50);
  Fd conn;
  while (conn.fd < 0) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int gai =
        ::getaddrinfo(a.master_addr.c_str(), std::to_string(a.port).c_str(), &hints, &res);
    if (gai != 0) {
      last_error = std::string("cannot resolve the host: ") + ::gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai && conn.fd < 0; ai = ai->ai_next) {
        Fd s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
        if (s.fd < 0) continue;
        if (::connect(s.fd, ai->ai_addr, ai->ai_addrlen) == 0)
          conn = std::move(s);
        else
          last_error = std::strerror(errno);
      }
      ::freeaddrinfo(res);
    }
    if (conn.fd >= 0) break;
    if (Clock::now() + pause >= deadline)
      HSTU_THROW("bootstrap: rank ", a.rank, " could not reach rank 0 at ", endpoint(a), " within ",
                 a.timeout_s, " s (HSTU_DIST_TIMEOUT): ", last_error,
                 ". Is rank 0 running, and do MASTER_ADDR/MASTER_PORT name its host?");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
  const int one = 1;
  ::setsockopt(conn.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const Hello h{kMagic,       kVersion, a.rank,
                a.world_size, hash,     static_cast<uint32_t>(payload.size())};
  HSTU_CHECK(write_full(conn.fd, &h, sizeof h), "bootstrap: rank ", a.rank,
             " lost the connection to rank 0 at ", endpoint(a));
  // Rank 0 answers when every rank has checked in or its own deadline (at most timeout_s after
  // it started listening, which it did before this connection) has passed: wait for that answer
  // a little longer than the timeout from now, so a failure arrives as rank 0's message.
  const auto answer_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(a.timeout_s + 2.0));
  Reply r{};
  HSTU_CHECK(read_full(conn.fd, &r, sizeof r, answer_deadline) && r.magic == kMagic,
             "bootstrap: rank ", a.rank, " got no answer from rank 0 at ", endpoint(a), " within ",
             a.timeout_s, " s (HSTU_DIST_TIMEOUT): not every rank checked in, or rank 0 failed");
  std::string message(r.message_bytes, '\0');
  HSTU_CHECK(read_full(conn.fd, message.data(), message.size(), answer_deadline),
             "bootstrap: rank ", a.rank, ": the answer of rank 0 was cut short");
  HSTU_CHECK(r.status == 0, "bootstrap (rank ", a.rank, "): ", message);
  HSTU_CHECK(r.payload_bytes == payload.size() &&
                 read_full(conn.fd, payload.data(), payload.size(), answer_deadline),
             "bootstrap: rank ", a.rank, ": the answer of rank 0 was cut short");
}

}  // namespace

uint64_t build_hash() {
  std::ostringstream os;
#if defined(__VERSION__)
  os << "compiler " << __VERSION__ << ";";
#endif
  os << "c++ " << __cplusplus << "; pointer " << sizeof(void*) << ";";
#if defined(HSTU_WITH_CUDA)
  os << "cuda " << CUDART_VERSION << " archs " << HSTU_CUDA_ARCHS_STR << ";";
#endif
#if defined(HSTU_WITH_NCCL)
  os << "nccl " << NCCL_VERSION_CODE << ";";
#endif
#if defined(HSTU_WITH_MPI)
  os << "mpi;";
#endif
  return fnv1a(os.str());
}

uint64_t job_hash(std::string_view config_text) {
  uint64_t h = fnv1a(config_text) ^ (build_hash() + 0x9e3779b97f4a7c15ull);
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;  // splitmix64's finaliser
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

void tcp_bootstrap(const TcpBootstrap& args, std::span<uint8_t> payload, uint64_t hash) {
  HSTU_CHECK(args.world_size >= 1 && args.rank >= 0 && args.rank < args.world_size,
             "bootstrap: rank ", args.rank, " of ", args.world_size);
  if (args.world_size == 1) return;
  HSTU_CHECK(args.port >= 1 && args.port <= 65535, "bootstrap: no rendezvous port (", args.port,
             "): set MASTER_PORT (or HSTU_BOOTSTRAP_PORT)");
  HSTU_CHECK(args.timeout_s > 0, "bootstrap: the timeout must be positive");
  if (args.rank == 0)
    serve(args, payload, hash);
  else
    join(args, payload, hash);
}

void comm_bootstrap(Comm& comm, std::span<uint8_t> payload, uint64_t hash) {
  comm.check_same(hash,
                  "the job hash (config + build): every rank must run the same hstu build "
                  "with the same config");
  if (comm.size() == 1 || payload.empty()) return;
  comm.broadcast(
      Tensor(payload.data(), DType::kU8, Device::kCPU, {static_cast<int64_t>(payload.size())}), 0);
}

}  // namespace hstu::dist
