// shard_checkpoint.cpp — saving sharded tables as id-keyed rows and loading them on any number of
// ranks (format in shard_checkpoint.h).
#include "dist/shard_checkpoint.h"

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <system_error>

#include "core/arena.h"
#include "core/checked.h"
#include "io/atomic_file.h"
#include "io/json.h"
#include "io/safetensors.h"

namespace hstu::dist {
namespace {

// The optimiser state's layout: none (sgd), one value per row (row-wise Adagrad), or two [n, D]
// moments (Adam).
enum class StateKind { kNone, kRow, kMoments };

StateKind state_of(const std::string& optimizer, const std::string& what) {
  if (optimizer == "adam" || optimizer == "dense_adam") return StateKind::kMoments;
  if (optimizer == "row_wise_adagrad") return StateKind::kRow;
  if (optimizer == "sgd") return StateKind::kNone;
  HSTU_THROW(what, ": unknown optimizer '", optimizer, "'");
}

StateKind state_of(const EmbeddingTable& t) {
  if (t.m.empty()) return StateKind::kNone;
  return t.m.ndim == 1 ? StateKind::kRow : StateKind::kMoments;
}

std::string join(const std::string& dir, const std::string& file) {
  return (std::filesystem::path(dir) / file).string();
}

// Rows of a table (or shard) in host memory: weight [n, D], m [n, D] or [n], v [n, D].
struct HostRows {
  int64_t rows = 0, dim = 0;
  StateKind state = StateKind::kNone;
  std::vector<float> w, m, v;

  HostRows(int64_t n, int64_t d, StateKind s) : rows(n), dim(d), state(s) {
    const size_t nd = static_cast<size_t>(checked_mul(n, d, "table elements"));
    w.resize(nd);
    if (s == StateKind::kMoments) m.resize(nd), v.resize(nd);
    if (s == StateKind::kRow) m.resize(static_cast<size_t>(n));
  }
  int64_t m_width() const { return state == StateKind::kRow ? 1 : dim; }
  Tensor w_tensor() { return Tensor(w.data(), DType::kF32, Device::kCPU, {rows, dim}); }
  Tensor m_tensor() {
    return state == StateKind::kRow ? Tensor(m.data(), DType::kF32, Device::kCPU, {rows})
                                    : Tensor(m.data(), DType::kF32, Device::kCPU, {rows, dim});
  }
  Tensor v_tensor() { return Tensor(v.data(), DType::kF32, Device::kCPU, {rows, dim}); }

