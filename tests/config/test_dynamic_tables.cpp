// test_dynamic_tables.cpp — DynamicTableArgs (issue 18): binding and validation errors, the
// resolution into one table's DynamicTableConfig (capacity precedence, the bytes formula,
// growth, the host tier), and recsys-examples' DynamicEmbeddingArgs read with its meaning.
//
// Expected numbers are worked out by hand from the rules in config/dynamic_table.h.
#include <gtest/gtest.h>

#include "common/config_test_util.h"
#include "config/dynamic_table.h"
#include "config/load.h"
#include "config/schema.h"

namespace hstu {
namespace {

using test::error_of;

Config load(const std::string& text, std::vector<std::string>* warnings = nullptr) {
  return load_config_text(text, "t.gin", {}, warnings);
}
std::string load_error(const std::string& text) {
  return error_of([&] { load(text); });
}
bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A recsys-examples retrieval file (every required key), plus `extra`.
std::string recsys_file(const std::string& extra) {
  return "TrainerArgs.train_batch_size = 128\n"
         "TrainerArgs.eval_batch_size = 128\n"
         "NetworkArgs.num_layers = 4\n"
         "NetworkArgs.hidden_size = 256\n"
         "NetworkArgs.num_attention_heads = 4\n"
         "NetworkArgs.kv_channels = 64\n"
         "OptimizerArgs.optimizer_str = 'adam'\n"
         "OptimizerArgs.learning_rate = 1e-3\n"
         "RetrievalArgs.num_negatives = 128\n" +
         extra;
}

TEST(DynamicTableArgs, BindsAndRoundTripsThroughGin) {
  const Config c = load(
      "DynamicTableArgs.tables = ['item']\n"
      "DynamicTableArgs.capacity_ratio = 0.5\n"
      "DynamicTableArgs.eviction = 'lfu'\n"
      "DynamicTableArgs.hbm_bytes = 1000000\n"
      "DynamicTableArgs.host_tier = True\n"
      "DynamicTableArgs.value_dtype = 'bfloat16'\n"
      "DatasetArgs.raw_ids = True\n");
  EXPECT_EQ(c.dynamic.tables, (std::vector<std::string>{"item"}));
  EXPECT_DOUBLE_EQ(c.dynamic.capacity_ratio, 0.5);
  EXPECT_EQ(c.dynamic.eviction, "lfu");
  EXPECT_EQ(c.dynamic.hbm_bytes, 1000000);
  EXPECT_TRUE(c.dataset.raw_ids);
  EXPECT_EQ(load(to_gin(c)), c);
  // Defaults: no dynamic table, buckets of 32 (one warp) and LRU.
  const Config d;
  EXPECT_TRUE(d.dynamic.tables.empty());
  EXPECT_EQ(d.dynamic.bucket_size, 32);
  EXPECT_EQ(d.dynamic.eviction, "lru");
  EXPECT_FALSE(d.dataset.raw_ids);
}

TEST(DynamicTableArgs, ValidationNamesTheKeys) {
  EXPECT_EQ(load_error("DynamicTableArgs.tables = ['action']\n"),
            "t.gin:1: DynamicTableArgs.tables = [\"action\"] is not allowed: element \"action\" "
            "must be one of item");
  EXPECT_EQ(load_error("DynamicTableArgs.eviction = 'fifo'\n"),
            "t.gin:1: DynamicTableArgs.eviction = \"fifo\" is not allowed: must be one of none, "
            "lru, lfu");
  EXPECT_EQ(load_error("DynamicTableArgs.bucket_size = 0\n"),
            "t.gin:1: DynamicTableArgs.bucket_size = 0 is out of range: must be in [1, 32]");
  EXPECT_EQ(load_error("DynamicTableArgs.capacity_rows = 0\n"),
            "t.gin:1: DynamicTableArgs.capacity_rows = 0 is out of range: must be -1 or >= 1");
  EXPECT_EQ(load_error("DatasetArgs.raw_ids = True\n"),
            "t.gin:1: invalid config: DatasetArgs.raw_ids = True needs DynamicTableArgs.tables = "
            "[\"item\"]: raw 64-bit item keys have no row in a dense table");
  EXPECT_TRUE(contains(load_error("DynamicTableArgs.tables = ['item']\n"
                                  "OptimizerArgs.sparse_optimizer_str = 'dense_adam'\n"),
                       "OptimizerArgs.sparse_optimizer_str = \"dense_adam\" updates every row"));
  EXPECT_EQ(load_error("DynamicTableArgs.capacity_rows = 1000\n"
                       "DynamicTableArgs.max_capacity_rows = 500\n"),
            "t.gin:2: invalid config: DynamicTableArgs.max_capacity_rows (500) must be 0 (no "
            "growth) or at least capacity_rows (1000)");
  EXPECT_EQ(load_error("DynamicTableArgs.hbm_ratio = 0.5\n"),
            "t.gin:1: invalid config: DynamicTableArgs.hbm_ratio = 0.5 keeps part of the table out "
            "of HBM, which needs DynamicTableArgs.host_tier = True");
}

TEST(DynamicTableConfig, CapacityFromTheCatalogueRoundedToBuckets) {
  Config c;
  c.dynamic.tables = {"item"};
  c.network.hidden_size = 64;
  c.trainer.seed = 7;
  c.optimizer.learning_rate = 0.01;
  c.optimizer.sparse_learning_rate = -1;
  const DynamicTableConfig t = dynamic_table_config(c, "item", 1000);
  EXPECT_EQ(t.name, "item");
  EXPECT_EQ(t.dim, 64);
  EXPECT_EQ(t.capacity_rows, 1024);  // 1000 keys -> 32 buckets of 32
  EXPECT_EQ(t.max_capacity_rows, 1024);
  EXPECT_EQ(t.bucket_size, 32);
  EXPECT_EQ(t.eviction, DynamicEviction::kLru);
  EXPECT_EQ(t.optimizer, "adam");
  EXPECT_DOUBLE_EQ(t.learning_rate, 0.01);
  EXPECT_EQ(t.seed, 7u);
  EXPECT_EQ(t.gpu_cache_rows, 0);  // all in HBM
  EXPECT_EQ(t.value_dtype, DynamicValueDtype::kFloat32);

  c.dynamic.capacity_ratio = 0.5;  // half the catalogue: 500 -> 512
  c.dynamic.max_capacity_rows = 3000;
  c.dynamic.eviction = "none";
  c.network.item_embedding_dim = 32;
  c.optimizer.sparse_learning_rate = 0.5;
  const DynamicTableConfig h = dynamic_table_config(c, "item", 1000);
  EXPECT_EQ(h.capacity_rows, 512);
  EXPECT_EQ(h.max_capacity_rows, 3008);  // 94 buckets of 32
  EXPECT_EQ(h.dim, 32);
  EXPECT_EQ(h.eviction, DynamicEviction::kNone);
  EXPECT_DOUBLE_EQ(h.learning_rate, 0.5);

  c.dynamic.capacity_rows = 100;  // rows win over the ratio; whole buckets (4 of 32)
  c.dynamic.max_capacity_rows = 0;
  EXPECT_EQ(dynamic_table_config(c, "item", 1000).capacity_rows, 128);
}

TEST(DynamicTableConfig, HbmBudgetPrecedenceAndBytesFormula) {
  // recsys-examples' formula: fp32 Adam rows are dim x 4 B x 3, SGD dim x 4 B.
  EXPECT_EQ(dynamic_row_bytes(128, "adam", DynamicValueDtype::kFloat32), 128 * 4 * 3);
  EXPECT_EQ(dynamic_row_bytes(128, "sgd", DynamicValueDtype::kFloat32), 128 * 4);
  EXPECT_EQ(dynamic_row_bytes(128, "row_wise_adagrad", DynamicValueDtype::kFloat32), 128 * 4 + 4);
  EXPECT_EQ(dynamic_row_bytes(128, "adam", DynamicValueDtype::kBFloat16), 128 * 2 + 256 * 4);

  Config c;
  c.dynamic.tables = {"item"};
  c.network.hidden_size = 128;
  c.dynamic.capacity_rows = 10240;
  c.dynamic.host_tier = true;
  c.dynamic.hbm_ratio = 0.25;  // 2560 rows
  EXPECT_EQ(dynamic_table_config(c, "item", 1).gpu_cache_rows, 2560);
  c.dynamic.hbm_rows = 1000;  // rows win over the ratio: 1000 -> 31 whole buckets (992)
  EXPECT_EQ(dynamic_table_config(c, "item", 1).gpu_cache_rows, 992);
  c.dynamic.hbm_bytes = 1536 * 2000;  // bytes win over rows: 2000 Adam rows of 1536 B -> 1984
  EXPECT_EQ(dynamic_table_config(c, "item", 1).gpu_cache_rows, 1984);
  c.dynamic.hbm_bytes = 1536 * 20000;  // the whole table fits: no cache
  EXPECT_EQ(dynamic_table_config(c, "item", 1).gpu_cache_rows, 0);

  c.dynamic.hbm_bytes = 1536 * 2000;
  c.dynamic.host_tier = false;
  EXPECT_EQ(error_of([&] { dynamic_table_config(c, "item", 1); }),
            "the item table needs up to 10240 slots but DynamicTableArgs.hbm_bytes = 3072000 "
            "(1536 bytes per row) gives 2000 rows in HBM: set DynamicTableArgs.host_tier = True "
            "(HBM caches a host table) or raise the budget");
  c.dynamic.host_tier = true;
  c.dynamic.hbm_bytes = 1536 * 20;  // below one bucket
  EXPECT_TRUE(contains(error_of([&] { dynamic_table_config(c, "item", 1); }),
                       "less than one bucket (DynamicTableArgs.bucket_size = 32)"));
}

TEST(DynamicTableConfig, RefusesTablesThatAreNotDynamic) {
  Config c;
  EXPECT_EQ(error_of([&] { dynamic_table_config(c, "item", 10); }),
            "the item table is not dynamic: DynamicTableArgs.tables does not list \"item\"");
  c.dynamic.tables = {"item"};
  EXPECT_TRUE(contains(error_of([&] { dynamic_table_config(c, "contextual", 10); }),
                       "hstu's only dynamic table is \"item\""));
  c.optimizer.sparse_optimizer_str = "dense_adam";
  EXPECT_TRUE(contains(error_of([&] { dynamic_table_config(c, "item", 10); }), "dense_adam"));
}

TEST(DynamicEmbeddingArgs, RecsysExamplesKeysMapOntoDynamicTableArgs) {
  std::vector<std::string> notes;
  const Config c = load(recsys_file("DynamicEmbeddingArgs.item_vocab_size_or_capacity = 50000\n"
                                    "DynamicEmbeddingArgs.global_hbm_for_values = 4000000\n"
                                    "DynamicEmbeddingArgs.item_vocab_gpu_capacity = 3000\n"
                                    "DynamicEmbeddingArgs.item_vocab_gpu_capacity_ratio = 0.1\n"
                                    "DynamicEmbeddingArgs.evict_strategy = 'lfu'\n"
                                    "DynamicEmbeddingArgs.caching = True\n"
                                    "DynamicEmbeddingArgs.dist_type = 'hash_roundrobin'\n"),
                        &notes);
  EXPECT_EQ(c.dynamic.tables, (std::vector<std::string>{"item"}));
  EXPECT_TRUE(c.dynamic.host_tier);
  EXPECT_EQ(c.dynamic.capacity_rows, 50000);
  EXPECT_EQ(c.dynamic.hbm_bytes, 4000000);
  EXPECT_EQ(c.dynamic.hbm_rows, 3000);
  EXPECT_DOUBLE_EQ(c.dynamic.hbm_ratio, 0.1);
  EXPECT_EQ(c.dynamic.eviction, "lfu");
  EXPECT_EQ(c.trainer.shard_owner, "hash");
  // The precedence recsys-examples applies: global_hbm_for_values wins. hidden 256, Adam:
  // 4,000,000 / (256 x 4 x 3) = 1302 rows -> 10 buckets.
  EXPECT_EQ(dynamic_table_config(c, "item", 9000).gpu_cache_rows, 1280);

  const Config r = load(recsys_file("DynamicEmbeddingArgs.dist_type = 'roundrobin'\n"));
  EXPECT_EQ(r.trainer.shard_owner, "modulo");
  EXPECT_EQ(r.dynamic.tables, (std::vector<std::string>{"item"}));
}

TEST(DynamicEmbeddingArgs, UnsupportedKeysAreErrorsNamingThem) {
  const std::string continuous =
      load_error(recsys_file("DynamicEmbeddingArgs.dist_type = 'continuous'\n"));
  EXPECT_TRUE(contains(continuous,
                       "t.gin:10: DynamicEmbeddingArgs.dist_type = \"continuous\": hstu places "
                       "key k on rank k mod W"))
      << continuous;
  const std::string strategy =
      load_error(recsys_file("DynamicEmbeddingArgs.evict_strategy = 'epoch_lru'\n"));
  EXPECT_TRUE(contains(strategy,
                       "t.gin:10: DynamicEmbeddingArgs.evict_strategy = \"epoch_lru\": "
                       "hstu's dynamic tables evict by \"lru\" or \"lfu\""))
      << strategy;
  const std::string scoped =
      load_error(recsys_file("item/DynamicEmbeddingArgs.evict_strategy = 'lru'\n"));
  EXPECT_TRUE(contains(scoped,
                       "t.gin:10: item/DynamicEmbeddingArgs.evict_strategy = \"lru\": a "
                       "scoped DynamicEmbeddingArgs instance"))
      << scoped;
  // In an hstu file the peer's class is an error that names hstu's key.
  EXPECT_EQ(load_error("DynamicEmbeddingArgs.item_vocab_gpu_capacity = 10\n"),
            "t.gin:1: DynamicEmbeddingArgs.item_vocab_gpu_capacity: recsys-examples' "
            "DynamicEmbeddingArgs is translated only in a recsys-examples file (one that binds "
            "nothing but its keys); in an hstu file use DynamicTableArgs (this key: "
            "DynamicTableArgs.hbm_rows), docs/CONFIG.md \"Peer files\"");
}

}  // namespace
}  // namespace hstu
