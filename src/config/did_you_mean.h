// "Did you mean" suggestions for misspelled config keys and type names.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace zero::config {

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), case-sensitive.
int edit_distance(std::string_view a, std::string_view b);

// True when `typo` is close enough to `known` to be a probable misspelling: a case-only difference,
// or an edit distance small relative to the length (1 for short keys, up to 3 for long ones), or a
// separator-only difference ("stage3-prefetch" vs "stage3_prefetch").
bool is_probable_typo(std::string_view typo, std::string_view known);

// The closest probable-typo match of `word` among `candidates`, if any.
std::optional<std::string> did_you_mean(std::string_view word,
                                        std::span<const std::string_view> candidates);

}  // namespace zero::config
