// json.cpp — JSON value access, writer (compact and pretty) and strict recursive-descent parser.
#include "train/json.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <unordered_set>

#include "core/utf8.h"

namespace hstu::json {

const char* type_name(Type t) {
  switch (t) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return "a bool";
    case Type::kInt:
      return "an integer";
    case Type::kDouble:
      return "a double";
    case Type::kString:
      return "a string";
    case Type::kArray:
      return "an array";
    case Type::kObject:
      return "an object";
  }
  return "?";
}

namespace {

[[noreturn]] void type_error(Type actual, const char* expected) {
  HSTU_THROW("JSON value is ", type_name(actual), ", expected ", expected);
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is invalid (overlong forms,
// surrogates and code points above U+10FFFF are invalid).
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

// ---- writer ------------------------------------------------------------------------------------

void write_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = utf8_sequence_length(s, i);
      HSTU_CHECK(n != 0, "JSON string has invalid UTF-8 at byte ", i);
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

void write_double(std::string& out, double d) {
  if (!std::isfinite(d)) {
    out += "null";
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d);  // shortest round-trip form
  const std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
  out += s;
  if (s.find_first_of(".e") == std::string_view::npos) out += ".0";  // stays a double
}

void newline(std::string& out, int indent, int depth) {
  out += '\n';
  out.append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
}

void write_value(std::string& out, const Value& v, int indent, int depth) {
  switch (v.type()) {
    case Type::kNull:
      out += "null";
      break;
    case Type::kBool:
      out += v.as_bool() ? "true" : "false";
      break;
    case Type::kInt: {
      char buf[24];
      const auto r = std::to_chars(buf, buf + sizeof(buf), v.as_int());
      out.append(buf, r.ptr);
      break;
    }
    case Type::kDouble:
      write_double(out, v.as_double());
      break;
    case Type::kString:
      write_string(out, v.as_string());
      break;
    case Type::kArray: {
      const Array& a = v.as_array();
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += ',';
        if (indent >= 0) newline(out, indent, depth + 1);
        write_value(out, a[i], indent, depth + 1);
      }
      if (indent >= 0 && !a.empty()) newline(out, indent, depth);
      out += ']';
      break;
    }
    case Type::kObject: {
      const Object& o = v.as_object();
      out += '{';
      for (size_t i = 0; i < o.size(); ++i) {
        if (i) out += ',';
        if (indent >= 0) newline(out, indent, depth + 1);
        write_string(out, o[i].first);
        out += indent >= 0 ? ": " : ":";
        write_value(out, o[i].second, indent, depth + 1);
      }
      if (indent >= 0 && !o.empty()) newline(out, indent, depth);
      out += '}';
      break;
    }
  }
}

// ---- parser ------------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  Value document() {
    skip_ws();
    Value v = value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected content after the JSON value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 512;

  [[noreturn]] void fail(const std::string& msg) const { fail_at(pos_, msg); }
  [[noreturn]] void fail_at(size_t at, const std::string& msg) const {
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    HSTU_THROW(name_, ":", line, ":", at - line_start + 1, ": ", msg);
  }

  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  void skip_ws() {
    while (!at_end() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'" + found());
    ++pos_;
  }
  std::string found() const {
    if (at_end()) return ", found end of input";
    const auto c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x20 && c < 0x7f) return std::string(", found '") + static_cast<char>(c) + "'";
    return ", found byte " + std::to_string(c);
  }

  Value value(int depth) {
    if (depth > kMaxDepth) fail("JSON nested deeper than " + std::to_string(kMaxDepth));
    switch (peek()) {
      case '{':
        return object(depth);
      case '[':
        return array(depth);
      case '"':
        return Value(string());
      case 't':
        literal("true");
        return Value(true);
      case 'f':
        literal("false");
        return Value(false);
      case 'n':
        literal("null");
        return Value();
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return number();
        fail("expected a JSON value" + found());
    }
  }

  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word)
      fail("invalid literal, expected '" + std::string(word) + "'");
    pos_ += word.size();
  }

  Value object(int depth) {
    ++pos_;  // '{'
    Object members;
    std::unordered_set<std::string> keys;
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return Value(std::move(members));
    }
    while (true) {
      skip_ws();
      if (peek() != '"') fail("expected a string key" + found());
      const size_t key_pos = pos_;
      std::string key = string();
      if (!keys.insert(key).second) fail_at(key_pos, "duplicate key \"" + key + "\"");
      skip_ws();
      expect(':');
      skip_ws();
      Value v = value(depth + 1);
      members.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return Value(std::move(members));
      }
      fail("expected ',' or '}' in object" + found());
    }
  }

  Value array(int depth) {
    ++pos_;  // '['
    Array items;
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return Value(std::move(items));
    }
    while (true) {
      skip_ws();
      items.push_back(value(depth + 1));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return Value(std::move(items));
      }
      fail("expected ',' or ']' in array" + found());
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<uint32_t>(c - 'A' + 10);
      else
        fail_at(pos_ - 1, "invalid hex digit in \\u escape");
    }
    return v;
  }

  std::string string() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("control character in string (escape it)");
      if (c >= 0x80) {
        const size_t n = utf8_sequence_length(s_, pos_);
        if (n == 0) fail("invalid UTF-8 in string");
        out.append(s_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      ++pos_;
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (at_end()) fail("unterminated string");
      const size_t esc_pos = pos_ - 1;
      switch (s_[pos_++]) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(esc_pos, "lone low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(pos_, 2) != "\\u") fail_at(esc_pos, "high surrogate without a low one");
            pos_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail_at(esc_pos, "high surrogate without a low one");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail_at(esc_pos, "invalid escape in string");
      }
    }
  }

  Value number() {
    const size_t start = pos_;
    const auto digit = [&] { return !at_end() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (digit()) fail("leading zero in number");
    } else if (digit()) {
      while (digit()) ++pos_;
    } else {
      fail("invalid number");
    }
    bool integral = true;
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!digit()) fail("expected a digit after '.'");
      while (digit()) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!digit()) fail("expected a digit in exponent");
      while (digit()) ++pos_;
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + pos_;
    if (integral) {
      int64_t i = 0;
      const auto r = std::from_chars(first, last, i);
      if (r.ec == std::errc() && r.ptr == last) return Value(i);
      // Integers beyond int64 fall through to double.
    }
    double d = 0;
    const auto r = std::from_chars(first, last, d);
    if (r.ec == std::errc::result_out_of_range) fail_at(start, "number out of double range");
    if (r.ec != std::errc() || r.ptr != last) fail_at(start, "invalid number");
    return Value(d);
  }

  std::string_view s_;
  const std::string& name_;
  size_t pos_ = 0;
};

}  // namespace

