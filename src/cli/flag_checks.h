// Range checks for command-line flags: a value out of range is refused at parse time with the
// flag's name and the rule ("--block_size: must be an integer >= 1, got 0"), never reinterpreted
// (0 meaning "the default", -1 wrapping to 2^64 - 1, ...).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace zero::cli {

// An integer >= min (and <= max).
CLI::Validator int_at_least(int64_t min, int64_t max = INT64_MAX);
// A finite number >= min (> min when `exclusive`), and <= max.
CLI::Validator real_at_least(double min, bool exclusive = false, double max = 1e308);

// Parses "1,2,3" (spaces allowed around ids) into integers in [0, limit). Errors name the flag
// and the offending item (empty items, non-numbers, out of range).
std::string parse_id_list(const std::string& text, int64_t limit, const std::string& flag,
                          std::vector<int64_t>* ids);

// The message for flags a subcommand does not know (CLI11's ExtrasError): one line per unknown
// flag, with the closest known flag of that subcommand when one is a probable typo, e.g.
// "error: zero train: unknown flag --learnig_rate (did you mean --learning_rate?)".
std::string describe_unknown_flags(CLI::App& app, const CLI::ExtrasError& error);

}  // namespace zero::cli
