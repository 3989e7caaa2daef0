// fuzz_util.h — what the libFuzzer targets share: a per-process scratch folder, writing an input
// (or its parts) to files there, and the one rule every target checks: a parser may reject an
// input only with hstu::Error (any other exception, a crash or a sanitizer report is a finding).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace hstu::fuzz {

// /tmp/hstu_fuzz_<pid>/, created on first use.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const std::string d =
        (std::filesystem::temp_directory_path() / ("hstu_fuzz_" + std::to_string(::getpid())))
            .string();
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Splits an input into parts at each "\n@@@@\n" line (one part per file of a multi-file format;
// parts past the input are empty).
inline std::vector<std::string> split_parts(const uint8_t* data, size_t size, size_t parts) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t i = 0; i < parts; ++i) {
    if (at > all.size()) {
      out.emplace_back();
      continue;
    }
    const size_t end = i + 1 == parts ? std::string_view::npos : all.find("\n@@@@\n", at);
    out.emplace_back(all.substr(at, end == std::string_view::npos ? all.size() - at : end - at));
    at = end == std::string_view::npos ? all.size() + 1 : end + 6;
  }
  return out;
}

// Runs fn; hstu::Error is the expected rejection of a bad input.
template <class Fn>
void expect_accept_or_error(Fn fn) {
  try {
    fn();
  } catch (const Error&) {
  }
}

}  // namespace hstu::fuzz
