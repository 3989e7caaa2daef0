// gin.cpp — the gin-syntax parser: a hand-written recursive-descent reader over bytes.
//
// One Parser reads one file; the files of an include tree share a ParseState (bindings in
// order, macros, include stack). Macros are substituted only after the whole tree is read,
// because gin lets a macro be used before (or in another file than) its definition. File reading
// and macro substitution, with the limits on hostile input, live in gin_limits.cpp.
#include "config/gin.h"

#include <cctype>
#include <charconv>
#include <filesystem>
#include <map>
#include <string_view>
#include <system_error>

#include "config/gin_limits.h"
#include "core/error.h"
#include "core/utf8.h"

namespace hstu::gin {
namespace {

namespace fs = std::filesystem;

bool is_ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
  return is_ident_char(c) || c == '.' || c == '/';
}
bool is_digit(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) != 0;
}
bool is_quote(char c) {
  return c == '\'' || c == '"';
}

// True for "a", "a_1" (a Python identifier).
bool is_identifier(std::string_view s) {
  if (s.empty() || !is_ident_start(s[0])) return false;
  for (char c : s) {
    if (!is_ident_char(c)) return false;
  }
  return true;
}

// True for "a<sep>b<sep>c" where every part is an identifier ("a.b.c", "scope/inner").
bool is_path(std::string_view s, char sep) {
  for (;;) {
    const size_t at = s.find(sep);
    if (!is_identifier(s.substr(0, at))) return false;
    if (at == std::string_view::npos) return true;
    s.remove_prefix(at + 1);
  }
}

[[noreturn]] void error_at(const Location& loc, const std::string& msg) {
  HSTU_THROW(where(loc), ": ", msg);
}

// Everything the files of one include tree share.
struct ParseState {
  std::vector<Binding> bindings;
  std::map<std::string, Value> macros;     // NAME -> value; the last definition wins
  std::vector<std::string> include_stack;  // the files being read, outermost first
};

class Parser {
 public:
  // `single_line`: `text` is a lone value from a label such as "--set ..." (errors give columns).
  Parser(std::string_view text, std::string file, bool single_line)
      : text_(text), file_(std::move(file)), line_(single_line ? 0 : 1) {}

  // Reads statements until the end of the text.
  void parse_statements(ParseState& st) {
    for (;;) {
      skip_blank();
      if (at_end()) return;
      const Location start = here();
      const std::string word = peek_identifier();
      if ((word == "import" || word == "from") && is_inline_space(peek(word.size()))) {
        skip_to_line_end();  // Python module imports register configurables; hstu has none
        continue;
      }
      if (word == "include" && (is_inline_space(peek(7)) || is_quote(peek(7)))) {
        advance(7);
        skip_inline();
        if (!at_string()) fail("a quoted file name after 'include'");
        const Value name = parse_string_literals(false);
        expect_statement_end();
        include(name.s, start, st);
        continue;
      }
      const std::string key = take_name();
      if (key.empty()) fail("a binding `Class.field = value`, `MACRO = value` or `include '...'`");
      skip_inline();
      if (peek() != '=') fail(detail::cat("'=' after '", key, "'"));
      advance(1);
      skip_inline();
      if (at_line_end()) fail("a value after '='");
      Value value = parse_value(false);
      expect_statement_end();
      add_statement(key, start, std::move(value), st);
    }
  }

  // Reads the whole text as one value (surrounding blanks allowed).
  Value parse_lone_value() {
    skip_blank();
    if (at_end()) fail("a value");
    Value v = parse_value(true);
    skip_blank();
    if (!at_end()) fail("the end of the value");
    return v;
  }

 private:
  // ---- cursor ------------------------------------------------------------------------------
  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  void advance(size_t n) {
    for (size_t k = 0; k < n && !at_end(); ++k, ++pos_) {
      if (text_[pos_] == '\n' && line_ > 0) {
        ++line_;
        line_start_ = pos_ + 1;
      }
    }
  }
  Location here() const { return Location{file_, line_, static_cast<int>(pos_ - line_start_) + 1}; }
  static bool is_inline_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f'; }
  bool at_line_end() const { return at_end() || peek() == '\n' || peek() == '#'; }

