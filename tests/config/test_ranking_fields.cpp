// test_ranking_fields.cpp — DatasetArgs.ranking_split / truncate: accepted values bind, the
// recsys-examples combination (user_70_30 + oldest) is allowed, and "oldest" with the time split
// is refused with a message naming both fields.
#include <gtest/gtest.h>

#include "config/load.h"
#include "core/error.h"

namespace hstu {
namespace {

TEST(RankingFields, BindAndValidate) {
  const Config c = load_config_text(
      "RankingArgs.num_tasks = 1\nRankingArgs.prediction_head_arch = [8, 1]\n"
      "DatasetArgs.ranking_split = 'user_70_30'\nDatasetArgs.truncate = 'oldest'\n",
      "t.gin", {}, nullptr);
  EXPECT_EQ(c.dataset.ranking_split, "user_70_30");
  EXPECT_EQ(c.dataset.truncate, "oldest");
  std::string err;
  try {
    load_config_text(
        "RankingArgs.num_tasks = 1\nRankingArgs.prediction_head_arch = [8, 1]\n"
        "DatasetArgs.truncate = 'oldest'\n",
        "t.gin", {}, nullptr);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("DatasetArgs.truncate"), std::string::npos) << err;
  EXPECT_NE(err.find("ranking_split"), std::string::npos) << err;
}

}  // namespace
}  // namespace hstu
