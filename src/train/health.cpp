// health.cpp — the per-step health test, the after-the-fact scan for non-finite parameters and
// the messages of TrainerArgs.nonfinite (health.h).
#include "train/health.h"

#include <cmath>
#include <cstddef>
#include <sstream>
#include <vector>

#include "core/arena.h"
#include "core/error.h"
#include "dist/sharded_table.h"

namespace hstu {
namespace {

// The index (in row-major order) of the first non-finite element of `t` (f32 or f64), or -1.
int64_t first_nonfinite(const Tensor& t) {
  if (t.empty() || t.numel() == 0) return -1;
  HSTU_CHECK(t.dtype == DType::kF32 || t.dtype == DType::kF64,
             "first_nonfinite: f32 or f64 expected, got ", t.str());
  const int64_t n = t.numel();
  std::vector<std::byte> bytes(static_cast<size_t>(t.nbytes()));
  Tensor host = t;  // the same shape, contiguous on the host (copy_tensor honours row strides)
  host.data = bytes.data();
  host.device = Device::kCPU;
  host.row_stride = t.row_elems();
  copy_tensor(host, t);
  for (int64_t i = 0; i < n; ++i) {
    const double v = t.dtype == DType::kF64 ? host.as<double>()[i] : host.as<float>()[i];
    if (!std::isfinite(v)) return i;
  }
  return -1;
}

std::string table_hit(const EmbeddingTable& t, const Tensor& x, const char* what) {
  const int64_t i = first_nonfinite(x);
  if (i < 0) return "";
  const int64_t width = x.ndim == 2 ? x.dim(1) : 1;
  return "embedding table '" + t.name + "' " + what + " (row " + std::to_string(i / width) + ")";
}

}  // namespace

bool step_is_finite(const StepLoss& l) {
  return std::isfinite(l.loss) && std::isfinite(l.grad_sumsq);
}

std::string first_nonfinite_tensor(const CheckpointTensors& m, bool with_state) {
  if (m.dense) {
    const DenseParams& d = *m.dense;
    for (size_t i = 0; i < d.table().size(); ++i) {
      const int k = static_cast<int>(i);
      const std::string& name = d.table()[i].name;
      if (first_nonfinite(d.param(k)) >= 0) return "dense parameter '" + name + "'";
      if (!with_state) continue;
      if (first_nonfinite(d.state_m(k)) >= 0) return "Adam m of dense parameter '" + name + "'";
      if (first_nonfinite(d.state_v(k)) >= 0) return "Adam v of dense parameter '" + name + "'";
    }
  }
  std::vector<const EmbeddingTable*> tables(m.tables.begin(), m.tables.end());
  for (dist::ShardedTable* s : m.sharded) tables.push_back(&s->shard());
  for (const EmbeddingTable* t : tables) {
    // A sharded table's shard rows are local rows; the weights' row index is still named.
    std::string hit = table_hit(*t, t->weight, "weights");
    if (hit.empty() && with_state) hit = table_hit(*t, t->m, "optimiser state m");
    if (hit.empty() && with_state) hit = table_hit(*t, t->v, "optimiser state v");
    if (!hit.empty()) return hit;
  }
  return "";
}

void check_finite_weights(const CheckpointTensors& m, const std::string& what) {
  const std::string hit = first_nonfinite_tensor(m, false);
  HSTU_CHECK(hit.empty(), what, ": the checkpoint's ", hit,
             " holds non-finite values (NaN or Inf); its scores would be meaningless. Use an "
             "earlier checkpoint of the run");
}

std::string nonfinite_error_message(const StepLoss& l, const std::string& group,
                                    const std::string& ckpt_dir, const std::string& last_ckpt) {
  std::ostringstream os;
  os << "step " << l.step + 1 << ": the training loss is " << l.loss
     << " and the dense gradient norm is " << std::sqrt(l.grad_sumsq)
     << " (not finite; TrainerArgs.nonfinite = \"error\"). ";
  if (!group.empty())
    os << "First parameter group with non-finite values after that step's update: " << group
       << ". ";
  else
    os << "Every parameter is still finite (the non-finite value is in the loss or the "
          "gradients). ";
  if (last_ckpt.empty())
    os << "No checkpoint was written by this run. ";
  else
    os << "No checkpoint is written after it; the last good one is kept: " << last_ckpt << ". ";
  os << "To go on: lower OptimizerArgs.learning_rate (or set OptimizerArgs.grad_clip_norm) and ";
  if (!last_ckpt.empty())
    os << "resume with `hstu train ... --resume " << ckpt_dir << " --allow-config-change`, ";
  else
    os << "train again, ";
  os << "or set TrainerArgs.nonfinite = \"skip_step\" to skip such steps";
  return os.str();
}

}  // namespace hstu