  // Spaces and tabs only (a statement never continues on the next line outside brackets).
  void skip_inline() {
    while (is_inline_space(peek())) advance(1);
  }
  // Spaces, newlines and comments.
  void skip_blank() {
    for (;;) {
      if (is_inline_space(peek()) || peek() == '\n') {
        advance(1);
      } else if (peek() == '#') {
        skip_to_line_end();
      } else {
        return;
      }
    }
  }
  void skip_to_line_end() {
    while (!at_end() && peek() != '\n') advance(1);
  }
  void expect_statement_end() {
    skip_inline();
    if (peek() == '#') skip_to_line_end();
    if (!at_end() && peek() != '\n') fail("the end of the line after the value");
  }

  std::string peek_identifier() const {
    size_t n = 0;
    while (is_ident_char(peek(n))) ++n;
    return std::string(text_.substr(pos_, n));
  }
  // A run of name characters: letters, digits, '_', '.', '/'.
  std::string take_name() {
    const size_t start = pos_;
    while (is_name_char(peek())) advance(1);
    return std::string(text_.substr(start, pos_ - start));
  }

  // What the cursor is on, for "found ..." in errors.
  std::string found() const {
    if (at_end()) return "the end of the file";
    if (peek() == '\n') return "the end of the line";
    size_t n = 0;
    while (pos_ + n < text_.size() && n < 24 && !std::isspace(static_cast<unsigned char>(peek(n))))
      ++n;
    return detail::cat("'", text_.substr(pos_, n), "'");
  }
  [[noreturn]] void fail(const std::string& expected) const {
    error_at(here(), detail::cat("syntax error: expected ", expected, ", found ", found()));
  }

  // ---- statements --------------------------------------------------------------------------
  void add_statement(const std::string& key, const Location& at, Value value, ParseState& st) {
    const size_t slash = key.rfind('/');
    const std::string scope = slash == std::string::npos ? "" : key.substr(0, slash);
    const std::string rest = slash == std::string::npos ? key : key.substr(slash + 1);
    if (rest.find('.') == std::string::npos) {
      if (!scope.empty() || !is_identifier(rest)) {
        error_at(at, detail::cat("syntax error: malformed macro name '", key,
                                 "' (expected NAME = value or [scope/]Class.field = value)"));
      }
      st.macros[rest] = std::move(value);
      return;
    }
    if ((!scope.empty() && !is_path(scope, '/')) || !is_path(rest, '.')) {
      error_at(at, detail::cat("syntax error: malformed key '", key,
                               "' (expected [scope/]Class.field = value)"));
    }
    const size_t dot = rest.rfind('.');
    st.bindings.push_back(
        Binding{scope, rest.substr(0, dot), rest.substr(dot + 1), std::move(value), at});
  }

