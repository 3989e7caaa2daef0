// test_eval_report.cpp — metric values as JSON (non-finite as null, and back as NaN) and the
// aligned eval table.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "train/eval_report.h"

namespace hstu {
namespace {

TEST(MetricsJson, NonFiniteValuesAreNullAndComeBackAsNan) {
  const NamedValues v = {{"HR@10", 0.1}, {"AUC/click", NAN}, {"MRR", INFINITY}, {"N", 3.0}};
  const Json o = metrics_to_json(v);
  EXPECT_EQ(json::dump(o), R"({"HR@10":0.1,"AUC/click":null,"MRR":null,"N":3.0})");
  const NamedValues back = metrics_from_json(json::parse(json::dump(o)));
  ASSERT_EQ(back.size(), 4u);
  EXPECT_EQ(back[0], v[0]);
  EXPECT_EQ(back[1].first, "AUC/click");
  EXPECT_TRUE(std::isnan(back[1].second));
  EXPECT_TRUE(std::isnan(back[2].second));
  EXPECT_EQ(back[3], v[3]);
  EXPECT_TRUE(metrics_from_json(Json()).empty());  // not an object: no values
  EXPECT_NE(test::error_of([] {
              metrics_from_json({{"AUC", "high"}});
            }).find("JSON key \"AUC\" is a string, expected a number"),
            std::string::npos);
}

TEST(EvalTable, AlignedColumns) {
  const std::vector<EvalRow> rows = {
      {"val", {{"HR@10", 0.12345}, {"NDCG@10", 0.0625}, {"MRR", 0.05}}},
      {"test", {{"HR@10", 0.1}, {"NDCG@10", NAN}, {"MRR", 0.04}}},
      {"baseline", {{"HR@10", 0.01}, {"AUC/task3", NAN}}},
  };
  EXPECT_EQ(format_eval_table(rows),
            "split      HR@10    NDCG@10     MRR  AUC/task3\n"
            "val       0.1235     0.0625  0.0500          -\n"
            "test      0.1000  undefined  0.0400          -\n"
            "baseline  0.0100          -       -  undefined\n"
            "warning: test NDCG@10 is undefined (no evaluated sample defines it)\n"
            "warning: baseline AUC/task3 is undefined (the evaluated labels hold one class only: "
            "AUC needs positives and negatives)\n");
  std::ostringstream out;
  print_eval_table(out, {{"val", {{"AUC", 0.75}}}}, 2);
  EXPECT_EQ(out.str(), "split   AUC\nval    0.75\n");
}

TEST(EvalTable, EachUndefinedClassificationMetricSaysWhy) {
  const std::string t = format_eval_table(
      {{"eval",
        {{"Recall/task0", NAN}, {"Precision/task1", NAN}, {"F1/task2", NAN}, {"AP/task0", NAN}}}});
  EXPECT_NE(t.find("warning: eval Recall/task0 is undefined (no evaluated candidate has a "
                   "positive label: Recall divides by the positives)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("warning: eval Precision/task1 is undefined (no evaluated candidate is "
                   "predicted positive (sigmoid(logit) > 0.5)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("warning: eval F1/task2 is undefined (no positive label and no positive "
                   "prediction: TP + FP + FN = 0)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("warning: eval AP/task0 is undefined (no evaluated candidate has a positive "
                   "label: AP divides by the positives)"),
            std::string::npos)
      << t;
}

}  // namespace
}  // namespace hstu
