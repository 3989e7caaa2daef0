// atomic_file.h — every file hstu writes whole (checkpoints, trainer state, configs, traces,
// preprocessed datasets) goes through AtomicFile: the bytes go to a temporary beside the target,
// which is fsynced, renamed over the target, and the directory fsynced, so a reader (or a run
// after a crash) sees the old file or the complete new one, never a part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hstu {

// Writes `<path>.tmp<pid>` (the process id keeps concurrent writers of one path apart) and
// renames it over `path` on commit(); destroyed uncommitted (an error on the way), it removes
// the temporary and leaves any existing `path` untouched.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& temp_path() const { return tmp_path_; }

  void write(const void* data, size_t bytes);  // appends; buffered
  // Overwrites bytes written before at `offset` (e.g. a header completed last).
  void write_at(uint64_t offset, const void* data, size_t bytes);
  // Flushes, fsyncs the temporary, renames it over the target and fsyncs the directory.
  void commit();

 private:
  void flush();

  std::string path_, tmp_path_;
  int fd_ = -1;
  std::vector<char> buf_;
  size_t buffered_ = 0;
  uint64_t size_ = 0;  // bytes written so far
};

// Writes `bytes` to `path` atomically (AtomicFile in one call).
void atomic_write_file(const std::string& path, std::string_view bytes);

// Fault injection for the crash-consistency tests: the n-th AtomicFile::commit() from now on
// (1 = the next) throws before its temporary is renamed, as a failed write (disk full, I/O error)
// would; 0 = never. HSTU_FAULT_AT_WRITE=N in the environment arms it for the N-th commit of the
// process.
void inject_write_fault(int64_t n);
// Kill injection for the kill tests (tests/e2e/test_kill_resume.cpp): HSTU_KILL_AT_WRITE=N[:where]
// makes the process raise SIGKILL inside its N-th commit, where = write (half the last buffered
// bytes written: a torn temporary), rename (temporary fsynced, not renamed; the default) or after
// (renamed, directory not fsynced). HSTU_WRITE_LOG=FILE appends "<commit number> <path>" per
// commit to FILE.
// AtomicFile commits of the process so far (counted since the last inject_write_fault()).
int64_t atomic_file_commits();

}  // namespace hstu