  void include(const std::string& name, const Location& at, ParseState& st) const {
    fs::path path(name);
    if (path.is_relative()) path = fs::path(file_).parent_path() / path;
    path = path.lexically_normal();
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      error_at(at, detail::cat("cannot read included file '", name, "' (looked for ", path.string(),
                               ")"));
    }
    std::string text;
    try {
      text = read_config_file(path.string(), "included file");
    } catch (const Error& e) {
      error_at(at, e.what());
    }
    const std::string canonical = fs::weakly_canonical(path, ec).string();
    for (const std::string& open : st.include_stack) {
      if (open == canonical)
        error_at(at, detail::cat("include cycle: '", name, "' is already open"));
    }
    st.include_stack.push_back(canonical);
    Parser(text, path.string(), false).parse_statements(st);
    st.include_stack.pop_back();
  }

  // ---- values ------------------------------------------------------------------------------
  // `nested`: inside brackets, where newlines and comments are blanks.
  Value parse_value(bool nested) {
    const char c = peek();
    if (c == '[' || c == '(' || c == '{') return parse_collection();
    if (c == '@' || c == '%') return parse_name_value();
    if (at_string()) return parse_string_literals(nested);
    if (is_digit(c) || c == '-' || c == '+' || (c == '.' && is_digit(peek(1)))) {
      return parse_number();
    }
    if (is_ident_start(c)) {
      const Location loc = here();
      const std::string word = peek_identifier();
      Value v;
      v.loc = loc;
      if (word == "True" || word == "False") {
        v.kind = Value::Kind::kBool;
        v.b = word == "True";
      } else if (word != "None") {
        fail("a value (strings need quotes; True/False/None are capitalised)");
      }
      advance(word.size());
      return v;
    }
    fail("a value (number, 'string', True/False/None, [list], (tuple), {dict}, @Ref() or %MACRO)");
  }

  // [a, b], (a, b) or {k: v}; newlines, comments and a trailing comma are allowed inside.
  Value parse_collection() {
    const Location open = here();
    if (depth_ >= kMaxNestingDepth) {
      error_at(open, detail::cat("value nested more than ", kMaxNestingDepth, " levels deep"));
    }
    ++depth_;
    const char opener = peek();
    const char closer = opener == '[' ? ']' : opener == '(' ? ')' : '}';
    Value v;
    v.loc = open;
    v.kind = opener == '['   ? Value::Kind::kList
             : opener == '(' ? Value::Kind::kTuple
                             : Value::Kind::kDict;
    advance(1);
    bool trailing_comma = false;
    const std::string opened_at =
        detail::cat("the '", opener, "' opened at ",
                    open.line > 0 ? detail::cat(open.line, ":") : "column ", open.col);
    for (;;) {
      skip_blank();
      if (peek() == closer) break;
      if (at_end()) fail(detail::cat("'", closer, "' to close ", opened_at));
      if (v.kind == Value::Kind::kDict) {
        v.keys.push_back(parse_value(true));
        skip_blank();
        if (peek() != ':') fail("':' after the dict key");
        advance(1);
        skip_blank();
      }
      v.items.push_back(parse_value(true));
      skip_blank();
      trailing_comma = peek() == ',';
      if (trailing_comma) {
        advance(1);
      } else if (peek() != closer) {
        fail(detail::cat("',' or '", closer, "' to continue ", opened_at));
      }
    }
    advance(1);
    --depth_;
    // "(x)" is a parenthesised value, "(x,)" a one-element tuple.
    if (v.kind == Value::Kind::kTuple && v.items.size() == 1 && !trailing_comma) {
      return std::move(v.items[0]);
    }
    return v;
  }

  // @[scope/]Name[()] or %[scope/]NAME.
  Value parse_name_value() {
    Value v;
    v.loc = here();
    const bool is_ref = peek() == '@';
    v.kind = is_ref ? Value::Kind::kReference : Value::Kind::kMacro;
    advance(1);
    const std::string name = take_name();
    const size_t slash = name.rfind('/');
    v.s = slash == std::string::npos ? name : name.substr(slash + 1);
    v.scope = slash == std::string::npos ? "" : name.substr(0, slash);
    if (!is_path(v.s, '.') || (!v.scope.empty() && !is_path(v.scope, '/'))) {
      error_at(v.loc, detail::cat("syntax error: expected ",
                                  is_ref ? "@[scope/]Name() after '@'" : "a macro name after '%'",
                                  ", found '", to_string(v), "'"));
    }
    if (is_ref && peek() == '(') {
      advance(1);
      skip_blank();
      if (peek() != ')') fail("')' (references take no arguments)");
      advance(1);
      v.call = true;
    }
    return v;
  }

  bool at_string() const {
    const char c = peek();
    if (is_quote(c)) return true;
    return (c == 'r' || c == 'R' || c == 'u' || c == 'U' || c == 'b' || c == 'B') &&
           is_quote(peek(1));
  }

  // One or more adjacent string literals, concatenated as in Python.
  Value parse_string_literals(bool nested) {
    Value v;
    v.kind = Value::Kind::kString;
    v.loc = here();
    for (;;) {
      v.s += parse_string_literal();
      const size_t save_pos = pos_, save_line_start = line_start_;
      const int save_line = line_;
      nested ? skip_blank() : skip_inline();
      if (!at_string()) {
        pos_ = save_pos;
        line_start_ = save_line_start;
        line_ = save_line;
        return v;
      }
    }
  }

  std::string parse_string_literal() {
    const Location start = here();
    bool raw = false;
    if (!is_quote(peek())) {
      raw = peek() == 'r' || peek() == 'R';
      advance(1);
    }
    const char q = peek();
    const bool triple = peek(1) == q && peek(2) == q;
    advance(triple ? 3 : 1);
    std::string out;
    for (;;) {
      if (at_end() || (!triple && peek() == '\n')) {
        error_at(start, "syntax error: unterminated string (a closing quote is missing)");
      }
      const char c = peek();
      if (c == q && (!triple || (peek(1) == q && peek(2) == q))) {
        advance(triple ? 3 : 1);
        return out;
      }
      if (c != '\\') {
        out += c;
        advance(1);
      } else if (raw) {
        out += c;
        out += peek(1);
        advance(2);
      } else {
        parse_escape(out);
      }
    }
  }

  // Python's escapes; an unknown one keeps its backslash, as Python does.
  void parse_escape(std::string& out) {
    const Location at = here();
    const char e = peek(1);
    advance(2);
    auto hex = [&](int digits) {
      uint32_t cp = 0;
      for (int k = 0; k < digits; ++k) {
        const char h = peek();
        if (!std::isxdigit(static_cast<unsigned char>(h))) {
          error_at(at, detail::cat("syntax error: expected ", digits,
                                   " hex digits in the escape \\", e));
        }
        cp = cp * 16 + static_cast<uint32_t>(is_digit(h) ? h - '0' : (std::tolower(h) - 'a' + 10));
        advance(1);
      }
      return cp;
    };
    switch (e) {
      case '\n':
        break;  // line continuation inside the string
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '\\':
      case '\'':
      case '"':
        out += e;
        break;
      case 'x':
        out += static_cast<char>(hex(2));
        break;
      case 'u':
        append_utf8(out, hex(4));
        break;
      case 'U':
        append_utf8(out, hex(8));
        break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && peek() >= '0' && peek() <= '7'; ++k) {
            cp = cp * 8 + static_cast<uint32_t>(peek() - '0');
            advance(1);
          }
          out += static_cast<char>(cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }

  // 12, -3, 0x1F, 1.5, -1e-3, .5
  Value parse_number() {
    Value v;
    v.loc = here();
    const size_t start = pos_;
    if (peek() == '+' || peek() == '-') advance(1);
    const size_t body = pos_;
    bool hex = false, is_float = false;
    if (peek() == '0' && (peek(1) == 'x' || peek(1) == 'X')) {
      hex = true;
      advance(2);
      while (std::isxdigit(static_cast<unsigned char>(peek()))) advance(1);
    } else {
      while (is_digit(peek())) advance(1);
      if (peek() == '.') {
        is_float = true;
        advance(1);
        while (is_digit(peek())) advance(1);
      }
      if ((peek() == 'e' || peek() == 'E') &&
          (is_digit(peek(1)) || ((peek(1) == '+' || peek(1) == '-') && is_digit(peek(2))))) {
        is_float = true;
        advance(2);
        while (is_digit(peek())) advance(1);
      }
    }
    const std::string_view token = text_.substr(start, pos_ - start);
    const bool has_digit = hex ? pos_ - body > 2 : token.find_first_of("0123456789") != token.npos;
    if (!has_digit || is_name_char(peek())) {
      while (is_name_char(peek())) advance(1);
      error_at(v.loc, detail::cat("syntax error: malformed number '",
                                  text_.substr(start, pos_ - start), "'"));
    }
    std::string digits(token[0] == '+' ? token.substr(1) : token);
    if (hex) digits.erase(digits[0] == '-' ? 1 : 0, 2);
    const char* first = digits.data();
    const char* last = first + digits.size();
    std::from_chars_result r;
    if (is_float) {
      v.kind = Value::Kind::kFloat;
      r = std::from_chars(first, last, v.f);
    } else {
      v.kind = Value::Kind::kInt;
      r = std::from_chars(first, last, v.i, hex ? 16 : 10);
    }
    if (r.ec != std::errc() || r.ptr != last) {
      error_at(v.loc, detail::cat("number '", token, "' is out of range"));
    }
    return v;
  }

  std::string_view text_;
  std::string file_;
  size_t pos_ = 0;
  int line_;  // 0 for single-line labels
  size_t line_start_ = 0;
  int depth_ = 0;  // collections open around the cursor
};

