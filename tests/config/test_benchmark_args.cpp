// test_benchmark_args.cpp — recsys-examples' BenchmarkDatasetArgs read from gin: scoped
// FeatureArgs / RandomDistribution / embedding-table references, the value_dists dict, and
// errors naming the binding.
#include <gtest/gtest.h>

#include "common/config_test_util.h"
#include "config/benchmark_args.h"
#include "config/gin.h"

namespace hstu {
namespace {

using test::error_of;

// The data part of recsys-examples' benchmark_ranking.gin, plus a jagged contextual group.
const char* kGin = R"(
item_seqlen_dist/RandomDistribution.dist_type = 'zipf'
item_seqlen_dist/RandomDistribution.alpha = 1.5
item_seqlen_dist/RandomDistribution.low = 1
item_value_dist/RandomDistribution.dist_type = 'zipf'
item_value_dist/RandomDistribution.alpha = 1.2
item_and_action_feature/FeatureArgs.feature_names = ['item', 'action']
item_and_action_feature/FeatureArgs.max_sequence_length = 4096
item_and_action_feature/FeatureArgs.is_jagged = True
item_and_action_feature/FeatureArgs.seqlen_dist = @item_seqlen_dist/RandomDistribution()
item_and_action_feature/FeatureArgs.value_dists = {
    'item': @item_value_dist/RandomDistribution(),
}
user/FeatureArgs.feature_names = ['user_age']
user/FeatureArgs.max_sequence_length = 1
BenchmarkDatasetArgs.feature_args = [
    @item_and_action_feature/FeatureArgs(),
    @user/FeatureArgs(),
]
item_embedding/DynamicEmbeddingArgs.feature_names = ['item']
item_embedding/DynamicEmbeddingArgs.table_name = 'item'
item_embedding/DynamicEmbeddingArgs.item_vocab_size_or_capacity = 50000000
item_embedding/DynamicEmbeddingArgs.evict_strategy = 'lru'
action_embedding/EmbeddingArgs.feature_names = ['action']
action_embedding/EmbeddingArgs.item_vocab_size_or_capacity = 100
age/EmbeddingArgs.feature_names = ['user_age']
age/EmbeddingArgs.item_vocab_size_or_capacity = 7
BenchmarkDatasetArgs.embedding_args = [
    @item_embedding/DynamicEmbeddingArgs(),
    @action_embedding/EmbeddingArgs(),
    @age/EmbeddingArgs(),
]
BenchmarkDatasetArgs.item_feature_name='item'
BenchmarkDatasetArgs.contextual_feature_names=['user_age']
BenchmarkDatasetArgs.action_feature_name='action'
BenchmarkDatasetArgs.max_num_candidates=0
)";

TEST(BenchmarkArgs, ReadsRecsysExamplesBenchmarkData) {
  EXPECT_FALSE(parse_benchmark_args(gin::parse_text("NetworkArgs.num_layers = 2\n", "t.gin")));
  const auto a = parse_benchmark_args(gin::parse_text(kGin, "t.gin"));
  ASSERT_TRUE(a);
  ASSERT_EQ(a->features.size(), 2u);
  const BenchmarkFeature& f = a->features[0];
  EXPECT_EQ(f.feature_names, (std::vector<std::string>{"item", "action"}));
  EXPECT_EQ(f.max_sequence_length, 4096);
  EXPECT_TRUE(f.is_jagged);
  ASSERT_TRUE(f.seqlen_dist);
  EXPECT_EQ(f.seqlen_dist->dist_type, "zipf");
  EXPECT_DOUBLE_EQ(f.seqlen_dist->alpha, 1.5);
  EXPECT_DOUBLE_EQ(f.seqlen_dist->low, 1);
  EXPECT_DOUBLE_EQ(f.seqlen_dist->high, -1);  // filled from max_sequence_length when generated
  ASSERT_EQ(f.value_dists.count("item"), 1u);
  EXPECT_DOUBLE_EQ(f.value_dists.at("item").alpha, 1.2);
  EXPECT_FALSE(a->features[1].is_jagged);
  ASSERT_EQ(a->tables.size(), 3u);
  EXPECT_TRUE(a->tables[0].dynamic);
  EXPECT_EQ(a->tables[0].vocab_size, 50000000);
  EXPECT_FALSE(a->tables[1].dynamic);
  EXPECT_EQ(a->tables[1].vocab_size, 100);
  EXPECT_EQ(a->item_feature_name, "item");
  EXPECT_EQ(a->action_feature_name, "action");
  EXPECT_EQ(a->contextual_feature_names, (std::vector<std::string>{"user_age"}));
  EXPECT_EQ(a->max_num_candidates, 0);
  EXPECT_EQ(a->num_generated_batches, 100);
}

TEST(BenchmarkArgs, ErrorsNameTheBinding) {
  EXPECT_EQ(error_of([] {
              parse_benchmark_args(gin::parse_text(
                  "f/FeatureArgs.feature_names = ['item']\nf/FeatureArgs.max_sequence_length = 8\n"
                  "f/FeatureArgs.seqlen_dist = @d/RandomDistribution()\n"
                  "BenchmarkDatasetArgs.feature_args = [@f/FeatureArgs()]\n",
                  "t.gin"));
            }),
            "t.gin:3: f/FeatureArgs.seqlen_dist = @d/RandomDistribution(): @d/RandomDistribution() "
            "has no dist_type");
  EXPECT_EQ(error_of([] {
              parse_benchmark_args(
                  gin::parse_text("BenchmarkDatasetArgs.item_feature_name = 'item'\n", "t.gin"));
            }),
            "BenchmarkDatasetArgs: feature 'item' needs a FeatureArgs in feature_args and a table "
            "in embedding_args");
  EXPECT_EQ(
      error_of([] {
        parse_benchmark_args(gin::parse_text("BenchmarkDatasetArgs.feature_argz = []\n", "t.gin"));
      }),
      "t.gin:1: BenchmarkDatasetArgs.feature_argz = []: unknown field of "
      "BenchmarkDatasetArgs");
}

}  // namespace
}  // namespace hstu