  // Copies from / to a table's tensors (on any device); state only when `state` != kNone.
  void download(const EmbeddingTable& t) {
    if (rows == 0) return;
    copy_tensor(w_tensor(), t.weight);
    if (state != StateKind::kNone) copy_tensor(m_tensor(), t.m);
    if (state == StateKind::kMoments) copy_tensor(v_tensor(), t.v);
  }
  void upload(EmbeddingTable& t) {
    if (rows == 0) return;
    copy_tensor(t.weight, w_tensor());
    if (state != StateKind::kNone) copy_tensor(t.m, m_tensor());
    if (state == StateKind::kMoments) copy_tensor(t.v, v_tensor());
  }
};

// "3,4" for dims {3, 4}.
std::string dims_str(const std::vector<int64_t>& dims) {
  std::ostringstream os;
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? "," : "") << dims[i];
  return os.str();
}

// Checks that tensor `name` of f is `dtype` with exactly `shape`; returns its bytes.
const uint8_t* tensor_bytes(const SafetensorsFile& f, const std::string& name, DType dtype,
                            std::vector<int64_t> shape) {
  HSTU_CHECK(f.contains(name), f.path(), ": tensor '", name, "' is missing");
  const SafetensorsFile::Entry& e = f.get(name);
  const std::string want = dims_str(shape), got = dims_str(e.shape);
  HSTU_CHECK(e.dtype == dtype && e.shape == shape, f.path(), ": tensor '", name, "' is ",
             safetensors_dtype_name(e.dtype), "[", got, "], expected ",
             safetensors_dtype_name(dtype), "[", want, "]");
  return e.bytes.data();
}

// Copies row `src` of a [*, width] f32 byte array into row `dst` of `out`.
void copy_row(const uint8_t* bytes, int64_t src, std::vector<float>& out, int64_t dst,
              int64_t width) {
  std::memcpy(&out[static_cast<size_t>(dst * width)], bytes + src * width * 4,
              static_cast<size_t>(width) * 4);
}

// The shard index: what save_shard wrote.
struct ShardIndex {
  std::string path, table, owner, optimizer;
  int64_t rows = 0, dim = 0;
  int world = 0;
  std::vector<std::string> files;
  std::vector<int64_t> file_rows;
};

ShardIndex read_index(const std::string& dir, const std::string& name) {
  ShardIndex ix;
  ix.path = join(dir, shard_index_name(name));
  HSTU_CHECK(std::filesystem::exists(ix.path), ix.path, ": the shard index of table '", name,
             "' is missing (was the table saved sharded?)");
  const Json j = json::parse_file(ix.path);
  try {
    HSTU_CHECK(json::string_at(j, "format") == "hstu-shards", "format is not \"hstu-shards\"");
    const int64_t version = json::int_at(j, "format_version");
    HSTU_CHECK(version >= 1 && version <= kShardFormatVersion, "format_version ", version,
               " is not one this hstu reads (1 to ", kShardFormatVersion, ")");
    ix.table = json::string_at(j, "table");
    ix.rows = json::int_at(j, "rows");
    ix.dim = json::int_at(j, "dim");
    ix.world = static_cast<int>(json::int_at(j, "world_size"));
    ix.owner = json::string_at(j, "owner");
    ix.optimizer = json::string_at(j, "optimizer");
    HSTU_CHECK(json::string_at(j, "dtype") == "F32", "dtype is not F32");
    for (const Json& f : json::array_at(j, "files")) {
      ix.files.push_back(json::string_at(f, "file"));
      ix.file_rows.push_back(json::int_at(f, "rows"));
    }
  } catch (const Error& e) {
    HSTU_THROW(ix.path, ": ", e.what());
  }
  HSTU_CHECK(ix.table == name, ix.path, ": holds table '", ix.table, "', expected '", name, "'");
  HSTU_CHECK(ix.world >= 1 && static_cast<int>(ix.files.size()) == ix.world, ix.path, ": ",
             ix.files.size(), " files for world_size ", ix.world);
  parse_owner(ix.owner, ix.path + ": owner");
  state_of(ix.optimizer, ix.path);
  return ix;
}

// Checks the index against a table of rows x dim whose state is `state` (kNone: not loaded).
void check_index(const ShardIndex& ix, int64_t rows, int64_t dim, StateKind state,
                 const std::string& table_optimizer) {
  HSTU_CHECK(ix.rows == rows && ix.dim == dim, ix.path, ": table '", ix.table, "' was saved as [",
             ix.rows, ", ", ix.dim, "], the model's is [", rows, ", ", dim, "]");
  HSTU_CHECK(state == StateKind::kNone || state_of(ix.optimizer, ix.path) == state, ix.path,
             ": saved with optimizer '", ix.optimizer, "', whose state does not fit '",
             table_optimizer, "'; load the weights only");
}

// Reads one shard file: for each of its ids, dest(id) is the row of `out` to fill, or -1 to skip.
// Marks ids in `seen` (V entries), failing on an id outside [0, V) or seen before.
void read_shard_file(const ShardIndex& ix, const std::string& dir, size_t f,
                     std::vector<uint8_t>& seen, const std::function<int64_t(int64_t)>& dest,
                     HostRows& out) {
  const SafetensorsFile file(join(dir, ix.files[f]));
  const auto& md = file.metadata();
  const auto format = md.find("format");
  HSTU_CHECK(format != md.end() && format->second == "hstu-shard", file.path(),
             ": not an hstu table shard (metadata format != \"hstu-shard\")");
  HSTU_CHECK(file.contains("ids"), file.path(), ": tensor 'ids' is missing");
  const int64_t n = file.get("ids").shape.empty() ? -1 : file.get("ids").shape[0];
  HSTU_CHECK(n == ix.file_rows[f], file.path(), ": holds ", n, " rows, the index ", ix.path,
             " says ", ix.file_rows[f]);
  const uint8_t* ids = tensor_bytes(file, "ids", DType::kI64, {n});
  const uint8_t* w = tensor_bytes(file, "weight", DType::kF32, {n, ix.dim});
  const uint8_t *m = nullptr, *v = nullptr;
  if (out.state == StateKind::kMoments) {
    m = tensor_bytes(file, "state_m", DType::kF32, {n, ix.dim});
    v = tensor_bytes(file, "state_v", DType::kF32, {n, ix.dim});
  } else if (out.state == StateKind::kRow) {
    m = tensor_bytes(file, "state_m", DType::kF32, {n});
  }
  const int64_t vrows = static_cast<int64_t>(seen.size());
  for (int64_t i = 0; i < n; ++i) {
    int64_t id;
    std::memcpy(&id, ids + i * 8, 8);
    HSTU_CHECK(id >= 0 && id < vrows, file.path(), ": ids[", i, "] = ", id, " is outside [0, ",
               vrows, ")");
    HSTU_CHECK(!seen[static_cast<size_t>(id)], file.path(), ": id ", id,
               " appears a second time (each id must be in exactly one shard file of ", ix.path,
               ")");
    seen[static_cast<size_t>(id)] = 1;
    const int64_t j = dest(id);
    if (j < 0) continue;
    copy_row(w, i, out.w, j, out.dim);
    if (m) copy_row(m, i, out.m, j, out.m_width());
    if (v) copy_row(v, i, out.v, j, out.dim);
  }
}

// Fails on the first id in [0, V) not seen, naming the index.
void check_all_seen(const ShardIndex& ix, const std::vector<uint8_t>& seen) {
  for (size_t id = 0; id < seen.size(); ++id)
    HSTU_CHECK(seen[id], ix.path, ": id ", id, " of table '", ix.table,
               "' is in none of its shard files");
}

}  // namespace

