// json.h — a small JSON value, writer and strict parser for hstu's own files (trainer state,
// metrics.jsonl, safetensors headers, source.json, Chrome traces).
//
// Numbers keep their kind: a number written without fraction or exponent that fits int64 parses
// as an exact int64, and doubles are written in shortest round-trip form that always carries a
// '.' or an exponent, so every value survives dump → parse with its type and its bits intact.
// Objects keep insertion order (a vector of members), so files read the way they were written.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"

namespace hstu::json {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion order, unique keys

enum class Type : uint8_t { kNull, kBool, kInt, kDouble, kString, kArray, kObject };
const char* type_name(Type t);

class Value {
 public:
  Value() = default;  // null
  Value(std::nullptr_t) {}
  Value(bool b) : v_(b) {}
  template <std::integral T>
  requires(!std::same_as<T, bool>) Value(T i) {
    if constexpr (std::unsigned_integral<T> && sizeof(T) >= sizeof(int64_t)) {
      HSTU_CHECK(i <= static_cast<T>(INT64_MAX), "JSON integer ", i, " exceeds int64");
    }
    v_ = static_cast<int64_t>(i);
  }
  template <std::floating_point T>
  Value(T d) : v_(static_cast<double>(d)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(Array a) : v_(std::move(a)) {}
  Value(Object o) : v_(std::move(o)) {}

  static Value array(std::initializer_list<Value> items = {}) { return Value(Array(items)); }
  // Throws on a repeated key.
  static Value object(std::initializer_list<std::pair<std::string, Value>> members = {});

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_null() const { return type() == Type::kNull; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_int() const { return type() == Type::kInt; }
  bool is_number() const { return type() == Type::kInt || type() == Type::kDouble; }
  bool is_string() const { return type() == Type::kString; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_object() const { return type() == Type::kObject; }

  // Typed access; each throws naming the actual and the expected type.
  bool as_bool() const;
  int64_t as_int() const;    // integers only (1.0 is a double)
  double as_double() const;  // any number
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object members: find returns nullptr when absent; at throws naming the key.
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  const Value& at(std::string_view key) const;
  // Inserts null when absent (a null value first becomes an empty object).
  Value& operator[](std::string_view key);
  // Array elements.
  const Value& at(size_t i) const;
  void push_back(Value v);  // a null value first becomes an empty array
  size_t size() const;      // elements of an array, members of an object

  // indent < 0: compact, one line; indent >= 0: pretty, members on their own lines.
  // Non-finite doubles are written as null; strings must be valid UTF-8.
  std::string dump(int indent = -1) const;

  bool operator==(const Value&) const = default;

 private:
  std::variant<std::monostate, bool, int64_t, double, std::string, Array, Object> v_;
};

// Parses one JSON document (RFC 8259, no extensions). Errors read "<name>:<line>:<col>: ..."
// with 1-based line and byte column.
Value parse(std::string_view text, const std::string& name = "<json>");
// Reads and parses a file; errors name the path.
Value parse_file(const std::string& path);

}  // namespace hstu::json
