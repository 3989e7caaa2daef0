// test_kill_resume.cpp — real kills and a real full disk during checkpoint saves, through the
// hstu binary (HSTU_BIN):
//   - KillDuringSaves: a 5-step CPU run saving every step is killed (SIGKILL, raised by
//     io/atomic_file's HSTU_KILL_AT_WRITE hook) at every file commit of every save, at three
//     points of each commit (a torn temporary, a complete unrenamed temporary, renamed but the
//     folder not fsynced), for ckpt_keep 1, 2 and 3: 225 kills. After each, the save a resume
//     loads must be the newest complete one and equal to the uninterrupted run's save of that
//     step; `--resume` must end with weights and optimizer state bit-identical to the
//     uninterrupted run, no temporary left, and metrics.jsonl logging each event once.
//   - DiskFullDuringSaves: the run folder on a small tmpfs (a user + mount namespace, `unshare
//     -rm`: the kernel's own ENOSPC), one size per trial so that saves fail at different files
//     and offsets; where namespaces are not allowed, RLIMIT_FSIZE with SIGXFSZ ignored (write()
//     fails with EFBIG) on a resumed run instead. Each failed save must exit 1 naming the cause,
//     keep the previous save intact and loadable, leave no temporary, and a resume from it must
//     end bit-identical to the uninterrupted run.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/data_test_util.h"
#include "common/process_test_util.h"
#include "common/tiny_gin.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

constexpr int kSteps = 5;  // one save per step

const std::string kGin = test::tiny_retrieval_gin(
    kSteps, "TrainerArgs.ckpt_save_interval = 1\nTrainerArgs.eval_interval = 1000\n");

using Tensors = std::map<std::string, std::string>;

// Every tensor of a save's model and optimizer files, as raw bytes (the metadata, which holds the
// run's own folder, left out).
Tensors save_tensors(const std::string& save) {
  Tensors out;
  for (const std::string& path : {checkpoint_model_path(save), checkpoint_optimizer_path(save)}) {
    const SafetensorsFile f(path);
    for (const auto& n : f.names()) {
      const auto& e = f.get(n);
      out[fs::path(path).filename().string() + ":" + n] =
          std::string(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
    }
  }
  return out;
}

// "event@step" of each metrics.jsonl record.
std::vector<std::string> metric_events(const std::string& run_dir) {
  std::vector<std::string> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const Json j = json::parse(line, run_dir + "/metrics.jsonl");
    out.push_back(json::string_at(j, "event") + "@" +
                  (j.contains("step") ? std::to_string(json::int_at(j, "step")) : "-"));
  }
  return out;
}

// Paths under run_dir/checkpoints whose names hold ".tmp" (what an interrupted save leaves).
std::vector<std::string> temporaries(const std::string& run_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(run_dir + "/checkpoints", ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->path().filename().string().find(".tmp") != std::string::npos)
      out.push_back(it->path().string());
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
}

std::vector<std::string> train_args(const std::string& gin, const std::string& run_dir, int keep) {
  return {test::hstu_bin(),
          "train",
          gin,
          "--quiet",
          "--threads",
          "1",
          "--run-dir",
          run_dir,
          "--set",
          "TrainerArgs.ckpt_keep=" + std::to_string(keep)};
}

// The uninterrupted run: each save's tensors, the final ones, the commits (number, path) and the
// metrics events.
struct Reference {
  std::map<int, Tensors> saves;  // by step
  std::vector<std::pair<int64_t, std::string>> commits;
  std::vector<std::string> events;
};

