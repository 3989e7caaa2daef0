// test_env_doc.cpp — keeps docs/ENVIRONMENT.md true: every HSTU_* environment variable the
// sources name (a quoted "HSTU_..." literal anywhere under src/) has a row in one of its tables,
// and every row names one they still read. A switch added without a row, or removed with its row
// left behind, fails here with the name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace hstu {
namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Every match of the regex's first group in text, added to out.
void collect(const std::string& text, const std::regex& re, std::set<std::string>& out) {
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it)
    out.insert((*it)[1].str());
}

TEST(EnvDoc, EnvironmentMdListsEveryVariableTheSourcesRead) {
  const std::filesystem::path root(HSTU_SOURCE_DIR);
  std::set<std::string> in_src;
  const std::regex quoted("\"(HSTU_[A-Z0-9_]+)\"");
  for (const auto& e : std::filesystem::recursive_directory_iterator(root / "src")) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() &&
        (ext == ".h" || ext == ".cpp" || ext == ".cu" || ext == ".cuh" || ext == ".in"))
      collect(read_text(e.path()), quoted, in_src);
  }
  ASSERT_GT(in_src.size(), 10u) << "the scan of src/ found almost no HSTU_* names";

  const std::filesystem::path doc = root / "docs" / "ENVIRONMENT.md";
  const std::string text = read_text(doc);
  ASSERT_FALSE(text.empty()) << "cannot read " << doc;
  std::set<std::string> in_doc;
  collect(text, std::regex("\\n\\| `(HSTU_[A-Z0-9_]+)` \\|"), in_doc);

  for (const std::string& v : in_src)
    EXPECT_TRUE(in_doc.count(v)) << v << " is read under src/ but has no row in " << doc;
  for (const std::string& v : in_doc)
    EXPECT_TRUE(in_src.count(v)) << doc << " has a row for " << v << ", which src/ no longer names";
}

}  // namespace
}  // namespace hstu
