// test_atomic_file.cpp — atomic whole-file writes: the target is replaced whole (buffered, direct
// and overwritten bytes alike), no temporary is left behind, and an abandoned write keeps the
// old file, as does an injected fault (inject_write_fault).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "io/atomic_file.h"

namespace hstu {
namespace {

using test::error_of;
using test::files_in;
using test::read_file;

TEST(AtomicFile, ReplacesWholeFileAndLeavesNoTemporary) {
  test::TempDir dir;
  const std::string path = dir.file("state.json");
  atomic_write_file(path, "a much longer first version of the file");
  atomic_write_file(path, "{\"step\": 2}");
  EXPECT_EQ(read_file(path), "{\"step\": 2}");
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"state.json"});

  // Large writes mixing buffered and direct paths.
  std::string big;
  for (int i = 0; i < 2500000; ++i) big += static_cast<char>('a' + i % 26);
  {
    AtomicFile f(path);
    f.write(big.data(), 10);
    f.write(big.data() + 10, big.size() / 2);
    f.write(big.data() + 10 + big.size() / 2, big.size() - 10 - big.size() / 2);
    f.commit();
  }
  EXPECT_EQ(read_file(path), big);
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"state.json"});
}

TEST(AtomicFile, WriteAtOverwritesEarlierBytes) {
  test::TempDir dir;
  const std::string path = dir.file("seq.bin");
  AtomicFile f(path);
  f.write("HEADER--", 8);
  const std::string body(3 << 20, 'b');  // past the buffer: the header is on disk already
  f.write(body.data(), body.size());
  f.write("tail", 4);  // still buffered when overwriting
  f.write_at(0, "header", 6);
  f.write_at(8 + body.size() + 2, "IL", 2);
  EXPECT_NE(error_of([&] { f.write_at(8 + body.size() + 3, "xx", 2); }).find("past the"),
            std::string::npos);
  f.commit();
  EXPECT_EQ(read_file(path), "header--" + body + "taIL");
}

TEST(AtomicFile, AbandonedWriteKeepsTheOldFile) {
  test::TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  atomic_write_file(path, "old");
  try {
    AtomicFile f(path);
    f.write("partial new content", 19);
    EXPECT_EQ(f.temp_path().rfind(path + ".tmp", 0), 0u);
    EXPECT_EQ(files_in(dir.path()).size(), 2u);  // the target and the temporary
    throw std::runtime_error("crash mid-write");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"ckpt.safetensors"});
  EXPECT_NE(error_of([&] {
              atomic_write_file(dir.file("no/such/dir/x"), "x");
            }).find("cannot create " + dir.file("no/such/dir/x.tmp")),
            std::string::npos);
}

TEST(AtomicFile, InjectedFaultFailsTheNthCommitOnly) {
  test::TempDir dir;
  const std::string path = dir.file("model.safetensors");
  atomic_write_file(path, "old");
  inject_write_fault(2);
  atomic_write_file(dir.file("a"), "a");
  EXPECT_NE(error_of([&] { atomic_write_file(path, "new"); }).find("injected fault"),
            std::string::npos);
  EXPECT_EQ(atomic_file_commits(), 2);
  atomic_write_file(dir.file("b"), "b");  // later writes succeed
  inject_write_fault(0);
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(files_in(dir.path()), (std::vector<std::string>{"a", "b", "model.safetensors"}));
}

}  // namespace
}  // namespace hstu