Reference reference_run(const TempDir& dir, const std::string& gin) {
  Reference ref;
  const std::string run = dir.file("reference"), log = dir.file("reference.writes");
  test::ProcOptions o;
  o.env = {"HSTU_WRITE_LOG=" + log, "OMP_NUM_THREADS=1"};
  const test::ProcResult r = test::run_process(train_args(gin, run, kSteps), run + ".out", o);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (int s = 1; s <= kSteps; ++s) {
    char name[32];
    std::snprintf(name, sizeof name, "/checkpoints/step-%09d", s);
    ref.saves[s] = save_tensors(find_checkpoint(run + name));
  }
  std::ifstream in(log);
  int64_t n;
  std::string path;
  while (in >> n >> path) ref.commits.emplace_back(n, path);
  ref.events = metric_events(run);
  return ref;
}

// The step of the save that commit `path` belongs to (0 when none); `latest` belongs to the save
// whose files came before it.
int save_step_of(const std::string& path, int previous_step) {
  if (fs::path(path).filename() == "latest") return previous_step;
  const size_t at = path.find("/checkpoints/step-");
  return at == std::string::npos ? 0 : std::atoi(path.c_str() + at + 18);
}

// Checks the run folder after a failed or killed save and resumes it; "" or what went wrong.
std::string check_and_resume(const std::string& gin, const std::string& run, int keep,
                             int expected_step, const Reference& ref) {
  std::ostringstream err;
  if (expected_step == 0) {
    try {
      find_checkpoint(run);
      err << "a save loads, none was complete; ";
    } catch (const std::exception&) {
    }
  } else {
    try {
      const std::string save = find_checkpoint(run);
      char name[32];
      std::snprintf(name, sizeof name, "step-%09d", expected_step);
      if (fs::path(save).filename() != name)
        err << "loads " << save << ", expected " << name << "; ";
      else if (save_tensors(save) != ref.saves.at(expected_step))
        err << save << " differs from the uninterrupted run's; ";
    } catch (const std::exception& e) {
      err << "no consistent save: " << e.what() << "; ";
    }
  }
  std::vector<std::string> args = train_args(gin, run, keep);
  args.push_back("--resume");
  args.push_back(run);
  test::ProcOptions o;
  o.env = {"OMP_NUM_THREADS=1"};
  test::ProcResult r = test::run_process(args, run + ".resume.out", o);
  if (expected_step == 0) {
    if (r.exit_code != 1 || r.out.find("no checkpoint in '" + run + "'") == std::string::npos)
      err << "resume without a save: exit " << r.exit_code << ": " << r.out << "; ";
    args.resize(args.size() - 2);
    r = test::run_process(args, run + ".fresh.out", o);
  }
  if (r.exit_code != 0) return err.str() + "resume failed: " + r.out;
  if (save_tensors(find_checkpoint(run)) != ref.saves.at(kSteps))
    err << "the resumed run's final weights differ from the uninterrupted run's; ";
  if (const auto left = temporaries(run); !left.empty()) err << "left behind: " << join(left);
  if (const auto events = metric_events(run); events != ref.events)
    err << "metrics.jsonl events " << join(events) << "vs " << join(ref.events) << "; ";
  return err.str();
}

// Runs fn(i) for i in [0, n) on two threads (each trial is its own processes and folder).
template <class Fn>
void parallel_for(int n, Fn fn) {
  std::atomic<int> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w)
    workers.emplace_back([&] {
      for (int i; (i = next++) < n;) fn(i);
    });
  for (auto& t : workers) t.join();
}

class KillResume : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::hstu_bin().empty() || !fs::exists(test::hstu_bin()))
      GTEST_SKIP() << "HSTU_BIN not built";
  }
};

