// test_config_doc.cpp — keeps docs/CONFIG.md equal to config_reference_markdown().
//
// The file is a hand-written introduction, a marker line, then the generated tables. With
// HSTU_REGEN_DOCS=1 the test rewrites everything after the marker instead of comparing
// (tools/gen_config_doc.sh does that).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "config/schema.h"

namespace hstu {
namespace {

constexpr const char* kDocPath = HSTU_SOURCE_DIR "/docs/CONFIG.md";
constexpr const char* kMarker =
    "<!-- Generated from src/config/schema_fields.cpp by tools/gen_config_doc.sh; do not edit "
    "below. -->\n";

TEST(ConfigDoc, ConfigMdMatchesTheSchema) {
  std::ifstream in(kDocPath, std::ios::binary);
  ASSERT_TRUE(in) << "cannot read " << kDocPath;
  std::ostringstream os;
  os << in.rdbuf();
  const std::string text = os.str();
  const size_t at = text.find(kMarker);
  ASSERT_NE(at, std::string::npos) << kDocPath << " lacks the marker line " << kMarker;
  const std::string intro = text.substr(0, at + std::string(kMarker).size());
  const std::string generated = config_reference_markdown();

  const char* regen = std::getenv("HSTU_REGEN_DOCS");
  if (regen && std::string(regen) == "1") {
    std::ofstream(kDocPath, std::ios::binary) << intro << generated;
    GTEST_SKIP() << "rewrote " << kDocPath;
  }
  EXPECT_TRUE(text.substr(intro.size()) == generated)
      << kDocPath << " is out of date with src/config/schema_fields.cpp; regenerate it with "
      << "tools/gen_config_doc.sh (or: HSTU_REGEN_DOCS=1 <build>/test_config "
         "--gtest_filter=ConfigDoc.*)";
}

}  // namespace
}  // namespace hstu