std::vector<Binding> parse_tree(const std::string& text, const std::string& file) {
  ParseState st;
  std::error_code ec;
  st.include_stack.push_back(fs::weakly_canonical(fs::path(file), ec).string());
  Parser(text, file, false).parse_statements(st);
  MacroExpander expander(st.macros);
  for (Binding& b : st.bindings) expander.substitute(b.value);
  return std::move(st.bindings);
}

std::string format_float(double d) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // keep it a float ('n': inf/nan)
  return s;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          constexpr char kHex[] = "0123456789abcdef";
          out += "\\x";
          out += kHex[(c >> 4) & 0xF];
          out += kHex[c & 0xF];
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::string Location::str() const {
  return line == 0 ? file : detail::cat(file, ":", line);
}

std::string Binding::key() const {
  return detail::cat(scope, scope.empty() ? "" : "/", selector, ".", field);
}

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return "a bool";
    case Value::Kind::kInt:
      return "an int";
    case Value::Kind::kFloat:
      return "a float";
    case Value::Kind::kString:
      return "a string";
    case Value::Kind::kList:
      return "a list";
    case Value::Kind::kTuple:
      return "a tuple";
    case Value::Kind::kDict:
      return "a dict";
    case Value::Kind::kReference:
      return "a reference";
    case Value::Kind::kMacro:
      return "a macro";
  }
  return "a value";
}

