// Flag range checks (see flag_checks.h).
#include "cli/flag_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "config/did_you_mean.h"

namespace zero::cli {
namespace {

// Whole-string integer parse (no trailing characters, no overflow).
bool parse_int(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *out = v;
  return true;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

CLI::Validator int_at_least(int64_t min, int64_t max) {
  const std::string rule = max == INT64_MAX ? fmt::format("an integer >= {}", min)
                                            : fmt::format("an integer in [{}, {}]", min, max);
  return CLI::Validator(
      [min, max, rule](std::string& text) -> std::string {
        int64_t v = 0;
        if (!parse_int(text, &v) || v < min || v > max) {
          return fmt::format("must be {}, got {}", rule, text);
        }
        return "";
      },
      "INT>=" + std::to_string(min));
}

CLI::Validator real_at_least(double min, bool exclusive, double max) {
  const std::string rule = fmt::format("a finite number {} {}{}", exclusive ? ">" : ">=", min,
                                       max < 1e308 ? fmt::format(" and <= {}", max) : "");
  return CLI::Validator(
      [min, exclusive, max, rule](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && errno == 0 && end == text.c_str() + text.size();
        if (!parsed || !std::isfinite(v) || v < min || (exclusive && v == min) || v > max) {
          return fmt::format("must be {}, got {}", rule, text);
        }
        return "";
      },
      "NUMBER");
}

std::string parse_id_list(const std::string& text, int64_t limit, const std::string& flag,
                          std::vector<int64_t>* ids) {
  ids->clear();
  size_t pos = 0;
  int index = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string item =
        trim(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    int64_t v = 0;
    if (item.empty()) {
      return fmt::format("{} {}: item {} is empty (expected ids like 1,2,3)", flag, text, index);
    }
    if (!parse_int(item, &v)) {
      return fmt::format("{} {}: '{}' is not a token id (expected ids like 1,2,3)", flag, text,
                         item);
    }
    if (v < 0 || v >= limit) {
      return fmt::format("{}: id {} is outside the vocabulary [0, {})", flag, v, limit);
    }
    ids->push_back(v);
    ++index;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return "";
}

std::string describe_unknown_flags(CLI::App& app, const CLI::ExtrasError& error) {
  // The subcommand being parsed when CLI11 gave up (the error may name the top-level app).
  CLI::App* sub = nullptr;
  for (CLI::App* s : app.get_subcommands({})) {
    if (s->get_name() == error.get_name()) sub = s;
  }
  const std::vector<CLI::App*> parsed = app.get_subcommands();
  if (sub == nullptr && !parsed.empty()) sub = parsed.back();
  CLI::App* where = sub != nullptr ? sub : &app;
  const std::string command = sub != nullptr ? "zero " + sub->get_name() : "zero";
  std::vector<std::string> known;
  for (const CLI::Option* opt : where->get_options()) {
    for (const std::string& name : opt->get_lnames()) known.push_back("--" + name);
  }
  std::vector<std::string_view> candidates(known.begin(), known.end());
  // CLI11 lists the leftover arguments after "expected: ", flags and their values alike.
  const std::string what = error.what();
  const size_t colon = what.find("expected: ");
  std::istringstream words(colon == std::string::npos ? what : what.substr(colon + 10));
  std::string out, word, values;
  while (words >> word) {
    if (word.rfind("-", 0) != 0) {
      values += (values.empty() ? "" : " ") + word;
      continue;
    }
    const std::string flag = word.substr(0, word.find('='));
    std::string line = fmt::format("error: {}: unknown flag {}", command, flag);
    if (auto guess = config::did_you_mean(flag, candidates)) {
      line += fmt::format(" (did you mean {}?)", *guess);
    }
    out += line + "\n";
  }
  if (out.empty()) {
    out = fmt::format("error: {}: unexpected argument{} {}\n", command,
                      values.find(' ') == std::string::npos ? "" : "s", values);
  }
  return out + fmt::format("Run '{} --help' for the flags it takes.\n", command);
}

}  // namespace zero::cli