std::string shard_file_name(const std::string& name, int rank, int world) {
  return name + ".shard-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors";
}

std::string shard_index_name(const std::string& name) {
  return name + ".shards.json";
}

std::vector<std::string> save_shard(const std::string& dir, const std::string& name, Comm& comm,
                                    const ShardedTable& table) {
  HSTU_CHECK(comm.size() == table.world() && comm.rank() == table.rank(), "save_shard: table '",
             name, "' was sharded over ", table.world(), " ranks, the communicator has ",
             comm.size());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  HSTU_CHECK(std::filesystem::is_directory(dir), "save_shard: cannot create ", dir, ": ",
             ec.message());
  const EmbeddingTable& shard = table.shard();
  const StateKind state = state_of(table.optimizer(), "save_shard");
  const int64_t n = static_cast<int64_t>(table.owned_ids().size()), d = table.dim();
  HostRows host(n, d, state);
  host.download(shard);
  std::vector<int64_t> ids(table.owned_ids());
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"ids", Tensor(ids.data(), DType::kI64, Device::kCPU, {n})}, {"weight", host.w_tensor()}};
  if (state != StateKind::kNone) tensors.emplace_back("state_m", host.m_tensor());
  if (state == StateKind::kMoments) tensors.emplace_back("state_v", host.v_tensor());
  const std::string file = shard_file_name(name, comm.rank(), comm.size());
  save_safetensors(join(dir, file), tensors,
                   {{"format", "hstu-shard"},
                    {"format_version", std::to_string(kShardFormatVersion)},
                    {"table", name},
                    {"rank", std::to_string(comm.rank())},
                    {"world_size", std::to_string(comm.size())},
                    {"owner", owner_name(table.sharding().kind())},
                    {"optimizer", table.optimizer()}});
  // Every rank's file is complete once the gather returns.
  const std::vector<int64_t> bytes =
      comm.all_gather_host(static_cast<int64_t>(std::filesystem::file_size(join(dir, file))));
  std::vector<std::string> written;
  Json files = Json::array();
  for (int r = 0; r < comm.size(); ++r) {
    written.push_back(shard_file_name(name, r, comm.size()));
    files.push_back({{"file", written.back()},
                     {"rank", r},
                     {"rows", table.sharding().shard_rows(r)},
                     {"bytes", bytes[static_cast<size_t>(r)]}});
  }
  written.push_back(shard_index_name(name));
  if (comm.is_root()) {
    const Json index = {{"format", "hstu-shards"},
                        {"format_version", kShardFormatVersion},
                        {"table", name},
                        {"rows", table.rows()},
                        {"dim", d},
                        {"world_size", comm.size()},
                        {"owner", owner_name(table.sharding().kind())},
                        {"optimizer", table.optimizer()},
                        {"dtype", "F32"},
                        {"files", files}};
    atomic_write_file(join(dir, written.back()), json::dump(index, 2) + "\n");
  }
  comm.barrier();  // the index exists on return, on every rank
  return written;
}

