// config_test_util.h — helpers shared by the config tests: capturing an error's message and
// writing gin files into a fresh temporary folder.
//
// Error tests compare messages (file:line, suggestions), so the helper returns the text instead
// of only checking that something was thrown.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace hstu::test {
// Own inline namespace: test_util.h, data_test_util.h and config_test_util.h each define a
// TempDir and an error_of of their own, and one test binary may compile files that include
// different ones; distinct names keep those definitions apart (one definition rule).
inline namespace config_test_util {

// The message of the hstu::Error that `f` throws, or "(no error)".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A fresh folder under the system temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("hstu_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `text` to <dir>/<name> (creating sub-folders) and returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace config_test_util
}  // namespace hstu::test
