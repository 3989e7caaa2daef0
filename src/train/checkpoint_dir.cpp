// checkpoint_dir.cpp — the crash-consistent checkpoint folder (docs/CHECKPOINTS.md): one
// step-<9-digit step>/ folder per save, each with a manifest.json of its files' sizes and
// CRC-32Cs, a `latest` file naming the current save, the last ckpt_keep saves kept; and finding
// and verifying the save to load from a run, checkpoints or step folder (or the pre-manifest
// layout: the files directly in the checkpoints folder).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "dist/shard_checkpoint.h"
#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "train/checkpoint.h"
#include "train/dynamic_shard_checkpoint.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;

constexpr const char* kManifestFormat = "hstu-checkpoint-manifest";

std::string manifest_path(const std::string& dir) {
  return dir + "/manifest.json";
}

// "step-000000042" for step 42.
std::string step_folder_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%09lld", static_cast<long long>(step));
  return name;
}

// Whether `name` is a finished save's folder name (step- and nine or more digits).
bool is_step_name(const std::string& name) {
  return name.size() >= 14 && name.rfind("step-", 0) == 0 &&
         std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HSTU_CHECK(fd >= 0, "cannot open directory ", dir, ": ", std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  HSTU_CHECK(rc == 0, "cannot fsync directory ", dir, ": ", std::strerror(errno));
}

std::string hex32(uint32_t v) {
  char s[9];
  std::snprintf(s, sizeof(s), "%08x", v);
  return s;
}

// Writes dir/manifest.json: the save id (= step), the task and the size and CRC-32C of every
// file in the folder (the dense files, trainer_state.json and any table shards), by name.
void write_manifest(const std::string& dir, const Json& state) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != "manifest.json")
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  Json files = Json::array();
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    Json f = Json::object();
    f["name"] = name;
    f["bytes"] = static_cast<int64_t>(fs::file_size(path));
    f["crc32c"] = hex32(crc32c_file(path));
    files.push_back(f);
  }
  Json m = Json::object();
  m["format"] = kManifestFormat;
  m["save_id"] = json::int_at(state, "step");
  m["task"] = json::string_at(state, "task");
  m["files"] = files;
  atomic_write_file(manifest_path(dir), json::dump(m, 2) + "\n");
}

// Moves the finished temporary folder to `final_dir`; a folder of that name (a second save of
// one step) is swapped out atomically and removed.
void publish(const std::string& tmp, const std::string& final_dir) {
  if (!fs::exists(final_dir)) {
    HSTU_CHECK(::rename(tmp.c_str(), final_dir.c_str()) == 0, "cannot rename ", tmp, " to ",
               final_dir, ": ", std::strerror(errno));
    return;
  }
  HSTU_CHECK(::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0,
             "cannot exchange ", tmp, " and ", final_dir, ": ", std::strerror(errno));
  fs::remove_all(tmp);
}

