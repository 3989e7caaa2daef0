// gin.h — a parser for the gin-config syntax of recsys-examples' and Meta's .gin files.
//
// The parser knows nothing about hstu's classes: it turns text into a flat, ordered list of
// `[scope/]Class.field = value` bindings, each remembering the file and line it came from, with
// `include`d files inlined and `%MACRO`s substituted. What the names mean (which classes exist,
// types, ranges) is the schema's job (schema.h); keeping the two apart lets every syntax error
// name file:line:col before any field is looked at.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hstu::gin {

// Where a binding or value was written.
struct Location {
  std::string file;  // path as given, or a label such as "--set NetworkArgs.num_layers=4"
  int line = 0;      // 1-based; 0 = the label has no lines
  int col = 0;       // 1-based byte column; 0 = unknown

  // "file:line", or just "file" when line == 0.
  std::string str() const;
};

// One gin value (a tree for lists, tuples and dicts).
struct Value {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kReference, kMacro };
  Kind kind = Kind::kNone;
  bool b = false;            // kBool
  int64_t i = 0;             // kInt
  double f = 0;              // kFloat
  std::string s;             // kString: the text; kReference / kMacro: the name without scope
  std::string scope;         // kReference / kMacro: "a/b" of "@a/b/Name()", "" if none
  bool call = false;         // kReference: written "@Name()" (an instance), not "@Name"
  std::vector<Value> items;  // kList / kTuple: the elements; kDict: the values
  std::vector<Value> keys;   // kDict: the keys, in the order of `items`
  Location loc;              // where the value starts
};

// "an int", "a string", ... for error messages.
const char* kind_name(Value::Kind kind);

// The value in gin syntax; floats are written so that they re-parse to the same double.
std::string to_string(const Value& value);

// `[scope/]selector.field = value`.
struct Binding {
  std::string scope;     // "" or "a/b"
  std::string selector;  // the configurable, e.g. "NetworkArgs" (may be a dotted module path)
  std::string field;     // e.g. "num_layers"
  Value value;           // macros already substituted
  Location loc;          // where the binding's key starts

  // "scope/selector.field" (without "scope/" when unscoped).
  std::string key() const;
};

// Parses a .gin file and everything it includes (`include 'x.gin'`, relative to the including
// file). `import ...` / `from ... import ...` lines are accepted and skipped. Throws hstu::Error
// naming the path when the file (or an include) cannot be read or is not a regular file of bounded
// size, and file:line:col for syntax errors and for values past the limits of gin_limits.h
// (nesting depth, macro expansion size).
std::vector<Binding> parse_file(const std::string& path);

// Same for text held in memory; `display_name` names it in errors and its folder anchors includes.
std::vector<Binding> parse_text(const std::string& text, const std::string& display_name);

// Parses a single value (the right-hand side of a binding); errors name `display_name` and the
// column. Macros are not available here.
Value parse_value(const std::string& text, const std::string& display_name);

}  // namespace hstu::gin
