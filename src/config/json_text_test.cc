// Tests for the tolerant ds_config JSON reader.
#include "config/json_text.h"

#include <gtest/gtest.h>

namespace zero::config {
namespace {

Json parse_ok(std::string_view text) {
  auto r = parse_json_text(text);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->value : Json();
}

std::string parse_error(std::string_view text) {
  auto r = parse_json_text(text);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

TEST(JsonText, PlainJson) {
  Json j = parse_ok(R"({"a": 1, "b": [true, false, null], "c": {"d": "x"}, "e": -2.5})");
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"].size(), 3u);
  EXPECT_EQ(j["c"]["d"], "x");
  EXPECT_EQ(j["e"], -2.5);
}

TEST(JsonText, CommentsAndTrailingCommas) {
  Json j = parse_ok(
      "{\r\n  // line comment\r\n  \"a\": 1, # hash comment\r\n"
      "  /* block\n comment */ \"b\": [1, 2,],\r\n}\r\n");
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"].size(), 2u);
}

TEST(JsonText, HashInsideStringIsText) {
  Json j = parse_ok(R"({"path": "/a#b//c"})");
  EXPECT_EQ(j["path"], "/a#b//c");
}

TEST(JsonText, Utf8AndEscapes) {
  Json j = parse_ok("\xEF\xBB\xBF{\"k\": \"学习率 \\u00e9 \\ud83d\\ude00\"} // 注释");
  EXPECT_EQ(j["k"], "学习率 é 😀");
}

TEST(JsonText, NumbersKeepIntegersAndExponents) {
  Json j = parse_ok(R"({"a": 2e8, "b": 500000000, "c": 9223372036854775807, "d": 1e-8})");
  EXPECT_TRUE(j["a"].is_number_float());
  EXPECT_EQ(j["a"].get<double>(), 2e8);
  EXPECT_TRUE(j["b"].is_number_integer());
  EXPECT_EQ(j["c"].get<int64_t>(), INT64_MAX);
}

TEST(JsonText, SourceSpansKeepRawText) {
  auto r = parse_json_text("{\n  \"zero\": {\"bucket\": 2e8}\n}");
  ASSERT_TRUE(r.ok());
  const SourceSpan& s = r->sources.at("zero.bucket");
  EXPECT_EQ(s.line, 2);
  EXPECT_EQ(s.column, 22);
  EXPECT_EQ(s.raw, "2e8");
}

TEST(JsonText, DuplicateKeysRejected) {
  std::string e = parse_error("{\"a\": 1,\n \"b\": {\"c\": 1, \"c\": 2}}");
  EXPECT_NE(e.find("line 2, column 16: duplicate key \"c\" in b"), std::string::npos) << e;
  EXPECT_NE(e.find("first defined at line 2, column 8"), std::string::npos) << e;
}

TEST(JsonText, HjsonOnlySyntaxIsAnErrorWithPosition) {
  EXPECT_NE(parse_error("{a: 1}").find("line 1, column 2: expected a quoted key"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"a\": 1\n \"b\": 2}").find("line 2, column 2: missing ','"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"a\": cpu}").find("unquoted string 'cpu'"), std::string::npos);
  EXPECT_NE(parse_error("{\"a\": \"x\n\"}").find("unterminated string"), std::string::npos);
  EXPECT_NE(parse_error("{\"a\": 1} x").find("unexpected text after"), std::string::npos);
  EXPECT_NE(parse_error("{\"a\": 01}").find("leading zeros"), std::string::npos);
  EXPECT_NE(parse_error("{\"a\": 1e999}").find("out of range"), std::string::npos);
  EXPECT_NE(parse_error("/* open").find("unterminated /* comment"), std::string::npos);
  EXPECT_NE(parse_error("").find("empty"), std::string::npos);
  EXPECT_NE(parse_error("{\"a\": \"\xff\"}").find("invalid UTF-8"), std::string::npos);
}

TEST(JsonText, DeepNestingIsBounded) {
  std::string deep(5000, '[');
  EXPECT_NE(parse_error(deep).find("nesting deeper"), std::string::npos);
}

TEST(JsonText, Base64) {
  EXPECT_EQ(decode_base64("eyJhIjogMX0"), "{\"a\": 1}");
  EXPECT_EQ(decode_base64("eyJhIjogMX0="), "{\"a\": 1}");
  EXPECT_FALSE(decode_base64("not base64!").has_value());
  EXPECT_FALSE(decode_base64("").has_value());
}

TEST(JsonText, Paths) {
  EXPECT_EQ(path_join("", "a"), "a");
  EXPECT_EQ(path_join("a", "b"), "a.b");
  EXPECT_EQ(path_join("a", "x.y"), "a[\"x.y\"]");
  EXPECT_EQ(path_index("betas", 1), "betas[1]");
}

}  // namespace
}  // namespace zero::config
