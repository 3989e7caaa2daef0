// dynamic_shard_checkpoint.cpp — per-rank files and index of a key-sharded dynamic table, and
// loads that reshard onto any rank count (dynamic_shard_checkpoint.h).
#include "train/dynamic_shard_checkpoint.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "embed/table_checkpoint.h"
#include "io/atomic_file.h"
#include "io/json.h"

namespace hstu {
namespace {

std::string join(const std::string& dir, const std::string& file) {
  return (std::filesystem::path(dir) / file).string();
}

}  // namespace

std::string dynamic_shard_file_name(const std::string& name, int rank, int world) {
  char tail[64];
  std::snprintf(tail, sizeof tail, ".dynamic.rank-%05d-of-%05d.safetensors", rank, world);
  return name + tail;
}

std::string dynamic_shard_index_name(const std::string& name) {
  return name + ".dynamic.index.json";
}

bool dynamic_sharded_in(const std::string& dir, const std::string& name) {
  return std::filesystem::exists(join(dir, dynamic_shard_index_name(name)));
}

std::vector<std::string> save_dynamic_shard(Ctx& ctx, embed::DynamicTable& table,
                                            const std::string& dir, dist::Comm& comm,
                                            dist::OwnerKind owner) {
  const std::string& name = table.spec().name;
  const std::string file = dynamic_shard_file_name(name, comm.rank(), comm.size());
  std::filesystem::create_directories(dir);
  embed::save_dynamic_table_file(ctx, table, join(dir, file));
  // Every rank's file is complete once the gathers return.
  const std::vector<int64_t> bytes =
      comm.all_gather_host(static_cast<int64_t>(std::filesystem::file_size(join(dir, file))));
  const std::vector<int64_t> keys = comm.all_gather_host(table.size());
  std::vector<std::string> written;
  Json files = Json::array();
  for (int r = 0; r < comm.size(); ++r) {
    written.push_back(dynamic_shard_file_name(name, r, comm.size()));
    files.push_back({{"file", written.back()},
                     {"rank", r},
                     {"keys", keys[static_cast<size_t>(r)]},
                     {"bytes", bytes[static_cast<size_t>(r)]}});
  }
  written.push_back(dynamic_shard_index_name(name));
  if (comm.is_root()) {
    const Json index = {{"format", "hstu-dynamic-shards"},
                        {"table", name},
                        {"world_size", comm.size()},
                        {"owner", dist::owner_name(owner)},
                        {"files", files}};
    atomic_write_file(join(dir, written.back()), json::dump(index, 2) + "\n");
  }
  comm.barrier();  // the index exists on return, on every rank
  return written;
}

int64_t load_dynamic_any(Ctx& ctx, embed::DynamicTable& table, const std::string& dir,
                         const std::function<bool(int64_t)>& keep) {
  const std::string& name = table.spec().name;
  if (!dynamic_sharded_in(dir, name)) return embed::load_dynamic_table(ctx, table, dir, keep);
  const std::string path = join(dir, dynamic_shard_index_name(name));
  const Json j = json::parse_file(path);
  std::vector<std::string> files;
  try {
    HSTU_CHECK(json::string_at(j, "format") == "hstu-dynamic-shards",
               "format is not \"hstu-dynamic-shards\"");
    HSTU_CHECK(json::string_at(j, "table") == name, "table is '", json::string_at(j, "table"),
               "', not '", name, "'");
    const int64_t world = json::int_at(j, "world_size");
    for (const Json& f : json::array_at(j, "files")) files.push_back(json::string_at(f, "file"));
    HSTU_CHECK(static_cast<int64_t>(files.size()) == world, "lists ", files.size(),
               " files for world_size ", world);
  } catch (const Error& e) {
    HSTU_THROW(path, ": ", e.what());
  }
  int64_t loaded = 0;
  for (const std::string& f : files) {
    HSTU_CHECK(f.find('/') == std::string::npos && f.find("..") == std::string::npos, path,
               ": file name '", f, "' leaves the checkpoint folder");
    loaded += embed::load_dynamic_table_file(ctx, table, join(dir, f), keep);
  }
  return loaded;
}

}  // namespace hstu
