// json.cpp — parsing with errors that name the file and position (and duplicate keys refused),
// dumping with hstu errors, and typed object members (see json.h).
#include "io/json.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <unordered_set>
#include <vector>

#include "core/error.h"

namespace hstu::json {
namespace {

// nlohmann's message without its "[json.exception.<kind>.<id>] " prefix and, for a parse error,
// without its own "parse error at line L, column C: " (the caller names the position).
std::string_view reason(const Json::exception& e) {
  std::string_view s = e.what();
  const size_t tag_end = s.find("] ");
  if (tag_end != std::string_view::npos) s.remove_prefix(tag_end + 2);
  if (e.id >= 100 && e.id < 200) {  // parse_error
    const size_t colon = s.find(": ");
    if (colon != std::string_view::npos) s.remove_prefix(colon + 2);
  }
  return s;
}

// "<line>:<column>" (1-based) of the 1-based byte index nlohmann reports.
std::string position(std::string_view text, size_t byte) {
  const size_t at = std::min(byte == 0 ? 0 : byte - 1, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return std::to_string(line) + ":" + std::to_string(at - line_start + 1);
}

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a bool";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a double";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "binary data";
  }
}

[[noreturn]] void member_type_error(std::string_view key, const Json& v, const char* expected) {
  HSTU_THROW("JSON key \"", key, "\" is ", type_name(v), ", expected ", expected);
}

}  // namespace

Json parse(std::string_view text, const std::string& name) {
  std::vector<std::unordered_set<std::string>> keys;  // of each open object, innermost last
  const Json::parser_callback_t refuse_duplicates = [&](int, Json::parse_event_t event,
                                                        Json& parsed) {
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end) keys.pop_back();
    if (event == Json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      HSTU_CHECK(keys.back().insert(key).second, name, ": duplicate key \"", key, "\"");
    }
    return true;
  };
  try {
    return Json::parse(text, refuse_duplicates);
  } catch (const Json::parse_error& e) {
    HSTU_THROW(name, ":", position(text, e.byte), ": ", reason(e));
  } catch (const Json::exception& e) {  // e.g. a number beyond the double range
    HSTU_THROW(name, ": ", reason(e));
  }
}

Json parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HSTU_CHECK(in.good(), "cannot open ", path, ": ", std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  HSTU_CHECK(!in.bad(), "cannot read ", path, ": ", std::strerror(errno));
  return parse(text, path);
}

std::string dump(const Json& value, int indent) {
  try {
    return value.dump(indent);
  } catch (const Json::exception& e) {  // invalid UTF-8 in a string
    HSTU_THROW("cannot write JSON: ", reason(e));
  }
}

const Json& at(const Json& obj, std::string_view key) {
  HSTU_CHECK(obj.is_object(), "JSON value is ", type_name(obj), ", expected an object with key \"",
             key, "\"");
  const auto it = obj.find(key);
  HSTU_CHECK(it != obj.end(), "JSON object has no key \"", key, "\"");
  return *it;
}

int64_t int_at(const Json& obj, std::string_view key) {
  const Json& v = at(obj, key);
  if (!v.is_number_integer()) member_type_error(key, v, "an integer");
  HSTU_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t{INT64_MAX}, "JSON key \"",
             key, "\" holds ", v.get<uint64_t>(), ", beyond int64");
  return v.get<int64_t>();
}

double double_at(const Json& obj, std::string_view key) {
  const Json& v = at(obj, key);
  if (!v.is_number()) member_type_error(key, v, "a number");
  return v.get<double>();
}

std::string string_at(const Json& obj, std::string_view key) {
  const Json& v = at(obj, key);
  if (!v.is_string()) member_type_error(key, v, "a string");
  return v.get<std::string>();
}

const Json& array_at(const Json& obj, std::string_view key) {
  const Json& v = at(obj, key);
  if (!v.is_array()) member_type_error(key, v, "an array");
  return v;
}

}  // namespace hstu::json
