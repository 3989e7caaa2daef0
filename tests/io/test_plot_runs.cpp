// test_plot_runs.cpp — tools/plot_runs.py on two small synthetic runs (metrics.jsonl +
// config.gin): a PNG and an SVG come out, and a missing or empty metrics.jsonl or an unknown
// quantity is an error naming it. Skipped where python3 cannot import matplotlib.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/test_util.h"
#include "io/io_test_util.h"

namespace hstu {
namespace {

// A run directory as hstu train leaves it: train lines every 10 steps, an eval every 20 steps
// (validation and test), the summary; its config.gin names the seed.
void write_run(const std::string& dir, int seed, double loss0) {
  std::filesystem::create_directories(dir);
  test::write_file(dir + "/config.gin", "SyntheticArgs.seed = 7\nTrainerArgs.seed = " +
                                            std::to_string(seed) + "  # the run's seed\n");
  std::string lines;
  for (int step = 10; step <= 60; step += 10) {
    const std::string loss = std::to_string(loss0 / step * 10);
    lines += "{\"event\":\"train\",\"step\":" + std::to_string(step) +
             ",\"epoch\":0,\"loss\":" + loss + ",\"tokens_per_s\":1000.5,\"lr\":0.001}\n";
    if (step % 20 == 0) {
      const std::string hr = std::to_string(0.1 + step / 200.0);
      lines += "{\"event\":\"eval\",\"epoch\":1,\"step\":" + std::to_string(step) +
               ",\"validation\":{\"HR@10\":" + hr + ",\"NDCG@10\":null},\"test\":{\"HR@10\":" + hr +
               ",\"NDCG@10\":0.05,\"MRR\":0.04}}\n";
    }
  }
  lines += "{\"event\":\"summary\",\"steps\":60,\"final_test\":{\"HR@10\":0.4}}\n";
  test::write_file(dir + "/metrics.jsonl", lines);
}

class PlotRuns : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string lacks = test::python_lacks("matplotlib");
    if (!lacks.empty()) GTEST_SKIP() << lacks;
    write_run(dir_.file("seed1"), 1, 6.0);
    write_run(dir_.file("seed2"), 2, 5.5);
  }
  test::CommandResult plot(const std::string& args) {
    return test::run_command(std::string("python3 ") + HSTU_SOURCE_DIR + "/tools/plot_runs.py " +
                             args);
  }
  test::TempDir dir_;
};

TEST_F(PlotRuns, WritesAPngOfTwoRuns) {
  const std::string out = dir_.file("curves.png");
  const test::CommandResult r =
      plot(dir_.file("seed1") + " " + dir_.file("seed2") + " --out " + out + " --label-by seed");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string png = test::read_file(out);
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_NE(r.output.find("train/loss, test/HR@10, test/NDCG@10"), std::string::npos) << r.output;
}

TEST_F(PlotRuns, WritesAnSvgOfChosenMetrics) {
  const std::string out = dir_.file("curves.svg");
  const test::CommandResult r = plot(dir_.file("seed1") + " " + dir_.file("seed2") + " --out " +
                                     out + " --metrics loss,lr,validation/HR@10,test/MRR");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string svg = test::read_file(out);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
}

TEST_F(PlotRuns, MissingOrEmptyMetricsAreErrorsNamingTheFile) {
  std::filesystem::create_directories(dir_.file("none"));
  test::CommandResult r = plot(dir_.file("seed1") + " " + dir_.file("none"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(dir_.file("none") + "/metrics.jsonl not found"), std::string::npos)
      << r.output;
  test::write_file(dir_.file("none/metrics.jsonl"), "");
  r = plot(dir_.file("none"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(dir_.file("none") + "/metrics.jsonl is empty"), std::string::npos)
      << r.output;
  r = plot(dir_.file("seed1") + " --metrics test/AUC");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no run has test/AUC; available: test/HR@10"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace hstu
