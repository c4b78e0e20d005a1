#pragma once
// Exclusion rules of an experiment file: `exclude = strategy=single & ranks!=1`.
//
// A rule is clauses joined by `&`; the configuration is dropped when every clause holds.
//   name=a|b|c   name!=a|b    the option's value is (is not) one of the listed values
//   expr OP expr              OP is one of == != < <= > >=, expr is integer/decimal arithmetic
//                             (+ - * / % and parentheses) over numbers and option names
// On the right of `=`/`!=` after a bare option name, words are values (strategy=pp means the
// value "pp"), unless the right side is arithmetic (ranks != tp*pp). Option names may contain
// '-' (seq-len), so write spaces around + and -. jobs/README.md documents this for users.
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hlp::sweep {

// Value of an option in one configuration, or nullopt when the configuration does not set it.
using OptionLookup = std::function<std::optional<std::string>(const std::string& name)>;

class ExcludeRule {
 public:
  // Throws UserError naming the rule when it does not parse or uses a name not in `known_names`.
  ExcludeRule(const std::string& text, const std::set<std::string>& known_names);

  // True when every clause holds for the configuration (so it is excluded).
  bool matches(const OptionLookup& lookup) const;
  const std::string& text() const { return text_; }

 private:
  struct Clause {
    std::string op;                   // "=", "!=", "<", "<=", ">", ">="
    bool value_match = false;         // name=a|b form
    std::string name;                 // value_match: the option
    std::vector<std::string> values;  // value_match: accepted values
    std::string lhs, rhs;             // arithmetic form: expression texts
  };
  std::string text_;
  std::vector<Clause> clauses_;
};

// Evaluates integer/decimal arithmetic over numbers and names ("ranks % (tp*pp)").
// Throws UserError (mentioning `context`) on a syntax error, an unknown name or a non-numeric value.
double evaluate_expression(const std::string& expr, const OptionLookup& lookup,
                           const std::string& context);

}  // namespace hlp::sweep
