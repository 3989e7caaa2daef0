// test_peer_configs.cpp — every peer gin file in ../shared/peer-configs/ through `hstu check`
// (HSTU_BIN), against the table of docs/PEER_CONFIGS.md: each row's result (runs / runs with a
// named difference / rejected) is the exit status, each «quoted» text must appear in the output,
// and every file under ../shared/peer-configs/ must have a row. Meta's research files must give
// exactly the effective config of the translated presets. Skipped when ../shared is absent.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const std::string kPeers = std::string(HSTU_SOURCE_DIR) + "/../shared/peer-configs";
const std::string kTable = std::string(HSTU_SOURCE_DIR) + "/docs/PEER_CONFIGS.md";

struct Outcome {
  int status = -1;
  std::string out, err;  // stdout; stderr
};

// Runs `hstu <args>`, stdout and stderr apart.
Outcome hstu(const std::string& args) {
  const std::string err_file =
      fs::temp_directory_path() / ("hstu_peer_" + std::to_string(getpid()));
  Outcome r;
  FILE* p =
      popen((std::string(std::getenv("HSTU_BIN")) + " " + args + " 2>" + err_file).c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream in(err_file);
  std::ostringstream os;
  os << in.rdbuf();
  r.err = os.str();
  fs::remove(err_file);
  return r;
}

struct Row {
  std::string file, result;
  std::vector<std::string> quotes;  // the «...» texts
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(' ') - b + 1);
}

// The rows of the table in docs/PEER_CONFIGS.md ("| `file` | source | result | text |").
std::vector<Row> table() {
  std::ifstream in(kTable);
  std::vector<Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cols;
    std::stringstream ss(line.substr(1));
    std::string col;
    while (std::getline(ss, col, '|')) cols.push_back(trim(col));
    if (cols.size() < 4) continue;
    Row r;
    r.file = cols[0].substr(1, cols[0].size() - 2);
    r.result = cols[2];
    const std::string open = "«", close = "»";
    for (size_t at = cols[3].find(open); at != std::string::npos; at = cols[3].find(open, at)) {
      const size_t end = cols[3].find(close, at);
      r.quotes.push_back(cols[3].substr(at + open.size(), end - at - open.size()));
      at = end;
    }
    rows.push_back(r);
  }
  return rows;
}

TEST(PeerConfigs, EveryFileAsRecordedInTheTable) {
  if (!fs::exists(kPeers)) GTEST_SKIP() << kPeers << " not found (../shared is absent)";
  const std::vector<Row> rows = table();
  ASSERT_FALSE(rows.empty()) << "no rows in " << kTable;
  std::map<std::string, const Row*> by_file;
  for (const Row& r : rows) by_file[r.file] = &r;
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(kPeers)) {
    if (e.path().extension() != ".gin") continue;
    ++files;
    const std::string rel = fs::relative(e.path(), kPeers).string();
    ASSERT_TRUE(by_file.count(rel)) << rel << " has no row in docs/PEER_CONFIGS.md";
    const Row& row = *by_file[rel];
    const Outcome o = hstu("check --quiet " + e.path().string());
    SCOPED_TRACE(rel + ":\n" + o.err);
    const bool rejected = row.result == "rejected";
    EXPECT_EQ(o.status, rejected ? 2 : 0);
    const bool differs = row.result == "runs with a named difference";
    EXPECT_TRUE(rejected || differs || row.result == "runs") << "result: " << row.result;
    if (differs) {
      EXPECT_NE(o.err.find(": difference: "), std::string::npos);
    }
    for (const std::string& q : row.quotes) EXPECT_NE(o.err.find(q), std::string::npos) << q;
    if (rejected || rel.find("recsys-examples/") != 0) continue;
    // No key ignored silently: every key a recsys-examples file binds is in the effective config
    // (honoured) or named in a note (a named difference, or no effect on results).
    const Outcome full = hstu("check " + e.path().string());
    std::ifstream in(e.path());
    std::string line;
    const std::regex key(R"(^\s*([A-Za-z_]\w*\.[A-Za-z_]\w*)\s*=)");
    std::smatch m;
    while (std::getline(in, line)) {
      if (!std::regex_search(line, m, key)) continue;
      const std::string k = m[1];
      const bool honoured = full.out.find("\n" + k + " = ") != std::string::npos;
      const bool noted = full.err.find(k) != std::string::npos;
      EXPECT_TRUE(honoured || noted) << rel << ": " << k << " is neither honoured nor noted";
    }
  }
  EXPECT_EQ(files, static_cast<int>(rows.size())) << "rows without a file";
}

// The effective config (hstu check's stdout, without its comment lines).
std::string effective(const std::string& file) {
  const Outcome o = hstu("check --set TrainerArgs.run_dir=runs/x " + file);
  EXPECT_EQ(o.status, 0) << file << "\n" << o.err;
  std::istringstream in(o.out);
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind("# ", 0) != 0) out += line + "\n";
  return out;
}

TEST(PeerConfigs, MetaResearchFilesGiveTheTranslatedPresets) {
  if (!fs::exists(kPeers)) GTEST_SKIP() << kPeers << " not found (../shared is absent)";
  const std::string meta = kPeers + "/generative-recommenders/configs/";
  const std::string presets = std::string(HSTU_SOURCE_DIR) + "/configs/";
  const std::pair<const char*, const char*> pairs[] = {
      {"ml-1m/hstu-sampled-softmax-n128-final.gin", "ml-1m-hstu.gin"},
      {"ml-1m/hstu-sampled-softmax-n128-large-final.gin", "ml-1m-hstu-large.gin"},
      {"amzn-books/hstu-sampled-softmax-n512-final.gin", "amzn-books-hstu.gin"},
  };
  for (const auto& [m, p] : pairs) {
    const std::string a = effective(meta + m), b = effective(presets + p);
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, b) << m << " vs configs/" << p;
  }
}

}  // namespace
