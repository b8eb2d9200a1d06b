// Pattern: PCRE2 made to agree with HF's Oniguruma on \s, \p{L}, \p{N} (expected values measured
// with tokenizers 0.23), and HF's split behaviours.
#include "text/pattern.h"

#include <gtest/gtest.h>

namespace zero::text {
namespace {

std::vector<std::string> matches(const std::string& regex, const std::string& text) {
  auto p = Pattern::regex(regex);
  EXPECT_TRUE(p.ok()) << p.status().message();
  auto spans = p->find_all(text);
  EXPECT_TRUE(spans.ok()) << spans.status().message();
  std::vector<std::string> out;
  for (const ByteSpan& s : *spans) out.push_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

TEST(Pattern, WhitespaceIsUnicodeWhiteSpaceAsOniguruma) {
  // U+180E is \s for PCRE2 10.42 but not for Oniguruma (nor Unicode White_Space since 6.3).
  EXPECT_EQ(matches(R"(\s+)", "a\u180e\u00a0\u3000\u0085b"),
            std::vector<std::string>{"\u00a0\u3000\u0085"});
  EXPECT_EQ(matches(R"([^\s\p{L}]+)", "x\u180e'y"), std::vector<std::string>{"\u180e'"});
  EXPECT_EQ(matches(R"(\S+)", "a\u180e b"), (std::vector<std::string>{"a\u180e", "b"}));
}

TEST(Pattern, LettersAndNumbersOfUnicode16) {
  // U+1C89 CYRILLIC CAPITAL LETTER TJE and U+31350 (CJK Extension H) are letters, U+10D40
  // GARAY DIGIT ZERO a number, in HF tokenizers 0.23.
  EXPECT_EQ(matches(R"(\p{L}+)", "1\u1c89\U00031350!"),
            std::vector<std::string>{"\u1c89\U00031350"});
  EXPECT_EQ(matches(R"(\p{N}+)", "a\U00010d40\U00010d41b"),
            std::vector<std::string>{"\U00010d40\U00010d41"});
  EXPECT_EQ(matches(R"([^\p{L}\p{N}]+)", "\u1c89.\U00010d40"), std::vector<std::string>{"."});
  EXPECT_EQ(matches(R"(\P{L}+)", "\u1c89.."), std::vector<std::string>{".."});
}

TEST(Pattern, EscapesAndClassesPassThrough) {
  EXPECT_EQ(matches(R"(\\s)", "a\\sb"), std::vector<std::string>{"\\s"});
  EXPECT_EQ(matches(R"([[:digit:]\s]+)", "ab12 3c"), std::vector<std::string>{"12 3"});
  EXPECT_EQ(matches(R"([]s]+)", "a]s]b"), std::vector<std::string>{"]s]"});
}

TEST(Pattern, SplitBehaviours) {
  // "a-b--c" split on "-" (HF's NormalizedString::split examples).
  const std::string text = "a-b--c";
  auto p = Pattern::literal("-");
  ASSERT_TRUE(p.ok());
  auto m = p->find_all(text);
  ASSERT_TRUE(m.ok());
  auto cut = [&](SplitBehavior b, bool invert) {
    std::vector<std::string> out;
    for (const ByteSpan& s : split_spans(text.size(), *m, b, invert)) {
      out.push_back(text.substr(s.begin, s.end - s.begin));
    }
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(cut(SplitBehavior::kIsolated, false), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(cut(SplitBehavior::kRemoved, false), (V{"a", "b", "c"}));
  EXPECT_EQ(cut(SplitBehavior::kMergedWithPrevious, false), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(cut(SplitBehavior::kMergedWithNext, false), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(cut(SplitBehavior::kContiguous, false), (V{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(cut(SplitBehavior::kRemoved, true), (V{"-", "-", "-"}));
}

}  // namespace
}  // namespace zero::text
