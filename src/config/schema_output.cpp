// schema_output.cpp — what is written from the field table (schema_fields.cpp): a Config as gin
// (to_gin, the effective config of a run) and the reference tables of docs/CONFIG.md.
#include <algorithm>
#include <cctype>
#include <sstream>

#include "config/schema.h"
#include "config/schema_detail.h"
#include "core/error.h"

namespace hstu {
namespace {

using detail::cat;
using schema_detail::format_number;
using schema_detail::join;
using schema_detail::kDistributionClass;
using schema_detail::value_of;

const char* type_name(FieldType t) {
  switch (t) {
    case FieldType::kInt:
      return "int";
    case FieldType::kFloat:
      return "float";
    case FieldType::kBool:
      return "bool";
    case FieldType::kString:
      return "string";
    case FieldType::kStringList:
      return "list of strings";
    case FieldType::kIntList:
      return "list of ints";
    case FieldType::kDistribution:
      return "@RandomDistribution()";
  }
  return "";
}

}  // namespace

std::string to_gin(const Config& config) {
  Config c = config;
  std::ostringstream os;
  os << "# hstu configuration (gin syntax); every field is listed.\n"
     << "# task: " << c.task << " (TrainerArgs.task)\n";
  auto line = [&](const std::string& key, const std::string& value, const std::string& doc) {
    std::string text = key + " = " + value;
    text.resize(std::max<size_t>(text.size(), 56), ' ');
    os << text << "  # " << doc << "\n";
  };
  for (const ClassSpec& cls : config_classes()) {
    if (cls.name == kDistributionClass) continue;  // written after the field that refers to it
    if ((cls.name == "RankingArgs" && c.task != "ranking") ||
        (cls.name == "RetrievalArgs" && c.task != "retrieval")) {
      os << "\n# " << cls.name << ": not bound (binding it would make this a "
         << (c.task == "ranking" ? "retrieval" : "ranking") << " config)\n";
      continue;
    }
    os << "\n# " << cls.name << ": " << cls.doc << "\n";
    std::vector<const FieldSpec*> distributions;
    for (const FieldSpec& f : config_fields()) {
      if (f.cls != cls.name || !f.get) continue;
      line(cls.name + "." + f.name, gin::to_string(value_of(f.get(c), f.name)), f.doc);
      if (f.type == FieldType::kDistribution) distributions.push_back(&f);
    }
    for (const FieldSpec* d : distributions) {
      Config holder;
      holder.synthetic.seqlen_dist = *std::get<RandomDistribution*>(d->get(c));
      for (const FieldSpec& f : config_fields()) {
        if (f.cls != kDistributionClass) continue;
        line(d->name + "/" + f.cls + "." + f.name, gin::to_string(value_of(f.get(holder), "")),
             f.doc);
      }
    }
  }
  return os.str();
}

std::string config_reference_markdown() {
  auto cell = [](std::string s) {
    for (size_t at = s.find('|'); at != std::string::npos; at = s.find('|', at + 2)) {
      s.replace(at, 1, "\\|");
    }
    return s;
  };
  std::ostringstream os;
  for (const ClassSpec& cls : config_classes()) {
    std::string doc = cell(cls.doc);
    doc[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(doc[0])));
    os << "## " << cls.name << "\n\n"
       << doc << ".\n\n"
       << "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
    Config defaults;
    defaults.synthetic.seqlen_dist = RandomDistribution{};  // the class defaults, not the field's
    for (const FieldSpec& f : config_fields()) {
      if (f.cls != cls.name || !f.get) continue;
      const FieldRef ref = f.get(defaults);
      std::string allowed;
      switch (f.type) {
        case FieldType::kBool:
          allowed = "True, False";
          break;
        case FieldType::kDistribution:
          allowed = "@[scope/]RandomDistribution()";
          break;
        case FieldType::kString:
        case FieldType::kStringList:
          allowed = f.allowed.empty() ? "any" : join(f.allowed);
          break;
        default:
          allowed = f.range.describe();
      }
      if (f.type == FieldType::kStringList || f.type == FieldType::kIntList) {
        allowed = "each: " + allowed;
      }
      if (f.range.none) allowed += cat("; None = ", format_number(*f.range.none));
      const std::string value = f.type == FieldType::kDistribution
                                    ? "see below"
                                    : "`" + gin::to_string(value_of(ref, "")) + "`";
      os << "| `" << f.cls << "." << f.name << "` | " << cell(type_name(f.type)) << " | "
         << cell(value) << " | " << cell(allowed) << " | " << cell(f.doc) << " |\n";
    }
    if (cls.name == "SyntheticArgs") {
      const RandomDistribution& d = Config{}.synthetic.seqlen_dist;
      os << "\nDefault `SyntheticArgs.seqlen_dist`: " << d.dist_type << " with low "
         << format_number(d.low) << ", high " << format_number(d.high) << ", mean "
         << format_number(d.mean) << ", std " << format_number(d.std) << ".\n";
    }
    os << "\n";
  }
  os << "## Accepted for compatibility and ignored\n\n"
     << "recsys-examples' gin files also bind these. hstu parses them (checking the value where "
        "an allowed set is given), ignores them and prints one warning per binding.\n\n"
     << "| key | allowed | reason |\n|---|---|---|\n";
  for (const FieldSpec& f : config_fields()) {
    if (f.get) continue;
    os << "| `" << f.cls << "." << f.name << "` | "
       << cell(f.allowed.empty() ? std::string(type_name(f.type)) : join(f.allowed)) << " | "
       << cell(f.doc) << " |\n";
  }
  for (const ClassSpec& c : ignored_classes()) {
    os << "| `" << c.name << ".*` | any | " << cell(c.doc) << " |\n";
  }
  return os.str();
}

}  // namespace hstu