Value Value::object(std::initializer_list<std::pair<std::string, Value>> members) {
  Value v{Object{}};
  for (const auto& [k, m] : members) {
    HSTU_CHECK(v.find(k) == nullptr, "JSON object built with duplicate key \"", k, "\"");
    v.as_object().emplace_back(k, m);
  }
  return v;
}

bool Value::as_bool() const {
  if (!is_bool()) type_error(type(), "a bool");
  return std::get<bool>(v_);
}

int64_t Value::as_int() const {
  if (!is_int()) type_error(type(), "an integer");
  return std::get<int64_t>(v_);
}

double Value::as_double() const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(v_));
  if (type() != Type::kDouble) type_error(type(), "a number");
  return std::get<double>(v_);
}

const std::string& Value::as_string() const {
  if (!is_string()) type_error(type(), "a string");
  return std::get<std::string>(v_);
}

const Array& Value::as_array() const {
  if (!is_array()) type_error(type(), "an array");
  return std::get<Array>(v_);
}

Array& Value::as_array() {
  if (!is_array()) type_error(type(), "an array");
  return std::get<Array>(v_);
}

const Object& Value::as_object() const {
  if (!is_object()) type_error(type(), "an object");
  return std::get<Object>(v_);
}

Object& Value::as_object() {
  if (!is_object()) type_error(type(), "an object");
  return std::get<Object>(v_);
}

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : as_object()) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Value::find(std::string_view key) {
  return const_cast<Value*>(static_cast<const Value*>(this)->find(key));
}

const Value& Value::at(std::string_view key) const {
  const Value* v = find(key);
  HSTU_CHECK(v != nullptr, "JSON object has no key \"", key, "\"");
  return *v;
}

Value& Value::operator[](std::string_view key) {
  if (is_null()) v_ = Object{};
  if (Value* v = find(key)) return *v;
  return as_object().emplace_back(std::string(key), Value()).second;
}

const Value& Value::at(size_t i) const {
  const Array& a = as_array();
  HSTU_CHECK(i < a.size(), "JSON array index ", i, " out of ", a.size(), " elements");
  return a[i];
}

void Value::push_back(Value v) {
  if (is_null()) v_ = Array{};
  as_array().push_back(std::move(v));
}

size_t Value::size() const {
  if (is_array()) return as_array().size();
  if (is_object()) return as_object().size();
  type_error(type(), "an array or an object");
}

std::string Value::dump(int indent) const {
  std::string out;
  write_value(out, *this, indent, 0);
  return out;
}

Value parse(std::string_view text, const std::string& name) {
  return Parser(text, name).document();
}

Value parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HSTU_CHECK(in.good(), "cannot open ", path, ": ", std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  HSTU_CHECK(!in.bad(), "cannot read ", path, ": ", std::strerror(errno));
  return parse(text, path);
}

}  // namespace hstu::json
