// Tests for ModelConfig: HF config.json parsing (saved real configs), errors naming file and key,
// round trip, presets, and exact parameter counts against PyTorch's numel sums.
#include "model/model_config.h"

#include <string>

#include <gtest/gtest.h>

namespace zero::model {
namespace {

using nlohmann::json;

std::string fixture(const std::string& name) {
  return std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

struct RealModel {
  const char* dir;
  int64_t total_params;   // sum(p.numel()) of the HF *ForCausalLM / GPT2LMHeadModel, tied once
  int64_t largest_layer;  // DeepSpeed's model_to_params largest layer: the token embedding
};

class RealConfigTest : public ::testing::TestWithParam<RealModel> {};

TEST_P(RealConfigTest, ParsesAndCountsExactly) {
  const RealModel& m = GetParam();
  auto config = load_model_config(fixture(m.dir));  // a directory: DIR/config.json
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  ParamCounts counts = count_params(*config);
  EXPECT_EQ(counts.total, m.total_params);
  EXPECT_EQ(counts.largest_layer, m.largest_layer);
  EXPECT_EQ(counts.total, counts.embedding + config->num_layers * counts.per_block +
                              counts.final_norm + counts.head);
  // The file path form works too.
  auto again = load_model_config(fixture(m.dir) + "/config.json");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(count_params(*again).total, m.total_params);
}

INSTANTIATE_TEST_SUITE_P(
    HfConfigs, RealConfigTest,
    ::testing::Values(RealModel{"gpt2", 124'439'808, 50257LL * 768},
                      RealModel{"gpt2-medium", 354'823'168, 50257LL * 1024},
                      RealModel{"Llama-3.2-1B", 1'235'814'400, 128256LL * 2048},
                      RealModel{"Meta-Llama-3-8B", 8'030'261'248, 128256LL * 4096},
                      RealModel{"Mistral-7B-v0.1", 7'241'732'096, 32000LL * 4096},
                      RealModel{"Qwen2-0.5B", 494'032'768, 151936LL * 896},
                      RealModel{"TinyLlama-1.1B-Chat-v1.0", 1'100'048'384, 32000LL * 2048}),
    [](const auto& info) {
      std::string name = info.param.dir;
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

TEST(ModelConfig, Gpt2Fields) {
  auto c = load_model_config(fixture("gpt2"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->arch, Arch::kGpt2);
  EXPECT_EQ(c->hidden_size, 768);
  EXPECT_EQ(c->num_layers, 12);
  EXPECT_EQ(c->num_heads, 12);
  EXPECT_EQ(c->num_kv_heads, 12);
  EXPECT_EQ(c->intermediate_size, 3072);  // n_inner absent => 4 * n_embd
  EXPECT_EQ(c->max_position_embeddings, 1024);
  EXPECT_DOUBLE_EQ(c->norm_eps, 1e-5);
  EXPECT_EQ(c->hidden_act, "gelu_new");
  EXPECT_TRUE(c->tie_word_embeddings);
}

TEST(ModelConfig, LlamaFields) {
  auto c = load_model_config(fixture("Llama-3.2-1B"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->arch, Arch::kLlama);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim(), 64);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);

  auto q = load_model_config(fixture("Qwen2-0.5B"));
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->attention_bias);  // Qwen2: q/k/v biases always
  EXPECT_DOUBLE_EQ(q->norm_eps, 1e-6);
  EXPECT_EQ(q->rope_scaling.type, "default");

  auto m = load_model_config(fixture("Mistral-7B-v0.1"));
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->tie_word_embeddings);
  EXPECT_EQ(m->model_type, "mistral");
}

json llama_json() {
  return json{{"model_type", "llama"},    {"architectures", {"LlamaForCausalLM"}},
              {"vocab_size", 256},        {"hidden_size", 64},
              {"num_hidden_layers", 2},   {"num_attention_heads", 4},
              {"intermediate_size", 172}, {"max_position_embeddings", 128},
              {"rms_norm_eps", 1e-5},     {"some_unknown_key", "kept"}};
}

void expect_error(const json& j, StatusCode code, const std::string& needle) {
  auto c = model_config_from_json(j, "x/config.json");
  ASSERT_FALSE(c.ok()) << "expected an error mentioning " << needle;
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find("x/config.json"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
}

TEST(ModelConfig, Defaults) {
  auto c = model_config_from_json(llama_json(), "x/config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->num_kv_heads, 4);  // defaults to num_attention_heads
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->hidden_act, "silu");
}

TEST(ModelConfig, Errors) {
  json j = llama_json();
  j.erase("hidden_size");
  expect_error(j, StatusCode::kInvalidArgument, "hidden_size");

  j = llama_json();
  j["num_hidden_layers"] = "2";
  expect_error(j, StatusCode::kInvalidArgument, "num_hidden_layers: expected a positive integer");

  j = llama_json();
  j["num_attention_heads"] = 0;
  expect_error(j, StatusCode::kInvalidArgument, "num_attention_heads");

  j = llama_json();
  j["num_key_value_heads"] = 3;
  expect_error(j, StatusCode::kInvalidArgument, "num_key_value_heads");

  j = llama_json();
  j["tie_word_embeddings"] = 1;
  expect_error(j, StatusCode::kInvalidArgument, "tie_word_embeddings");

  j = llama_json();
  j["head_dim"] = 32;
  expect_error(j, StatusCode::kUnimplemented, "head_dim");

  j = llama_json();
  j["head_dim"] = 16;  // equal to hidden / heads: fine
  EXPECT_TRUE(model_config_from_json(j, "x/config.json").ok());

  j = llama_json();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  expect_error(j, StatusCode::kUnimplemented, "rope_scaling.type");

  j = llama_json();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  expect_error(j, StatusCode::kUnimplemented, "rope_scaling.rope_type");

  j = llama_json();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect_error(j, StatusCode::kInvalidArgument, "rope_scaling.low_freq_factor");

  j = llama_json();
  j["model_type"] = "t5";
  expect_error(j, StatusCode::kUnimplemented, "model_type");

  j = llama_json();
  j.erase("model_type");
  expect_error(j, StatusCode::kInvalidArgument, "model_type");

  j = llama_json();
  j["architectures"] = {"LlamaForSequenceClassification"};
  expect_error(j, StatusCode::kUnimplemented, "architectures");

  j = llama_json();
  j["hidden_act"] = "gelu";
  expect_error(j, StatusCode::kUnimplemented, "hidden_act");

  json g = model_config_to_json(*preset_model_config("gpt2-tiny"));
  g["n_embd"] = 64.5;
  expect_error(g, StatusCode::kInvalidArgument, "n_embd");

  auto missing = load_model_config("/nonexistent/dir");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(ModelConfig, RoundTripKeepsUnknownKeys) {
  for (const char* dir : {"gpt2", "gpt2-medium", "Llama-3.2-1B", "Meta-Llama-3-8B",
                          "Mistral-7B-v0.1", "Qwen2-0.5B", "TinyLlama-1.1B-Chat-v1.0"}) {
    auto c = load_model_config(fixture(dir));
    ASSERT_TRUE(c.ok()) << dir;
    json out = model_config_to_json(*c);
    // Unknown keys survive, and the written config parses to the same model.
    for (const auto& [key, value] : c->original.items()) {
      EXPECT_TRUE(out.contains(key)) << dir << ": " << key;
    }
    auto back = model_config_from_json(out, "roundtrip");
    ASSERT_TRUE(back.ok()) << dir << ": " << back.status().to_string();
    EXPECT_EQ(count_params(*back).total, count_params(*c).total) << dir;
    EXPECT_EQ(back->rope_scaling.type, c->rope_scaling.type) << dir;
    EXPECT_EQ(back->tie_word_embeddings, c->tie_word_embeddings) << dir;
    EXPECT_EQ(back->attention_bias, c->attention_bias) << dir;
  }
  auto c = model_config_from_json(llama_json(), "x");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(model_config_to_json(*c)["some_unknown_key"], "kept");
}

TEST(ModelConfig, Presets) {
  for (const std::string& name : preset_names()) {
    auto c = preset_model_config(name);
    ASSERT_TRUE(c.ok()) << name;
    // Every preset writes a config.json that parses back to the same shape.
    auto back = model_config_from_json(model_config_to_json(*c), name);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status().to_string();
    EXPECT_EQ(count_params(*back).total, count_params(*c).total) << name;
  }
  EXPECT_EQ(count_params(*preset_model_config("gpt2-124m")).total, 124'439'808);
  EXPECT_EQ(count_params(*preset_model_config("gpt2-350m")).total, 354'823'168);
  EXPECT_EQ(count_params(*preset_model_config("gpt2-774m")).total, 774'030'080);
  EXPECT_EQ(count_params(*preset_model_config("gpt2-1558m")).total, 1'557'611'200);
  EXPECT_EQ(count_params(*preset_model_config("llama-1b")).total, 1'235'814'400);
  EXPECT_EQ(count_params(*preset_model_config("preset:llama-8b")).total, 8'030'261'248);

  auto tiny = preset_model_config("gpt2-tiny");
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->vocab_size, 256);
  EXPECT_EQ(tiny->max_position_embeddings, 64);
  // wte 256*64 + wpe 64*64 + 2 blocks * 49,984 + ln_f 128
  EXPECT_EQ(count_params(*tiny).total, 16384 + 4096 + 2 * 49984 + 128);

  auto llama_tiny = preset_model_config("llama-tiny");
  ASSERT_TRUE(llama_tiny.ok());
  EXPECT_EQ(llama_tiny->num_kv_heads, 2);
  EXPECT_FALSE(llama_tiny->tie_word_embeddings);
  // embed + head 2*256*64; block: q,o 2*4096 + k,v 2*2048 + mlp 3*64*172 + norms 128
  EXPECT_EQ(count_params(*llama_tiny).total, 2 * 16384 + 2 * (8192 + 4096 + 33024 + 128) + 64);

  EXPECT_FALSE(preset_model_config("gpt3").ok());
}

}  // namespace
}  // namespace zero::model
