#include "exclude_rule.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace hlp::sweep {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
         c == '+';
}

std::optional<double> parse_number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

// Recursive descent over a token list: expr := term (('+'|'-') term)*,
// term := factor (('*'|'/'|'%') factor)*, factor := number | name | '(' expr ')' | '-' factor.
class ExpressionParser {
 public:
  ExpressionParser(const std::string& text, const OptionLookup& lookup, const std::string& context)
      : lookup_(lookup), context_(context) {
    for (size_t i = 0; i < text.size();) {
      char c = text[i];
      if (std::isspace(static_cast<unsigned char>(c))) { ++i; continue; }
      // Between words, + and - are operators; inside a word (seq-len) they belong to the word.
      if (std::string("+-*/%()").find(c) != std::string::npos) {
        tokens_.push_back(std::string(1, c));
        ++i;
        continue;
      }
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) ||
                                 text[j] == '_' || text[j] == '.' ||
                                 ((text[j] == '-' || text[j] == '+') && j > i &&
                                  j + 1 < text.size() &&
                                  std::isalnum(static_cast<unsigned char>(text[j + 1])))))
        ++j;
      if (j == i) fail("unexpected character '", std::string(1, c), "'");
      tokens_.push_back(text.substr(i, j - i));
      i = j;
    }
  }

  double parse_all() {
    if (tokens_.empty()) fail("empty expression");
    double v = expr();
    if (pos_ != tokens_.size()) fail("unexpected '", tokens_[pos_], "'");
    return v;
  }

 private:
  template <typename... Parts>
  [[noreturn]] void fail(const Parts&... parts) {
    throw user_error(context_, ": ", parts...);
  }
  bool accept(const char* t) {
    if (pos_ < tokens_.size() && tokens_[pos_] == t) { ++pos_; return true; }
    return false;
  }
  double expr() {
    double v = term();
    for (;;) {
      if (accept("+")) v += term();
      else if (accept("-")) v -= term();
      else return v;
    }
  }
  double term() {
    double v = factor();
    for (;;) {
      if (accept("*")) { v *= factor(); continue; }
      bool div = accept("/"), mod = !div && accept("%");
      if (!div && !mod) return v;
      double d = factor();
      if (d == 0) fail("division by zero");
      v = div ? v / d : std::fmod(v, d);
    }
  }
  double factor() {
    if (pos_ >= tokens_.size()) fail("expression ends too early");
    // Each '(' and unary '-' recurses: a hostile file must not exhaust the stack.
    if (++depth_ > kMaxDepth) fail("nested more than ", kMaxDepth, " deep");
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    if (accept("(")) {
      double v = expr();
      if (!accept(")")) fail("missing ')'");
      return v;
    }
    if (accept("-")) return -factor();
    const std::string word = tokens_[pos_++];
    if (auto number = parse_number(word)) return *number;
    if (!std::isalpha(static_cast<unsigned char>(word[0]))) fail("'", word, "' is not a number or a name");
    std::optional<std::string> value = lookup_(word);
    if (!value) fail("'", word, "' is not an option of this sweep (neither fixed nor swept)");
    auto number = parse_number(*value);
    if (!number) fail("'", word, "' has the non-numeric value '", *value, "'");
    return *number;
  }

  static constexpr int kMaxDepth = 100;
  std::vector<std::string> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  const OptionLookup& lookup_;
  std::string context_;
};

bool compare(double a, const std::string& op, double b) {
  if (op == "=" || op == "==") return a == b;
  if (op == "!=") return a != b;
  if (op == "<") return a < b;
  if (op == "<=") return a <= b;
  if (op == ">") return a > b;
  return a >= b;  // ">="
}

bool is_plain_name(const std::string& s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  return true;
}

// "a|b|c" of words without arithmetic -> the words; otherwise empty.
std::vector<std::string> value_list(const std::string& rhs) {
  std::vector<std::string> values;
  if (rhs.find_first_of("*/%() \t") != std::string::npos) return {};
  size_t start = 0;
  for (;;) {
    size_t bar = rhs.find('|', start);
    std::string v = trim(rhs.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
    if (v.empty()) return {};
    for (char c : v)
      if (!is_word_char(c)) return {};
    values.push_back(v);
    if (bar == std::string::npos) return values;
    start = bar + 1;
  }
}

bool values_equal(const std::string& a, const std::string& b) {
  auto na = parse_number(a), nb = parse_number(b);
  if (na && nb) return *na == *nb;
  return a == b;
}

}  // namespace

double evaluate_expression(const std::string& expr, const OptionLookup& lookup,
                           const std::string& context) {
  return ExpressionParser(expr, lookup, context).parse_all();
}

ExcludeRule::ExcludeRule(const std::string& text, const std::set<std::string>& known_names)
    : text_(trim(text)) {
  const std::string context = "exclude rule '" + text_ + "'";
  if (text_.empty()) throw user_error("empty exclude rule; write e.g. 'exclude = strategy=single & ranks!=1'");
  // Check every name against the sweep's options by evaluating with placeholder values.
  OptionLookup check = [&](const std::string& name) -> std::optional<std::string> {
    if (known_names.count(name)) return std::string("1");
    return std::nullopt;
  };
  size_t start = 0;
  for (;;) {
    size_t amp = text_.find('&', start);
    std::string clause_text = trim(text_.substr(start, amp == std::string::npos ? std::string::npos : amp - start));
    if (clause_text.empty()) throw user_error(context, ": empty clause around '&'");
    // The comparison operator: the first of != <= >= == < > = in the clause.
    size_t op_pos = clause_text.find_first_of("!<>=");
    if (op_pos == std::string::npos)
      throw user_error(context, ": clause '", clause_text, "' has no comparison (= != < <= > >=)");
    std::string op(1, clause_text[op_pos]);
    if (op_pos + 1 < clause_text.size() && clause_text[op_pos + 1] == '=') op += '=';
    if (op == "!")
      throw user_error(context, ": clause '", clause_text, "': '!' must be followed by '='");
    Clause clause;
    clause.op = op;
    std::string lhs = trim(clause_text.substr(0, op_pos));
    std::string rhs = trim(clause_text.substr(op_pos + op.size()));
    if (lhs.empty() || rhs.empty())
      throw user_error(context, ": clause '", clause_text, "' needs something on both sides of '", op, "'");
    std::vector<std::string> values = value_list(rhs);
    if ((op == "=" || op == "==" || op == "!=") && is_plain_name(lhs) && !values.empty()) {
      if (!known_names.count(lhs))
        throw user_error(context, ": '", lhs, "' is not an option of this sweep (neither fixed nor swept)");
      clause.value_match = true;
      clause.name = lhs;
      clause.values = values;
    } else {
      evaluate_expression(lhs, check, context);
      evaluate_expression(rhs, check, context);
      clause.lhs = lhs;
      clause.rhs = rhs;
    }
    clauses_.push_back(clause);
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
}

bool ExcludeRule::matches(const OptionLookup& lookup) const {
  const std::string context = "exclude rule '" + text_ + "'";
  for (const Clause& clause : clauses_) {
    bool holds;
    if (clause.value_match) {
      std::string value = lookup(clause.name).value_or("");
      bool any = false;
      for (const std::string& v : clause.values) any = any || values_equal(value, v);
      holds = clause.op == "!=" ? !any : any;
    } else {
      holds = compare(evaluate_expression(clause.lhs, lookup, context), clause.op,
                      evaluate_expression(clause.rhs, lookup, context));
    }
    if (!holds) return false;
  }
  return true;
}

}  // namespace hlp::sweep
