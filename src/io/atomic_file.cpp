// atomic_file.cpp — buffered writes to a temporary, fsync, rename, directory fsync.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace hstu {
namespace {

constexpr size_t kWriteBuffer = size_t(1) << 20;

std::atomic<int64_t> g_commits{0};
std::atomic<int64_t> g_fault_at{-1};  // -1: HSTU_FAULT_AT_WRITE not read yet; 0: off

int64_t fault_at() {
  if (g_fault_at.load() < 0) {
    const char* env = std::getenv("HSTU_FAULT_AT_WRITE");
    int64_t unset = -1;
    g_fault_at.compare_exchange_strong(unset, env ? std::max<int64_t>(0, std::atoll(env)) : 0);
  }
  return g_fault_at.load();
}

// HSTU_KILL_AT_WRITE=N[:where]: the process raises SIGKILL in its N-th commit, at `where`:
// "write" (half of the last buffered bytes written, nothing fsynced: a torn temporary),
// "rename" (the temporary complete and fsynced, not yet renamed; the default) or "after" (renamed,
// the directory not yet fsynced).
enum class KillPoint { kWrite, kRename, kAfter };
struct KillAt {
  int64_t n = 0;  // 0: off
  KillPoint where = KillPoint::kRename;
};

const KillAt& kill_at() {
  static const KillAt k = [] {
    KillAt r;
    const char* env = std::getenv("HSTU_KILL_AT_WRITE");
    if (!env || !*env) return r;
    const std::string s(env);
    const size_t colon = s.find(':');
    r.n = std::max<int64_t>(0, std::atoll(s.substr(0, colon).c_str()));
    const std::string where = colon == std::string::npos ? "rename" : s.substr(colon + 1);
    if (where == "write")
      r.where = KillPoint::kWrite;
    else if (where == "after")
      r.where = KillPoint::kAfter;
    else
      HSTU_CHECK(where == "rename", "HSTU_KILL_AT_WRITE=", s,
                 ": the point after ':' must be write, rename or after");
    return r;
  }();
  return k;
}

void maybe_kill(int64_t commit, KillPoint where) {
  const KillAt& k = kill_at();
  if (k.n == commit && k.where == where) ::raise(SIGKILL);
}

// HSTU_WRITE_LOG=FILE: each commit appends "<commit number> <path>" to FILE (tests find the
// commits of a save this way).
void log_commit(int64_t commit, const std::string& path) {
  static const char* log = std::getenv("HSTU_WRITE_LOG");
  if (!log || !*log) return;
  if (FILE* f = std::fopen(log, "a")) {
    std::fprintf(f, "%lld %s\n", static_cast<long long>(commit), path.c_str());
    std::fclose(f);
  }
}

std::string errno_text() {
  return std::strerror(errno);
}

// Writes all `bytes` at file offset `at`, retrying short and interrupted writes.
void pwrite_all(int fd, const char* p, size_t bytes, uint64_t at, const std::string& path) {
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, bytes, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    HSTU_CHECK(n > 0, "cannot write ", path, ": ", errno_text());
    p += n;
    at += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

}  // namespace

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)),
      tmp_path_(path_ + ".tmp" + std::to_string(::getpid())),
      buf_(kWriteBuffer) {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HSTU_CHECK(fd_ >= 0, "cannot create ", tmp_path_, ": ", errno_text());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  HSTU_CHECK(fd_ >= 0, "write to ", path_, " after commit");
  if (bytes == 0) return;  // an empty span may come with a null pointer (memcpy's UB)
  const char* p = static_cast<const char*>(data);
  if (buffered_ + bytes > buf_.size()) flush();
  if (bytes < buf_.size()) {
    std::memcpy(buf_.data() + buffered_, p, bytes);
    buffered_ += bytes;
  } else {  // large writes bypass the buffer
    pwrite_all(fd_, p, bytes, size_, tmp_path_);
  }
  size_ += bytes;
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t bytes) {
  HSTU_CHECK(fd_ >= 0, "write to ", path_, " after commit");
  HSTU_CHECK(offset + bytes <= size_, path_, ": overwrite of bytes [", offset, ", ", offset + bytes,
             ") past the ", size_, " written");
  flush();
  pwrite_all(fd_, static_cast<const char*>(data), bytes, offset, tmp_path_);
}

void AtomicFile::flush() {
  pwrite_all(fd_, buf_.data(), buffered_, size_ - buffered_, tmp_path_);
  buffered_ = 0;
}

void AtomicFile::commit() {
  HSTU_CHECK(fd_ >= 0, path_, " committed twice");
  const int64_t commit = ++g_commits;
  HSTU_CHECK(commit != fault_at(), "cannot write ", path_, ": injected fault (write ", commit,
             ", HSTU_FAULT_AT_WRITE)");
  log_commit(commit, path_);
  if (kill_at().n == commit && kill_at().where == KillPoint::kWrite) {
    pwrite_all(fd_, buf_.data(), buffered_ / 2, size_ - buffered_, tmp_path_);
    maybe_kill(commit, KillPoint::kWrite);
  }
  flush();
  HSTU_CHECK(::fsync(fd_) == 0, "cannot fsync ", tmp_path_, ": ", errno_text());
  maybe_kill(commit, KillPoint::kRename);
  const int fd = fd_;
  fd_ = -1;
  HSTU_CHECK(::close(fd) == 0, "cannot close ", tmp_path_, ": ", errno_text());
  HSTU_CHECK(::rename(tmp_path_.c_str(), path_.c_str()) == 0, "cannot rename ", tmp_path_, " to ",
             path_, ": ", errno_text());
  tmp_path_.clear();
  maybe_kill(commit, KillPoint::kAfter);
  // Make the rename itself durable.
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HSTU_CHECK(dfd >= 0, "cannot open directory ", dir, ": ", errno_text());
  const int rc = ::fsync(dfd);
  ::close(dfd);
  HSTU_CHECK(rc == 0, "cannot fsync directory ", dir, ": ", errno_text());
}

void inject_write_fault(int64_t n) {
  g_commits = 0;
  g_fault_at = std::max<int64_t>(0, n);
}

int64_t atomic_file_commits() {
  return g_commits.load();
}

void atomic_write_file(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace hstu