void load_shards(const std::string& dir, const std::string& name, Comm& comm, ShardedTable& table,
                 bool with_optimizer) {
  const ShardIndex ix = read_index(dir, name);
  const StateKind state =
      with_optimizer ? state_of(table.optimizer(), "load_shards") : StateKind::kNone;
  check_index(ix, table.rows(), table.dim(), state, table.optimizer());
  const RowSharding& s = table.sharding();
  const int me = comm.rank();
  HostRows host(static_cast<int64_t>(table.owned_ids().size()), table.dim(), state);
  std::vector<uint8_t> seen(static_cast<size_t>(table.rows()), 0);
  const auto dest = [&](int64_t id) -> int64_t { return s.owner(id) == me ? s.local_row(id) : -1; };
  if (ix.world == s.world() && parse_owner(ix.owner) == s.kind()) {
    // Same placement: this rank's file holds exactly its ids.
    read_shard_file(ix, dir, static_cast<size_t>(me), seen, dest, host);
    for (const int64_t id : table.owned_ids())
      HSTU_CHECK(seen[static_cast<size_t>(id)], join(dir, ix.files[static_cast<size_t>(me)]),
                 ": id ", id, " of rank ", me, " is missing");
    for (size_t id = 0; id < seen.size(); ++id)
      HSTU_CHECK(!seen[id] || dest(static_cast<int64_t>(id)) >= 0,
                 join(dir, ix.files[static_cast<size_t>(me)]), ": holds id ", id, ", which rank ",
                 me, " does not own under ", ix.owner, " over ", ix.world, " ranks");
  } else {
    for (size_t f = 0; f < ix.files.size(); ++f) read_shard_file(ix, dir, f, seen, dest, host);
    check_all_seen(ix, seen);
  }
  host.upload(table.shard());
}

void load_full_into_shard(const std::string& model_path, const std::string& optimizer_path,
                          ShardedTable& table, bool with_optimizer) {
  const std::string& name = table.name();
  const int64_t v = table.rows(), d = table.dim();
  const StateKind state =
      with_optimizer ? state_of(table.optimizer(), "load_full_into_shard") : StateKind::kNone;
  HostRows host(static_cast<int64_t>(table.owned_ids().size()), d, state);
  const auto keep = [&](const uint8_t* bytes, std::vector<float>& out, int64_t width) {
    const std::vector<int64_t>& ids = table.owned_ids();
    for (size_t j = 0; j < ids.size(); ++j)
      copy_row(bytes, ids[j], out, static_cast<int64_t>(j), width);
  };
  {
    const SafetensorsFile f(model_path);
    keep(tensor_bytes(f, name, DType::kF32, {v, d}), host.w, d);
  }
  if (state != StateKind::kNone) {
    const SafetensorsFile f(optimizer_path);
    if (state == StateKind::kMoments) {
      keep(tensor_bytes(f, name + ".state_m", DType::kF32, {v, d}), host.m, d);
      keep(tensor_bytes(f, name + ".state_v", DType::kF32, {v, d}), host.v, d);
    } else {
      keep(tensor_bytes(f, name + ".state_m", DType::kF32, {v}), host.m, 1);
    }
  }
  host.upload(table.shard());
}

void assemble_full_table(const std::string& dir, const std::string& name, EmbeddingTable& full,
                         bool with_optimizer) {
  const ShardIndex ix = read_index(dir, name);
  const StateKind state = with_optimizer ? state_of(full) : StateKind::kNone;
  check_index(ix, full.rows, full.dim, state, "the full table's");
  HostRows host(full.rows, full.dim, state);
  std::vector<uint8_t> seen(static_cast<size_t>(full.rows), 0);
  for (size_t f = 0; f < ix.files.size(); ++f)
    read_shard_file(
        ix, dir, f, seen, [](int64_t id) { return id; }, host);
  check_all_seen(ix, seen);
  host.upload(full);
}

}  // namespace hstu::dist