// The step folders under ckpt_dir, oldest first.
std::vector<std::string> step_folders(const std::string& ckpt_dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(ckpt_dir))
    if (e.is_directory() && is_step_name(e.path().filename().string()))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Removes the temporaries of interrupted saves (step-*.tmp folders, latest.tmp<pid> files of a
// process killed while switching `latest`) and all but the newest `keep` saves, never the one
// `latest` names.
void prune(const std::string& ckpt_dir, int64_t keep, const std::string& latest) {
  for (const fs::directory_entry& e : fs::directory_iterator(ckpt_dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step-", 0) == 0 && name.size() > 4 &&
        name.compare(name.size() - 4, 4, ".tmp") == 0)
      fs::remove_all(e.path());
    if (e.is_regular_file() && name.rfind("latest.tmp", 0) == 0 && name.size() > 10 &&
        std::all_of(name.begin() + 10, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      fs::remove(e.path());
  }
  const std::vector<std::string> saves = step_folders(ckpt_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < saves.size(); ++i)
    if (saves[i] != latest) fs::remove_all(ckpt_dir + "/" + saves[i]);
}

// The folder `latest` names, or "" when it is missing or does not name a step folder.
std::string read_latest(const std::string& ckpt_dir) {
  const std::string path = checkpoint_latest_path(ckpt_dir);
  if (!fs::exists(path)) return "";
  std::ifstream in(path);
  std::string name;
  std::getline(in, name);
  if (!is_step_name(name) || !fs::exists(manifest_path(ckpt_dir + "/" + name))) return "";
  return name;
}

// Checks every file of a step folder against its manifest; errors name the file.
void verify_manifest(const std::string& dir) {
  const Json m = json::parse_file(manifest_path(dir));
  HSTU_CHECK(m.contains("format") && json::string_at(m, "format") == kManifestFormat,
             manifest_path(dir), ": not an hstu checkpoint manifest");
  for (const Json& f : json::array_at(m, "files")) {
    const std::string path = dir + "/" + json::string_at(f, "name");
    HSTU_CHECK(fs::exists(path), path, ": missing (the checkpoint manifest lists it)");
    const int64_t bytes = static_cast<int64_t>(fs::file_size(path));
    HSTU_CHECK(bytes == json::int_at(f, "bytes"), path, ": ", bytes, " bytes, the manifest says ",
               json::int_at(f, "bytes"), " (a damaged or modified checkpoint file)");
    const std::string crc = hex32(crc32c_file(path));
    HSTU_CHECK(crc == json::string_at(f, "crc32c"), path, ": CRC-32C ", crc, ", the manifest says ",
               json::string_at(f, "crc32c"), " (a damaged or modified checkpoint file)");
  }
}

// The save of a checkpoints folder: the one `latest` names, else (with a warning) the newest
// step folder with a manifest; "" when the folder holds no save in the step layout.
std::string pick_save(const std::string& ckpt_dir) {
  const std::string latest = read_latest(ckpt_dir);
  if (!latest.empty()) return ckpt_dir + "/" + latest;
  const std::vector<std::string> saves = step_folders(ckpt_dir);
  for (auto it = saves.rbegin(); it != saves.rend(); ++it) {
    if (!fs::exists(manifest_path(ckpt_dir + "/" + *it))) continue;
    std::cerr << "warning: " << checkpoint_latest_path(ckpt_dir)
              << " is missing or damaged; loading the newest complete save, " << *it << "\n";
    return ckpt_dir + "/" + *it;
  }
  return "";
}

}  // namespace

std::string save_checkpoint_step(const CheckpointTensors& m, const Json& state,
                                 const std::string& ckpt_dir, int64_t keep) {
  HSTU_CHECK(keep >= 1, "TrainerArgs.ckpt_keep must be at least 1, not ", keep);
  dist::Comm* comm = m.collective() ? m.comm : nullptr;
  HSTU_CHECK(!m.collective() || comm, "a checkpoint of sharded tables needs the job's ranks");
  const bool root = !comm || comm->is_root();
  const std::string name = step_folder_name(json::int_at(state, "step"));
  const std::string final_dir = ckpt_dir + "/" + name, tmp = final_dir + ".tmp";
  if (root) {
    fs::create_directories(ckpt_dir);
    fs::remove_all(tmp);
  }
  try {
    if (root) save_checkpoint(m, state, tmp);
    if (comm) {
      comm->barrier();  // the folder exists: every rank adds its shards
      for (const dist::ShardedTable* t : m.sharded) dist::save_shard(tmp, t->name(), *comm, *t);
      for (embed::DynamicTable* t : m.dynamic_sharded) {
        HSTU_CHECK(m.ctx, "save_checkpoint: dynamic tables need CheckpointTensors.ctx");
        save_dynamic_shard(*m.ctx, *t, tmp, *comm, m.dynamic_owner);
      }
      comm->barrier();
    }
    if (root) {
      write_manifest(tmp, state);
      fsync_dir(tmp);
      publish(tmp, final_dir);
      fsync_dir(ckpt_dir);
      atomic_write_file(checkpoint_latest_path(ckpt_dir), name + "\n");  // fsyncs ckpt_dir
    }
  } catch (const std::exception& e) {
    std::error_code ignored;
    if (root) fs::remove_all(tmp, ignored);
    HSTU_THROW("checkpoint save of step ", json::int_at(state, "step"), " into ", ckpt_dir,
               " failed (the previous save and ", checkpoint_latest_path(ckpt_dir),
               " are unchanged): ", e.what());
  }
  if (root) {
    prune(ckpt_dir, keep, name);
    fsync_dir(ckpt_dir);
  }
  if (comm) comm->barrier();  // the save is complete before any rank goes on
  return final_dir;
}

std::string find_checkpoint(const std::string& dir) {
  HSTU_CHECK(fs::is_directory(dir), "no checkpoint in '", dir, "': not a directory");
  if (fs::exists(manifest_path(dir))) {  // one step folder
    verify_manifest(dir);
    return dir;
  }
  for (const std::string& ckpt_dir : {dir, dir + "/checkpoints"}) {
    if (!fs::is_directory(ckpt_dir)) continue;
    const std::string save = pick_save(ckpt_dir);
    if (!save.empty()) {
      verify_manifest(save);
      return save;
    }
    if (fs::exists(checkpoint_state_path(ckpt_dir))) return ckpt_dir;  // pre-manifest layout
  }
  HSTU_THROW("no checkpoint in '", dir, "': no step-<step> folder with a manifest.json, and no ",
             checkpoint_state_path(dir), " (an interrupted save leaves none)");
}

}  // namespace hstu