std::string to_string(const Value& value) {
  auto join = [](const std::vector<Value>& items) {
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) out += (k ? ", " : "") + to_string(items[k]);
    return out;
  };
  const std::string scoped = detail::cat(value.scope, value.scope.empty() ? "" : "/", value.s);
  switch (value.kind) {
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return value.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(value.i);
    case Value::Kind::kFloat:
      return format_float(value.f);
    case Value::Kind::kString:
      return quote(value.s);
    case Value::Kind::kList:
      return detail::cat("[", join(value.items), "]");
    case Value::Kind::kTuple:
      return detail::cat("(", join(value.items), value.items.size() == 1 ? ",)" : ")");
    case Value::Kind::kDict: {
      std::string out = "{";
      for (size_t k = 0; k < value.items.size(); ++k) {
        out +=
            detail::cat(k ? ", " : "", to_string(value.keys[k]), ": ", to_string(value.items[k]));
      }
      return out + "}";
    }
    case Value::Kind::kReference:
      return detail::cat("@", scoped, value.call ? "()" : "");
    case Value::Kind::kMacro:
      return detail::cat("%", scoped);
  }
  return "";
}

std::vector<Binding> parse_file(const std::string& path) {
  return parse_tree(read_config_file(path, "config file"), path);
}

std::vector<Binding> parse_text(const std::string& text, const std::string& display_name) {
  return parse_tree(text, display_name);
}

Value parse_value(const std::string& text, const std::string& display_name) {
  Value v = Parser(text, display_name, true).parse_lone_value();
  const std::map<std::string, Value> no_macros;
  MacroExpander(no_macros).substitute(v);
  return v;
}

}  // namespace hstu::gin
