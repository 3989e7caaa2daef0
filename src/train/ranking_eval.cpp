// ranking_eval.cpp — ranking metrics per head type and the model's eval pass (ranking_eval.h).
#include "train/ranking_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "core/error.h"

namespace hstu {

std::vector<RankingExtra> ranking_extra_metrics(std::span<const std::string> eval_metrics) {
  std::vector<RankingExtra> out;
  for (const std::string& m : eval_metrics) {
    RankingExtra e;
    if (m == "AUC" || m == "ACC" || m == "LogLoss") continue;  // always reported
    if (m == "RECALL") {
      e = RankingExtra::kRecall;
    } else if (m == "PRECISION") {
      e = RankingExtra::kPrecision;
    } else if (m == "F1Score") {
      e = RankingExtra::kF1;
    } else if (m == "AP" || m == "AVERAGE PRECISION") {
      e = RankingExtra::kAP;
    } else {
      HSTU_THROW("RankingArgs.eval_metrics: unknown metric '", m,
                 "' (AUC, ACC, LogLoss, RECALL, PRECISION, F1Score, AP or AVERAGE PRECISION)");
    }
    if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
  }
  return out;
}

RankingMetrics::RankingMetrics(bool binary, int64_t num_outputs, std::vector<RankingExtra> extras)
    : binary_(binary),
      num_outputs_(num_outputs),
      extras_(std::move(extras)),
      tasks_(binary ? static_cast<size_t>(num_outputs) : 0),
      multi_(binary ? 2 : num_outputs) {
  HSTU_CHECK(num_outputs >= 1, "a ranking head needs >= 1 output, got ", num_outputs);
  HSTU_CHECK(binary || num_outputs >= 2, "a cross-entropy ranking head needs >= 2 classes");
}

void RankingMetrics::add(std::span<const float> logits, int32_t label) {
  HSTU_CHECK(static_cast<int64_t>(logits.size()) == num_outputs_,
             "ranking metrics: ", logits.size(), " logits for a head of ", num_outputs_,
             " outputs");
  ++count_;
  if (!binary_) {
    multi_.add(logits, label);
    return;
  }
  for (int64_t t = 0; t < num_outputs_; ++t)
    tasks_[static_cast<size_t>(t)].add(logits[static_cast<size_t>(t)], ((label >> t) & 1) != 0);
}

namespace {

// The table name of an extra metric.
const char* extra_name(RankingExtra e) {
  switch (e) {
    case RankingExtra::kRecall:
      return "Recall";
    case RankingExtra::kPrecision:
      return "Precision";
    case RankingExtra::kF1:
      return "F1";
    case RankingExtra::kAP:
      return "AP";
  }
  return "?";
}

double extra_value(RankingExtra e, const BinaryResult& r) {
  switch (e) {
    case RankingExtra::kRecall:
      return r.recall;
    case RankingExtra::kPrecision:
      return r.precision;
    case RankingExtra::kF1:
      return r.f1;
    case RankingExtra::kAP:
      return r.average_precision;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

double extra_value(RankingExtra e, const MulticlassMetrics& m) {
  switch (e) {
    case RankingExtra::kRecall:
      return m.recall();
    case RankingExtra::kPrecision:
      return m.precision();
    case RankingExtra::kF1:
      return m.f1();
    case RankingExtra::kAP:
      return m.average_precision();
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

NamedValues RankingMetrics::values() const {
  if (!binary_) {
    NamedValues v = multi_.values("task0");
    for (RankingExtra e : extras_)
      v.emplace_back(std::string(extra_name(e)) + "/task0", extra_value(e, multi_));
    v.emplace_back("MeanAUC", multi_.auc());
    return v;
  }
  NamedValues v;
  double auc_sum = 0;
  int64_t auc_n = 0;
  for (int64_t t = 0; t < num_outputs_; ++t) {
    const BinaryResult r = tasks_[static_cast<size_t>(t)].compute();
    const std::string task = "task" + std::to_string(t);
    for (auto& p : r.values(task)) v.push_back(p);
    for (RankingExtra e : extras_)
      v.emplace_back(std::string(extra_name(e)) + "/" + task, extra_value(e, r));
    if (std::isfinite(r.auc)) {
      auc_sum += r.auc;
      ++auc_n;
    }
  }
  v.emplace_back("MeanAUC", auc_n > 0 ? auc_sum / static_cast<double>(auc_n)
                                      : std::numeric_limits<double>::quiet_NaN());
  return v;
}

int64_t ranking_eval_samples(const RankingSplit& split, int64_t batch_size, int64_t max_iters) {
  const int64_t n = static_cast<int64_t>(split.samples.size());
  return max_iters > 0 ? std::min(n, max_iters * batch_size) : n;
}

NamedValues evaluate_ranking(Ctx& ctx, RankingModel& model, const SequenceDataset& ds,
                             const RankingSplit& split, int64_t batch_size, int64_t max_iters,
                             dist::Comm* comm, ItemWindow* items,
                             std::vector<RankingExtra> extras) {
  HSTU_CHECK(batch_size >= 1, "ranking eval batch size ", batch_size, " must be >= 1");
  const int64_t k = model.num_outputs();
  const int ranks = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  const int64_t n = ranking_eval_samples(split, batch_size, max_iters);
  // Every candidate's logits and label, in split order: rank r scores batches r, r + W, ...
  // and the others' rows are zero until the sum over ranks fills them (x + 0 is exact, so the
  // metrics equal a single process's bit for bit).
  std::vector<int64_t> cand_begin(static_cast<size_t>(n) + 1, 0);
  for (int64_t s = 0; s < n; ++s)
    cand_begin[static_cast<size_t>(s) + 1] =
        cand_begin[static_cast<size_t>(s)] + split.samples[static_cast<size_t>(s)].num_candidates();
  const int64_t total = cand_begin.back();
  std::vector<float> logits(static_cast<size_t>(total * k), 0.0f);  // [N, K]
  std::vector<int32_t> labels(static_cast<size_t>(total), 0);       // [N]
  SequenceBatch b, work;
  std::vector<int64_t> idx;
  std::vector<double> tmp;  // a batch's logits in f64 when the model computes in f64
  const int64_t batches = (n + batch_size - 1) / batch_size;
  // Rounds of one batch per rank, so that a windowed item table's collective fetch runs as
  // often on every rank (a rank past the last batch fetches nothing).
  for (int64_t round = 0; round < batches; round += ranks) {
    const int64_t batch = round + rank, s = batch * batch_size;
    const bool mine = batch < batches;
    if (mine) {
      idx.resize(static_cast<size_t>(std::min(batch_size, n - s)));
      std::iota(idx.begin(), idx.end(), s);
      make_ranking_batch(ds, split, idx, b);
    }
    const SequenceBatch* in = &b;
    if (items) {  // the window holds the batch's item rows; the ids become window rows
      work = mine ? b : SequenceBatch{};
      const std::span<int32_t> ids[] = {work.item_ids};
      items->fetch_read_only(ctx, ids);
      in = &work;
    }
    if (mine) {
      model.upload(*in);
      const Tensor out = model.predict(ctx);  // [nc, K]
      const int64_t nc = model.num_candidates(), c0 = cand_begin[static_cast<size_t>(s)];
      HSTU_CHECK(c0 + nc <= total, "ranking eval: the batch has more candidates than its samples");
      HSTU_CHECK(out.dtype == DType::kF32 || out.dtype == DType::kF64,
                 "ranking eval reads f32 or f64 logits");
      float* dst = logits.data() + c0 * k;
      if (out.dtype == DType::kF32) {
        copy_bytes(dst, Device::kCPU, out.data, out.device, static_cast<size_t>(nc * k) * 4);
      } else {
        tmp.resize(static_cast<size_t>(nc * k));
        copy_bytes(tmp.data(), Device::kCPU, out.data, out.device, tmp.size() * sizeof(double));
        std::copy(tmp.begin(), tmp.end(), dst);
      }
      const std::vector<int32_t>& l = model.labels();  // [nc]
      std::copy(l.begin(), l.begin() + nc, labels.begin() + c0);
    }
  }
  if (ranks > 1 && total > 0) {
    comm->host_all_reduce(Tensor(logits.data(), DType::kF32, Device::kCPU, {total * k}),
                          dist::ReduceOp::kSum);
    comm->host_all_reduce(Tensor(labels.data(), DType::kI32, Device::kCPU, {total}),
                          dist::ReduceOp::kSum);
  }
  RankingMetrics metrics(model.binary(), k, std::move(extras));
  for (int64_t r = 0; r < total; ++r)
    metrics.add(std::span<const float>(logits.data() + r * k, static_cast<size_t>(k)),
                labels[static_cast<size_t>(r)]);
  return metrics.values();
}

}  // namespace hstu
