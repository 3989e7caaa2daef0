// fuzz_raw_reader.h — the body of the raw dataset reader targets: the input's parts become the
// dataset's files in a fresh folder, read_raw reads them (strict and with skip_malformed), and
// what it accepts is preprocessed (build_dataset), as `hstu preprocess` does.
#pragma once

#include <filesystem>

#include "data/preprocess.h"
#include "data/readers.h"
#include "fuzz_util.h"

namespace hstu::fuzz {

// files: the dataset's file names under its folder; single_file: read_raw takes the file itself.
inline void fuzz_raw_reader(const uint8_t* data, size_t size, const std::string& dataset,
                            const std::vector<std::string>& files, bool single_file = false) {
  const std::string dir = scratch_dir() + "/" + dataset;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<std::string> parts = split_parts(data, size, files.size());
  for (size_t i = 0; i < files.size(); ++i) write_file(dataset + "/" + files[i], parts[i]);
  const std::string path = single_file ? dir + "/" + files[0] : dir;
  for (const bool skip : {false, true})
    expect_accept_or_error([&] {
      const RawData raw = read_raw(dataset, path, skip);
      for (const char* tie_break : {"file", "shuffle"}) build_dataset(raw, nullptr, tie_break);
    });
}

}  // namespace hstu::fuzz
