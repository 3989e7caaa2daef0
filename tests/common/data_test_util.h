// data_test_util.h — helpers of the data-layer tests: a self-deleting temporary folder, fixture
// file writing, and hand-made datasets built from per-user event lists.
//
// Fixtures are written by the tests themselves, so the repository holds no data files.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"

namespace hstu::test {
// Own inline namespace: test_util.h, data_test_util.h and config_test_util.h each define a
// TempDir and an error_of of their own, and one test binary may compile files that include
// different ones; distinct names keep those definitions apart (one definition rule).
inline namespace data_test_util {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("hstu_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

  // Writes `content` byte for byte to <dir>/name and returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream out(file(name), std::ios::binary);
    out << content;
    return file(name);
  }

 private:
  std::filesystem::path path_;
};

// One user's events of a hand-made dataset.
struct UserEvents {
  UserEvents(std::vector<int32_t> i, std::vector<int64_t> t = {}, std::vector<int32_t> a = {})
      : items(std::move(i)), timestamps(std::move(t)), actions(std::move(a)) {}
  std::vector<int32_t> items;
  std::vector<int64_t> timestamps;  // empty = 10, 20, 30, ...
  std::vector<int32_t> actions;     // empty = no actions
};

inline SequenceDataset make_dataset(const std::vector<UserEvents>& users, int64_t num_items,
                                    int32_t num_actions = 0) {
  SequenceArrays a;
  a.user_offsets.push_back(0);
  for (const UserEvents& u : users) {
    for (size_t i = 0; i < u.items.size(); ++i) {
      a.items.push_back(u.items[i]);
      a.timestamps.push_back(u.timestamps.empty() ? 10 * static_cast<int64_t>(i + 1)
                                                  : u.timestamps[i]);
      if (!u.actions.empty()) a.actions.push_back(u.actions[i]);
    }
    a.user_offsets.push_back(static_cast<int64_t>(a.items.size()));
  }
  SequenceDataset ds;
  ds.name = "handmade";
  ds.num_items = num_items;
  ds.num_actions = num_actions;
  attach_arrays(ds, std::move(a));
  return ds;
}

// The message of the hstu::Error that `fn` throws ("" if it does not throw).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const hstu::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace data_test_util
}  // namespace hstu::test