TEST_F(KillResume, KillDuringSaves) {
  TempDir dir;
  const std::string gin = dir.write("tiny.gin", kGin);
  const Reference ref = reference_run(dir, gin);
  ASSERT_EQ(ref.events.back(), "summary@-");
  struct Trial {
    int keep;
    int64_t commit;
    std::string where, path;
    int expected_step;
  };
  std::vector<Trial> trials;
  for (int keep : {1, 2, 3})
    for (int step = 0; const auto& [commit, path] : ref.commits) {
      const bool is_latest = fs::path(path).filename() == "latest";
      step = save_step_of(path, step);
      if (step == 0) continue;  // not part of a save (config.gin)
      for (const std::string where : {"write", "rename", "after"}) {
        // The save in progress counts once `latest` names it; before that the previous one loads,
        // except in the first save, where a published folder without `latest` is the newest.
        int expected = step - 1;
        if (is_latest && (where == "after" || step == 1)) expected = step;
        trials.push_back({keep, commit, where, path, expected});
      }
    }
  ASSERT_EQ(trials.size(), size_t(3 * 3 * 5 * kSteps));  // 3 files + manifest + latest per save
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int> killed{0};
  parallel_for(static_cast<int>(trials.size()), [&](int i) {
    const Trial& t = trials[i];
    const std::string run = dir.file("kill" + std::to_string(i));
    test::ProcOptions o;
    o.env = {"HSTU_KILL_AT_WRITE=" + std::to_string(t.commit) + ":" + t.where, "OMP_NUM_THREADS=1"};
    const test::ProcResult r = test::run_process(train_args(gin, run, t.keep), run + ".out", o);
    std::string err;
    if (r.signal != SIGKILL)
      err = "not killed (exit " + std::to_string(r.exit_code) + "): " + r.out;
    else
      err = check_and_resume(gin, run, t.keep, t.expected_step, ref), ++killed;
    if (!err.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      failures.push_back("kill at commit " + std::to_string(t.commit) + ":" + t.where + " (" +
                         t.path + ", keep " + std::to_string(t.keep) + "): " + err);
    }
    std::error_code ec;
    fs::remove_all(run, ec);
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
  std::printf("[kill] %d kills during saves, %zu inconsistent or different resumes\n",
              killed.load(), failures.size());
  EXPECT_GE(killed.load(), 200);
}

// Whether this process may mount a tmpfs in a new user + mount namespace.
bool can_mount_tmpfs(const TempDir& dir) {
  const std::string mnt = dir.file("probe");
  fs::create_directories(mnt);
  const test::ProcResult r =
      test::run_process({"/usr/bin/unshare", "-rm", "/bin/sh", "-c",
                         "mount -t tmpfs -o size=64k tmpfs " + mnt + " && touch " + mnt + "/x"},
                        dir.file("probe.out"));
  return r.exit_code == 0;
}

TEST_F(KillResume, DiskFullDuringSaves) {
  TempDir dir;
  const std::string gin = dir.write("tiny.gin", kGin);
  const Reference ref = reference_run(dir, gin);
  const char* force = std::getenv("HSTU_TEST_DISK_FULL");  // "fsize": the fallback, to test it
  const bool tmpfs = !(force && std::string(force) == "fsize") && can_mount_tmpfs(dir);
  std::printf("[disk-full] %s\n", tmpfs ? "tmpfs in a user namespace (ENOSPC)"
                                        : "no namespaces here: RLIMIT_FSIZE (EFBIG)");
  // The sizes below are calibrated on the reference run, so they follow the size of the config
  // (config.gin, and the copy each save's model, optimizer and trainer_state files carry):
  // base_kib = the run's own files and one save in 4 KiB tmpfs pages (116 KiB when config.gin
  // had 14679 bytes); fsize0 = 1679 bytes below config.gin (then 13000).
  const fs::path ref_dir = dir.file("reference");
  int64_t base_kib = 0;
  for (const auto& e : fs::recursive_directory_iterator(ref_dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), ref_dir).string();
    if (rel.rfind("checkpoints/step-", 0) == 0 && rel.rfind("checkpoints/step-000000001/", 0) != 0)
      continue;  // one save
    base_kib += 4 * ((static_cast<int64_t>(e.file_size()) + 4095) / 4096);
  }
  const int64_t fsize0 = static_cast<int64_t>(fs::file_size(ref_dir / "config.gin")) - 1679;
  int64_t second_latest = 0;  // the commit of `latest` in the second save
  for (int seen = 0; const auto& [commit, path] : ref.commits)
    if (fs::path(path).filename() == "latest" && ++seen == 2) second_latest = commit;
  ASSERT_GT(second_latest, 0);
  constexpr int kTrials = 24;
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int> failed_saves{0};
  std::map<int, int> by_step;  // the step whose save failed -> trials
  parallel_for(kTrials, [&](int i) {
    const std::string run = dir.file("full" + std::to_string(i));
    const int keep = 1 + i % 2;
    std::string err;
    test::ProcResult r;
    if (tmpfs) {
      // base_kib holds the run's own files and one save; each further 6 or 8 KiB moves the
      // failure to another file or save (keep 1 never needs room for more than two saves).
      const std::string mnt = dir.file("mnt" + std::to_string(i));
      fs::create_directories(mnt);
      const int64_t kib = base_kib + (keep == 1 ? 6 : 8) * (i / 2);
      std::string script = "mount -t tmpfs -o size=" + std::to_string(kib) + "k tmpfs " + mnt +
                           " || exit 99; OMP_NUM_THREADS=1 ";
      for (const std::string& a : train_args(gin, mnt + "/run", keep)) script += "'" + a + "' ";
      script += "; rc=$?; cp -a " + mnt + "/run " + run + "; exit $rc";
      r = test::run_process({"/usr/bin/unshare", "-rm", "/bin/sh", "-c", script}, run + ".out");
      // Paths in messages and metadata name the mount; the copy is checked as the run folder.
      const std::string from = mnt + "/run";
      for (size_t at; (at = r.out.find(from)) != std::string::npos;)
        r.out.replace(at, from.size(), run);
    } else {
      // A run killed once its second save is in place, then resumed with files of limited size.
      std::vector<std::string> args = train_args(gin, run, keep);
      test::ProcOptions o;
      o.env = {"OMP_NUM_THREADS=1",
               "HSTU_KILL_AT_WRITE=" + std::to_string(second_latest) + ":after"};
      r = test::run_process(args, run + ".first.out", o);
      if (r.signal != SIGKILL) err = "first run not killed: " + r.out;
      o.env.pop_back();
      args.push_back("--resume");
      args.push_back(run);
      o.fsize_limit = fsize0 + 1000 * i;  // above config.gin, below optimizer.safetensors
      r = test::run_process(args, run + ".out", o);
    }
    const char* cause = tmpfs ? "No space left on device" : "File too large";
    const size_t at = r.out.find("checkpoint save of step ");
    int failed_step = 0;
    if (r.exit_code != 1 || at == std::string::npos || r.out.find(cause) == std::string::npos) {
      err += "expected a failed save naming '" + std::string(cause) + "', exit " +
             std::to_string(r.exit_code) + ": " + r.out;
    } else {
      failed_step = std::atoi(r.out.c_str() + at + 24);
      ++failed_saves;
      if (r.out.find("are unchanged") == std::string::npos) err += "no word on the previous save; ";
      if (const auto left = temporaries(run); !left.empty()) err += "left behind: " + join(left);
      // `latest` still names the previous save, which loads and equals the reference's.
      if (failed_step >= 1) err += check_and_resume(gin, run, keep, failed_step - 1, ref);
    }
    std::lock_guard<std::mutex> lock(mu);
    ++by_step[failed_step];
    if (!err.empty()) failures.push_back("disk-full trial " + std::to_string(i) + ": " + err);
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
  std::string steps;
  for (const auto& [s, n] : by_step)
    steps += " step " + std::to_string(s) + ": " + std::to_string(n);
  std::printf("[disk-full] %d failed saves (%s), %zu inconsistent or different resumes\n",
              failed_saves.load(), steps.c_str(), failures.size());
  EXPECT_GE(failed_saves.load(), 20);
}

}  // namespace
}  // namespace hstu
