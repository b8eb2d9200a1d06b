// Edit-distance based suggestions (did_you_mean.h).
#include "config/did_you_mean.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace zero::config {
namespace {

std::string normalise(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '-' || c == '_' || c == ' ') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// Allowed distance for a key of this length: typos in long keys are more often multi-letter.
int max_distance(size_t length) {
  if (length <= 3) return 0;
  if (length <= 6) return 1;
  if (length <= 14) return 2;
  return 3;
}

// "warmup_steps" in "warmup_num_steps": a dropped word rather than a misspelled one.
bool is_subsequence(const std::string& shorter, const std::string& longer) {
  size_t j = 0;
  for (char c : longer) {
    if (j < shorter.size() && shorter[j] == c) ++j;
  }
  return j == shorter.size();
}

}  // namespace

int edit_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

bool is_probable_typo(std::string_view typo, std::string_view known) {
  if (typo == known) return false;
  std::string a = normalise(typo), b = normalise(known);
  if (a == b) return true;
  // Very long inputs are never keys; skip the quadratic table.
  if (a.size() > 128 || b.size() > 128) return false;
  size_t len = std::max(a.size(), b.size());
  if (edit_distance(a, b) <= max_distance(len)) return true;
  const std::string& shorter = a.size() < b.size() ? a : b;
  const std::string& longer = a.size() < b.size() ? b : a;
  return shorter.size() >= 8 && longer.size() - shorter.size() <= 4 &&
         is_subsequence(shorter, longer);
}

std::optional<std::string> did_you_mean(std::string_view word,
                                        std::span<const std::string_view> candidates) {
  std::optional<std::string> best;
  int best_distance = 1 << 30;
  std::string w = normalise(word);
  for (std::string_view c : candidates) {
    if (!is_probable_typo(word, c)) continue;
    int dist = edit_distance(w, normalise(c));
    if (dist < best_distance) {
      best_distance = dist;
      best = std::string(c);
    }
  }
  return best;
}

}  // namespace zero::config
