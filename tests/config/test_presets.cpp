// test_presets.cpp — every preset shipped in configs/ loads and validates (a preset that drifts
// from the schema fails here, not in a user's run).
#include <gtest/gtest.h>

#include <filesystem>

#include "config/load.h"

namespace hstu {
namespace {

TEST(Presets, EveryShippedConfigLoads) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(HSTU_SOURCE_DIR "/configs")) {
    if (e.path().extension() != ".gin") continue;
    SCOPED_TRACE(e.path().string());
    std::vector<std::string> warnings;
    EXPECT_NO_THROW(load_config(e.path().string(), {}, &warnings));
    ++n;
  }
  EXPECT_GE(n, 13);
}

}  // namespace
}  // namespace hstu
