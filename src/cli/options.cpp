// options.cpp — the CLI11 pieces hstu's subcommands share (see options.h).
#include "cli/options.h"

#include <charconv>
#include <cstdio>
#include <optional>
#include <sstream>

#include "config/load.h"
#include "config/schema.h"
#include "core/error.h"

namespace hstu::cli {
namespace {

const char* kDefaultGin =
#include "default_config.inc"
    ;

// The schema row of "Class.field".
const FieldSpec& field_spec(const std::string& key) {
  for (const FieldSpec& f : config_fields())
    if (f.cls + "." + f.name == key) return f;
  HSTU_THROW("no config field ", key);
}

// `text` as an integer, when all of it is one.
std::optional<int64_t> parse_int(const std::string& text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

// Accepts what `--set key=VALUE` accepts for VALUE.
CLI::Validator config_value(const std::string& key) {
  return CLI::Validator(
      [key](std::string& value) -> std::string {
        const std::string assignment = key + "=" + value;
        try {
          Config scratch;
          apply_override(scratch, assignment);
          return "";
        } catch (const Error& e) {
          // The flag names itself: drop the "--set <assignment>: " that labels override errors.
          const std::string label = "--set " + assignment + ": ", message = e.what();
          return message.rfind(label, 0) == 0 ? message.substr(label.size()) : message;
        }
      },
      "");
}

}  // namespace

void add_config_file(CLI::App& app, ConfigArgs& args, const std::string& absent) {
  // One option with three spellings; several files apply in order, as gin applies them.
  app.add_option(
         "config,--config,--gin-config-file", args.files,
         "gin config files, applied in order: a later binding of a key wins (" + absent + ")")
      ->type_name("FILE...")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void add_set(CLI::App& app, ConfigArgs& args) {
  app.add_option("--set", args.sets,
                 "override a config value (repeatable; every key: docs/CONFIG.md)")
      ->type_name("Class.field=value")
      ->allow_extra_args(false);
}

CLI::Option* add_config_value(CLI::App& app, const std::string& flag, const std::string& key,
                              const std::string& type_name) {
  const FieldSpec& spec = field_spec(key);
  std::string allowed;
  for (const std::string& a : spec.allowed) allowed += (allowed.empty() ? "" : "|") + a;
  return app.add_option(flag, spec.doc)
      ->type_name(allowed.empty() ? type_name : allowed)
      ->check(config_value(key));
}

CLI::Option* add_field_flag(CLI::App& app, ConfigArgs& args, const std::string& flag,
                            const std::string& key, const std::string& type_name) {
  CLI::Option* opt = add_config_value(app, flag, key, type_name);
  return opt->description(opt->get_description() + " (sets " + key + ")")
      ->each([&args, key](const std::string& value) { args.fields.push_back(key + "=" + value); });
}

void add_runtime_flags(CLI::App& app, ConfigArgs& args) {
  add_field_flag(app, args, "--device", "TrainerArgs.device", "");
  // The trainer hands the count to OpenMP as an int.
  add_field_flag(app, args, "--threads", "TrainerArgs.num_threads", "N")
      ->check(int_in(0, std::numeric_limits<int>::max()));
}

CLI::Validator int_in(int64_t lo, int64_t hi) {
  const std::string range = hi == std::numeric_limits<int64_t>::max()
                                ? ">= " + std::to_string(lo)
                                : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& value) -> std::string {
        const std::optional<int64_t> v = parse_int(value);
        if (v && *v >= lo && *v <= hi) return "";
        return "expected an integer " + range + ", got '" + value + "'";
      },
      "");
}

CLI::Validator positive_ints(int count, const std::string& layout) {
  return CLI::Validator(
      [count, layout](std::string& value) -> std::string {
        std::istringstream parts(value);
        std::string part;
        int n = 0;
        bool ok = true;
        while (std::getline(parts, part, ',')) {
          const std::optional<int64_t> v = parse_int(part);
          ok = ok && v && *v > 0;
          ++n;
        }
        if (ok && n == count) return "";
        return "expected " + layout + " (positive integers), got '" + value + "'";
      },
      "");
}

std::vector<std::string> overrides(const ConfigArgs& args) {
  std::vector<std::string> all = args.sets;
  all.insert(all.end(), args.fields.begin(), args.fields.end());
  return all;
}

std::string files_label(const ConfigArgs& args) {
  std::string label;
  for (const std::string& f : args.files) label += (label.empty() ? "" : " + ") + f;
  return label;
}

Config resolve_config(const ConfigArgs& args, NoFile fallback, std::string* gin_text,
                      std::vector<std::string>* notes) {
  std::vector<std::string> warnings;
  Config cfg;
  if (!args.files.empty())
    cfg = load_config(args.files, overrides(args), &warnings);
  else if (fallback == NoFile::kEmbeddedDefault)
    cfg =
        load_config_text(kDefaultGin, "<embedded configs/default.gin>", overrides(args), &warnings);
  else
    cfg = load_config_text("", "<defaults>", overrides(args), &warnings);
  if (notes)
    *notes = warnings;
  else
    for (const auto& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (gin_text) *gin_text = to_gin(cfg);
  return cfg;
}

std::vector<std::string> given_args(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt == app.get_help_ptr() || opt->count() == 0) continue;
    if (opt->get_expected_max() == 0) {  // a flag
      if (opt->as<bool>()) out.push_back(opt->get_name());
      continue;
    }
    for (const std::string& value : opt->results()) {
      out.push_back(opt->get_name());
      out.push_back(value);
    }
  }
  return out;
}

std::string command_path(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* p = app.get_parent(); p != nullptr; p = p->get_parent())
    path = p->get_name() + " " + path;
  return path;
}

int usage_error(const CLI::App& app, const std::string& message) {
  const std::string path = command_path(app);
  std::fprintf(stderr, "%s: error: %s\n(the usage: %s --help)\n", path.c_str(), message.c_str(),
               path.c_str());
  return 2;
}

}  // namespace hstu::cli
