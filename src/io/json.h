// json.h — JSON for hstu's own files (trainer state, metrics.jsonl, safetensors headers,
// source.json, Chrome traces): nlohmann/json's ordered_json plus the few helpers that turn its
// errors into hstu::Error messages naming the file, the position or the key.
//
// Json keeps objects in insertion order (files read the way they were written), integers as
// exact 64-bit integers (written without a fraction; a non-negative one parses as nlohmann's
// unsigned kind, which compares and converts like any integer) and doubles in a short round-trip
// form (Grisu2) that always carries a '.' or an exponent, so every number keeps its kind and its
// bits through dump -> parse. A non-finite double has no JSON form and is written as null.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace hstu {

using Json = nlohmann::ordered_json;

namespace json {

// Parses one JSON document (RFC 8259: no comments, no trailing commas, no duplicate keys).
// Syntax errors read "<name>:<line>:<column>: <what>", 1-based, at the byte where parsing
// stopped; a duplicate key or a number beyond the double range "<name>: <what>".
Json parse(std::string_view text, const std::string& name = "<json>");
// Reads and parses a file; errors name the path.
Json parse_file(const std::string& path);
// indent < 0: compact, one line; indent >= 0: pretty, members on their own lines. Strings must
// be valid UTF-8 (an error otherwise).
std::string dump(const Json& value, int indent = -1);

// Members of an object. Each throws hstu::Error naming the key when `obj` is not an object or
// lacks the key, or when the member has another type ("JSON key \"step\" is a string, expected
// an integer").
const Json& at(const Json& obj, std::string_view key);
int64_t int_at(const Json& obj, std::string_view key);    // an integer in int64 (2.0 is not)
double double_at(const Json& obj, std::string_view key);  // any number
std::string string_at(const Json& obj, std::string_view key);
const Json& array_at(const Json& obj, std::string_view key);

}  // namespace json
}  // namespace hstu
