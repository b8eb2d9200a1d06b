// Tests for ModelConfig: HF config.json parsing (saved real configs), errors naming file and key,
// round trip, presets, and exact parameter counts against PyTorch's numel sums.
#include "model/model_config.h"

#include "model/param_layout.h"

#include <cmath>
#include <filesystem>
#include <fstream>
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
  j["head_dim"] = 32;  // unequal to hidden / heads (16), as in Mistral-Nemo: transformers reads it
  ASSERT_TRUE(model_config_from_json(j, "x/config.json").ok());
  EXPECT_EQ(model_config_from_json(j, "x/config.json")->head_dim(), 32);

  j = llama_json();
  j["head_dim"] = 7;
  expect_error(j, StatusCode::kInvalidArgument, "must be even for RoPE");

  j = llama_json();
  j["head_dim"] = 16;  // equal to hidden / heads: fine
  EXPECT_TRUE(model_config_from_json(j, "x/config.json").ok());

  j = llama_json();
  j["rope_scaling"] = {{"type", "longrope"}, {"factor", 2.0}};
  expect_error(j, StatusCode::kUnimplemented, "rope_scaling.type: \"longrope\"");

  j = llama_json();
  j["rope_scaling"] = {{"rope_type", "su"}, {"factor", 2.0}};
  expect_error(j, StatusCode::kUnimplemented, "rope_scaling.rope_type: \"su\"");

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

// Dimensions that would wrap the parameter count, or size allocations beyond any machine, are
// refused while config.json is read. Before: `zero estimate --model` printed a negative --params
// and n_layer 1e9 aborted `zero train` with std::bad_alloc after 11 s.
TEST(ModelConfig, AbsurdDimensionsAreRefusedBeforeAnythingIsSized) {
  json g = model_config_to_json(*preset_model_config("gpt2-tiny"));
  g["n_layer"] = 1000000000;
  expect_error(g, StatusCode::kInvalidArgument,
               "n_layer: 1000000000 is larger than the limit 65536");
  g["n_layer"] = 1e9;  // as a float
  expect_error(g, StatusCode::kInvalidArgument, "n_layer: 1000000000 is larger than the limit");
  json l = llama_json();
  l["num_hidden_layers"] = 65537;
  expect_error(l, StatusCode::kInvalidArgument, "num_hidden_layers: 65537 is larger than");
  l = llama_json();
  l["vocab_size"] = int64_t{1} << 40;
  expect_error(l, StatusCode::kInvalidArgument,
               "vocab_size: 1099511627776 is larger than the "
               "limit 2147483647");
  // Every dimension within its limit, but the count wraps: GPT-2's fused qkv alone is 3 * C * C,
  // beyond int64 for C near 2^31.
  g = model_config_to_json(*preset_model_config("gpt2-tiny"));
  g["n_embd"] = 2147483646;
  g["n_head"] = 1;
  g["n_inner"] = 1;
  expect_error(g, StatusCode::kInvalidArgument,
               "parameter count of this model overflows a 64-bit "
               "integer");
  // Fits int64 but not the limit on parameters (byte counts must fit too).
  l = llama_json();
  l["hidden_size"] = 1 << 20;
  l["num_attention_heads"] = 1 << 10;
  l["num_key_value_heads"] = 1 << 10;
  l["intermediate_size"] = 1 << 20;
  l["num_hidden_layers"] = 2000;
  expect_error(l, StatusCode::kInvalidArgument,
               "parameters is more than the limit "
               "1000000000000000");
}

TEST(ModelConfig, OnlyRegularFilesAreRead) {
  // /dev/zero as a model "config.json": refused at once (before: read until std::bad_alloc).
  auto zero = load_model_config("/dev/zero");
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("/dev/zero: is a character device, not a regular file"),
            std::string::npos)
      << zero.status().message();
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

// config.json files written by transformers 5.24 (LlamaConfig & co .save_pretrained, see
// tools/golden/make_hf5_configs.py): rope_parameters, dtype, layer_types.
TEST(HfConfigLayouts, Transformers5Configs) {
  auto c = load_model_config(fixture("hf5/llama-default-bf16"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);  // was silently 10000 before rope_parameters
  EXPECT_EQ(c->rope_scaling.type, "default");
  EXPECT_EQ(c->sliding_window, 0);

  c = load_model_config(fixture("hf5/llama-linear"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 2.0);

  c = load_model_config(fixture("hf5/llama-dynamic"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, "dynamic");
  EXPECT_EQ(c->rope_scaling.max_position_embeddings, 128);

  c = load_model_config(fixture("hf5/llama-yarn"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 32);
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1.0);  // HF get_mscale

  c = load_model_config(fixture("hf5/llama-llama3"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 32);
  EXPECT_TRUE(c->tie_word_embeddings);

  c = load_model_config(fixture("hf5/mistral-sliding"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->sliding_window, 16);
  EXPECT_EQ(c->attention_window(0), 16);
  EXPECT_EQ(c->attention_window(1), 16);

  c = load_model_config(fixture("hf5/qwen2-sliding"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->sliding_window, 16);
  EXPECT_EQ(c->attention_window(0), 0);  // layers below max_window_layers (1) attend fully
  EXPECT_EQ(c->attention_window(1), 16);

  c = load_model_config(fixture("hf5/gpt2"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->warnings.size(), 3u);  // attn_pdrop, resid_pdrop, embd_pdrop = 0.1
  ASSERT_FALSE(c->warnings.empty());
  EXPECT_NE(c->warnings[0].find("attn_pdrop: 0.1"), std::string::npos) << c->warnings[0];
}

// The same config in the 4.x layout (top-level rope_theta / rope_scaling / torch_dtype) reads as
// the same model.
TEST(HfConfigLayouts, OldLayoutReadsTheSame) {
  for (const char* dir : {"llama-default-bf16", "llama-linear", "llama-dynamic", "llama-yarn",
                          "llama-llama3", "mistral-sliding", "qwen2-sliding"}) {
    auto v5 = load_model_config(fixture(std::string("hf5/") + dir));
    ASSERT_TRUE(v5.ok()) << dir << ": " << v5.status().to_string();
    json old = v5->original;
    json params = old["rope_parameters"];
    old.erase("rope_parameters");
    old["rope_theta"] = params["rope_theta"];
    params.erase("rope_theta");
    old["rope_scaling"] = params["rope_type"] == "default" ? json(nullptr) : params;
    old.erase("layer_types");
    auto v4 = model_config_from_json(old, dir);
    ASSERT_TRUE(v4.ok()) << dir << ": " << v4.status().to_string();
    EXPECT_EQ(v4->rope_theta, v5->rope_theta) << dir;
    EXPECT_EQ(v4->rope_scaling.type, v5->rope_scaling.type) << dir;
    EXPECT_EQ(v4->rope_scaling.factor, v5->rope_scaling.factor) << dir;
    EXPECT_EQ(v4->rope_scaling.attention_factor, v5->rope_scaling.attention_factor) << dir;
    EXPECT_EQ(v4->sliding_window, v5->sliding_window) << dir;
    // Both layouts at once, agreeing: fine.
    json both = v5->original;
    both["rope_theta"] = old["rope_theta"];
    both["rope_scaling"] = old["rope_scaling"];
    EXPECT_TRUE(model_config_from_json(both, dir).ok()) << dir;
  }
}

// Every key that changes the math and is not implemented is an error naming key and value.
TEST(HfConfigLayouts, RefusedKeys) {
  json v5 = llama_json();
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};

  json j = v5;
  j["rope_parameters"]["rope_type"] = "longrope";
  expect_error(j, StatusCode::kUnimplemented, "rope_parameters.rope_type: \"longrope\"");

  j = v5;
  j["rope_parameters"]["partial_rotary_factor"] = 0.5;
  expect_error(j, StatusCode::kUnimplemented, "rope_parameters.partial_rotary_factor: 0.5");

  j = llama_json();
  j["partial_rotary_factor"] = 0.25;
  expect_error(j, StatusCode::kUnimplemented, "partial_rotary_factor: 0.25");

  j = v5;
  j["rope_parameters"]["mrope_section"] = 3;
  expect_error(j, StatusCode::kUnimplemented, "rope_parameters.mrope_section");

  j = llama_json();  // per-layer-type RoPE (transformers 5, e.g. Gemma-style)
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  expect_error(j, StatusCode::kUnimplemented, "rope_parameters.full_attention");

  j = v5;  // both layouts, disagreeing (the file our old writer produced)
  j["rope_theta"] = 10000.0;
  j["rope_scaling"] = nullptr;
  expect_error(j, StatusCode::kInvalidArgument, "rope_theta: 10000 disagrees");

  j = v5;
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  expect_error(j, StatusCode::kInvalidArgument, "rope_scaling");

  j = v5;  // transformers 5 moves a top-level original_max_position_embeddings into llama3 / yarn
  j["original_max_position_embeddings"] = 64;
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e4}, {"factor", 2.0}};
  auto top = model_config_from_json(j, "x");
  ASSERT_TRUE(top.ok()) << top.status().to_string();
  EXPECT_EQ(top->rope_scaling.original_max_position_embeddings, 64);
  j["rope_parameters"]["original_max_position_embeddings"] = 32;
  expect_error(j, StatusCode::kInvalidArgument,
               "rope_parameters.original_max_position_embeddings: 32 disagrees");

  j = v5;
  j["rope_parameters"]["rope_type"] = "linear";  // factor required
  expect_error(j, StatusCode::kInvalidArgument, "rope_parameters.factor: missing");

  j = v5;
  j["dtype"] = "bfloat16";
  j["torch_dtype"] = "float32";
  expect_error(j, StatusCode::kInvalidArgument, "dtype: \"bfloat16\" disagrees");

  j = llama_json();
  j["layer_types"] = {"full_attention", "chunked_attention"};
  expect_error(j, StatusCode::kUnimplemented, "layer_types[1]: \"chunked_attention\"");

  j = llama_json();
  j["layer_types"] = {"full_attention", "sliding_attention"};
  expect_error(j, StatusCode::kInvalidArgument, "sliding_window: missing");

  json g = model_config_to_json(*preset_model_config("gpt2-tiny"));
  json k = g;
  k["scale_attn_by_inverse_layer_idx"] = true;  // implemented: scores / (layer + 1)
  auto by_layer = model_config_from_json(k, "x");
  ASSERT_TRUE(by_layer.ok());
  EXPECT_EQ(by_layer->attention_score_divisor(0), 1.0);
  EXPECT_EQ(by_layer->attention_score_divisor(1), 2.0);
  EXPECT_EQ(model_config_to_json(*by_layer)["scale_attn_by_inverse_layer_idx"], true);
  k = g;
  k["scale_attn_weights"] = false;
  expect_error(k, StatusCode::kUnimplemented, "scale_attn_weights: false");
  k = g;
  k["add_cross_attention"] = true;
  expect_error(k, StatusCode::kUnimplemented, "add_cross_attention: true");
  k = g;
  k["reorder_and_upcast_attn"] = true;  // precision only; fp32 compute is the same math
  EXPECT_TRUE(model_config_from_json(k, "x").ok());
  k = g;
  k["attn_pdrop"] = 0.0;
  k["resid_pdrop"] = 0.0;
  k["embd_pdrop"] = 0.0;
  auto quiet = model_config_from_json(k, "x");
  ASSERT_TRUE(quiet.ok());
  EXPECT_TRUE(quiet->warnings.empty());
}

// config.json is written in the layout read, with rope and dtype keys consistent; save -> load ->
// save is a fixed point.
TEST(HfConfigLayouts, WriteKeepsLayout) {
  auto c = load_model_config(fixture("hf5/llama-llama3"));
  ASSERT_TRUE(c.ok());
  json out = model_config_to_json(*c, "bfloat16");
  EXPECT_FALSE(out.contains("rope_theta"));
  EXPECT_FALSE(out.contains("rope_scaling"));
  EXPECT_FALSE(out.contains("torch_dtype"));
  EXPECT_EQ(out["dtype"], "bfloat16");
  EXPECT_EQ(out["rope_parameters"]["rope_theta"], 500000.0);
  EXPECT_EQ(out["rope_parameters"]["rope_type"], "llama3");
  EXPECT_EQ(out["rope_parameters"]["original_max_position_embeddings"], 32);
  auto back = model_config_from_json(out, "saved");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(model_config_to_json(*back, "bfloat16"), out);

  // bf16 input saved as fp32: dtype follows the saved weights.
  auto b = load_model_config(fixture("hf5/llama-default-bf16"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(model_config_to_json(*b, "float32")["dtype"], "float32");

  // 4.x layout stays 4.x; a file with both dtype keys gets both updated.
  auto l = load_model_config(fixture("Llama-3.2-1B"));
  ASSERT_TRUE(l.ok());
  json old = model_config_to_json(*l, "float32");
  EXPECT_FALSE(old.contains("rope_parameters"));
  EXPECT_EQ(old["torch_dtype"], "float32");
  EXPECT_EQ(old["rope_theta"], 500000.0);
  EXPECT_EQ(old["rope_scaling"]["rope_type"], "llama3");
  json both = l->original;
  both["dtype"] = both["torch_dtype"];
  auto lb = model_config_from_json(both, "both");
  ASSERT_TRUE(lb.ok()) << lb.status().to_string();
  json both_out = model_config_to_json(*lb, "float16");
  EXPECT_EQ(both_out["dtype"], "float16");
  EXPECT_EQ(both_out["torch_dtype"], "float16");
  ASSERT_TRUE(model_config_from_json(both_out, "both_out").ok());

  // Round trips are fixed points for every fixture.
  for (const char* dir :
       {"hf5/llama-yarn", "hf5/llama-dynamic", "hf5/llama-linear", "hf5/mistral-sliding",
        "hf5/qwen2-sliding", "hf5/gpt2", "Mistral-7B-v0.1", "Qwen2-0.5B", "gpt2"}) {
    auto m = load_model_config(fixture(dir));
    ASSERT_TRUE(m.ok()) << dir;
    json first = model_config_to_json(*m, "float32");
    auto again = model_config_from_json(first, dir);
    ASSERT_TRUE(again.ok()) << dir << ": " << again.status().to_string();
    EXPECT_EQ(model_config_to_json(*again, "float32"), first) << dir;
    EXPECT_EQ(again->rope_theta, m->rope_theta) << dir;
    EXPECT_EQ(again->sliding_window, m->sliding_window) << dir;
  }
}

// A save writes back the config.json transformers wrote, key for key, in either layout: no key
// added (yarn's beta_fast / beta_slow / attention_factor / truncate used to be written with their
// defaults) and none changed. Fixtures: tests/fixtures/hf_matrix (tools/golden/make_hf_matrix.py).
TEST(HfConfigLayouts, SaveWritesTransformersConfigsBackUnchanged) {
  const std::string matrix = std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/hf_matrix";
  int cases = 0;
  for (const auto& e : std::filesystem::directory_iterator(matrix)) {
    if (!std::filesystem::exists(e.path() / "config.json")) continue;
    const std::string dir = e.path().string();
    auto m = load_model_config(dir);
    ASSERT_TRUE(m.ok()) << dir << ": " << m.status().to_string();
    // (A multimodal checkpoint: the whole config.json around the language model's text_config.)
    const json& in = m->multimodal_type.empty() ? m->original : m->multimodal_original;
    const std::string dtype = in.value("dtype", in.value("torch_dtype", std::string("float32")));
    EXPECT_EQ(model_config_to_json(*m, dtype), in) << dir;
    cases += 1;
  }
  EXPECT_GE(cases, 12);
}

TEST(HfConfigLayouts, GenerationConfig) {
  auto c = load_model_config(fixture("hf5/llama-yarn"));  // has generation_config.json
  ASSERT_TRUE(c.ok());
  json g = generation_config_to_json(*c);
  EXPECT_EQ(g["transformers_version"], "5.24.0");  // copied as is
  EXPECT_EQ(g["eos_token_id"], 2);
  auto m = model_config_from_json(c->original, "x");  // no directory: made from bos/eos
  ASSERT_TRUE(m.ok());
  json made = generation_config_to_json(*m);
  EXPECT_EQ(made["bos_token_id"], 1);
  EXPECT_EQ(made["eos_token_id"], 2);
  EXPECT_FALSE(made.contains("pad_token_id"));  // null in config.json
}

// RoPE frequencies and cos/sin tables against transformers' own rope functions
// (tests/fixtures/golden/rope_hf5.json, tools/golden/make_rope_fixtures.py): each variant read from
// its transformers-5 config.json.
TEST(HfConfigLayouts, RopeMatchesTransformers) {
  std::ifstream in(std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/rope_hf5.json");
  ASSERT_TRUE(in.good());
  const json golden = json::parse(in);
  ASSERT_EQ(golden["cases"].size(), 6u);
  for (const json& g : golden["cases"]) {
    const std::string name = g["config"];
    auto c = load_model_config(fixture("hf5/" + name));
    ASSERT_TRUE(c.ok()) << name << ": " << c.status().to_string();
    const int64_t seq_len = g["seq_len"];
    const std::vector<double> inv =
        kernels::cpu::rope_inv_freq(c->head_dim(), c->rope_theta, c->rope_scaling, seq_len);
    ASSERT_EQ(inv.size(), g["inv_freq"].size()) << name;
    for (size_t i = 0; i < inv.size(); ++i) {
      // transformers computes in float32: relative agreement to float32 rounding.
      const double want = g["inv_freq"][i];
      EXPECT_NEAR(inv[i], want, 2e-7 * want) << name << " seq_len " << seq_len << " i " << i;
    }
    EXPECT_NEAR(c->rope_scaling.attention_factor, g["attention_scaling"].get<double>(), 1e-15)
        << name;
    const int64_t T = 200, D2 = c->head_dim() / 2;
    std::vector<double> cos(static_cast<size_t>(T * D2)), sin(cos.size());
    kernels::cpu::rope_tables(cos.data(), sin.data(), inv, T, c->rope_scaling.attention_factor);
    for (size_t p = 0; p < g["positions"].size(); ++p) {
      const int64_t t = g["positions"][p];
      for (int64_t i = 0; i < D2; ++i) {
        // HF forms t * inv_freq in float32: an angle error up to ~t * 6e-8 rad.
        const double tol = 1e-6 + 1.2e-7 * static_cast<double>(t);
        EXPECT_NEAR(cos[static_cast<size_t>(t * D2 + i)], g["cos"][p][i].get<double>(), tol)
            << name << " t " << t << " i " << i;
        EXPECT_NEAR(sin[static_cast<size_t>(t * D2 + i)], g["sin"][p][i].get<double>(), tol)
            << name << " t " << t << " i " << i;
      }
    }
  }
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
  // Llama-2-13B (HF's LlamaForCausalLM: sum(p.numel())).
  EXPECT_EQ(count_params(*preset_model_config("llama-13b")).total, 13'015'864'320);

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

  // Qwen3-8B: 8,190,735,360 parameters (its model card's 8.2B; untied head, q_norm / k_norm of
  // 128).
  auto qwen3_8b = preset_model_config("preset:qwen3-8b");
  ASSERT_TRUE(qwen3_8b.ok());
  EXPECT_EQ(qwen3_8b->head_dim(), 128);
  EXPECT_EQ(count_params(*qwen3_8b).total, 8'190'735'360);
  EXPECT_EQ(model_config_to_json(*qwen3_8b)["head_dim"], 128);
  // Phi-3-mini-4k: 3,821,079,552 parameters (its model card's 3.8B).
  auto phi3_mini = preset_model_config("phi-3-mini");
  ASSERT_TRUE(phi3_mini.ok());
  EXPECT_EQ(count_params(*phi3_mini).total, 3'821'079'552);
  EXPECT_EQ(phi3_mini->attention_window(31), 2047);
  EXPECT_EQ(model_config_from_json(model_config_to_json(*phi3_mini), "phi")->attention_window(0),
            2047);
  // Gemma 3 4B's language model: 3,880,263,168 parameters (the 4.3B of the multimodal model less
  // its vision tower and projector).
  auto gemma = preset_model_config("gemma-3-4b");
  ASSERT_TRUE(gemma.ok());
  EXPECT_EQ(count_params(*gemma).total, 3'880'263'168);
  auto gemma_back = model_config_from_json(model_config_to_json(*gemma), "gemma");
  ASSERT_TRUE(gemma_back.ok()) << gemma_back.status().to_string();
  EXPECT_EQ(gemma_back->attention_window(0), 1024);
  EXPECT_EQ(gemma_back->attention_window(5), 0);
  EXPECT_EQ(gemma_back->rope_scaling.type, "linear");
  EXPECT_EQ(gemma_back->local_rope_theta, 1e4);
  auto qwen3_tiny = preset_model_config("qwen3-tiny");
  ASSERT_TRUE(qwen3_tiny.ok());
  EXPECT_EQ(qwen3_tiny->head_dim(), 32);
  EXPECT_TRUE(qwen3_tiny->qk_norm);
}

json qwen3_json() {
  json j = llama_json();
  j["model_type"] = "qwen3";
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 24;  // not 64 / 4
  j["num_key_value_heads"] = 2;
  return j;
}

TEST(HfConfigFamilies, Qwen3) {
  auto c = model_config_from_json(qwen3_json(), "x/config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->head_dim(), 24);
  EXPECT_FALSE(c->attention_bias);
  // Per block: q (96, 64), k and v (48, 64), o (64, 96), MLP 3 * 64 * 172, two norms of 64, q_norm
  // and k_norm of 24.
  EXPECT_EQ(count_params(*c).per_block, 6144 + 2 * 3072 + 6144 + 3 * 64 * 172 + 128 + 48);
  // Written back: head_dim kept, and read again as the same model.
  EXPECT_EQ(model_config_to_json(*c)["head_dim"], 24);
  auto back = model_config_from_json(model_config_to_json(*c), "back");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(back->qk_norm);
  EXPECT_EQ(count_params(*back).total, count_params(*c).total);

  json j = qwen3_json();
  j.erase("head_dim");  // Qwen3Config's default, not hidden / heads
  EXPECT_EQ(model_config_from_json(j, "x/config.json")->head_dim(), 128);
  j = qwen3_json();
  j["attention_bias"] = true;  // q, k, v and o_proj
  EXPECT_EQ(count_params(*model_config_from_json(j, "x/config.json")).per_block,
            count_params(*c).per_block + 96 + 2 * 48 + 64);
}

json phi3_json() {
  json j = llama_json();
  j["model_type"] = "phi3";
  j["architectures"] = {"Phi3ForCausalLM"};
  j["original_max_position_embeddings"] = 32;
  j["rope_scaling"] = {{"type", "su"},  // Phi3Config reads "su" as longrope
                       {"short_factor", {1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5}},
                       {"long_factor", {2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0}}};
  return j;
}

TEST(HfConfigFamilies, Phi3) {
  auto c = model_config_from_json(phi3_json(), "x/config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, "longrope");
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 32);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 128.0 / 32.0);  // max_position_embeddings / original
  EXPECT_DOUBLE_EQ(c->rope_scaling.attention_factor,
                   std::sqrt(1.0 + std::log(4.0) / std::log(32.0)));
  EXPECT_EQ(c->rope_scaling.long_factor.size(), 8u);
  // The layout names q, k, v and gate, up by the fused HF matrices, one after the other.
  const ModelLayout layout(*c);
  const UnitSpec& b = layout.unit(layout.block_unit(1));
  const ParamSpec& k = b.param(ParamKind::kKWeight);
  EXPECT_EQ(k.name, "model.layers.1.self_attn.qkv_proj.weight:k");
  EXPECT_EQ(k.hf_fused, "model.layers.1.self_attn.qkv_proj.weight");
  EXPECT_EQ(k.hf_row_offset, 64);
  EXPECT_EQ(k.hf_fused_rows, 64 * 3);
  EXPECT_EQ(b.param(ParamKind::kMlpUpWeight).hf_row_offset, 172);
  EXPECT_EQ(layout.find_param("model.layers.1.mlp.gate_up_proj.weight"),
            &b.param(ParamKind::kMlpGateWeight));

  json j = phi3_json();
  j["rope_scaling"]["long_factor"] = {1.0, 2.0};
  expect_error(j, StatusCode::kInvalidArgument, "rope_scaling.long_factor: expected an array of 8");
  j = phi3_json();
  j["rope_scaling"]["type"] = "yarn";  // Phi3Config reads it as longrope; refused here
  expect_error(j, StatusCode::kUnimplemented, "rope_scaling.type: \"yarn\"");
  j = phi3_json();
  j["resid_pdrop"] = 0.1;
  ASSERT_TRUE(model_config_from_json(j, "x/config.json").ok());
  EXPECT_EQ(model_config_from_json(j, "x/config.json")->warnings.size(), 1u);
}

json gemma3_json() {
  json j = llama_json();
  j["model_type"] = "gemma3_text";
  j["architectures"] = {"Gemma3ForCausalLM"};
  j["num_hidden_layers"] = 7;
  j["num_key_value_heads"] = 2;
  j["head_dim"] = 32;
  j["query_pre_attn_scalar"] = 24;
  j["rope_local_base_freq"] = 10000.0;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};  // the global layers' (4b)
  return j;
}

TEST(HfConfigFamilies, Gemma3Text) {
  auto c = model_config_from_json(gemma3_json(), "x/config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->post_norms && c->qk_norm && c->tie_word_embeddings);
  EXPECT_EQ(c->norm_weight_offset, 1.0);
  EXPECT_EQ(c->hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(c->embedding_scale, 8.0f);  // sqrt(64)
  EXPECT_DOUBLE_EQ(c->attention_score_divisor(0), std::sqrt(24.0) / std::sqrt(32.0));
  // Every 6th layer global (sliding_window_pattern's default), window 4096 by default.
  for (int64_t l = 0; l < 7; ++l) EXPECT_EQ(c->attention_window(l), l == 5 ? 0 : 4096) << l;
  EXPECT_TRUE(c->uses_local_rope(0));
  EXPECT_FALSE(c->uses_local_rope(5));
  EXPECT_EQ(c->rope_theta, 1e6);  // Gemma3TextConfig's global default
  EXPECT_EQ(c->rope_scaling.type, "linear");
  EXPECT_EQ(c->local_rope_theta, 1e4);
  EXPECT_EQ(c->local_rope_scaling.type, "default");
  // Per block: q (4 x 32, 64), k and v (2 x 32, 64), o (64, 4 x 32), the MLP, q_norm / k_norm of 32
  // and four norms of 64.
  EXPECT_EQ(count_params(*c).per_block, 6 * 4096 + 3 * 64 * 172 + 4 * 64 + 2 * 32);

  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    json j = gemma3_json();
    j[key] = 50.0;
    expect_error(j, StatusCode::kUnimplemented, std::string(key) + ": 50");
  }
  json j = gemma3_json();
  j["use_bidirectional_attention"] = true;
  expect_error(j, StatusCode::kUnimplemented, "use_bidirectional_attention");
  j = gemma3_json();
  j["hidden_activation"] = "relu";
  expect_error(j, StatusCode::kUnimplemented, "hidden_activation");
}

// A multimodal Gemma 3 config (Gemma3ForConditionalGeneration): its language model from
// text_config, the outer config kept to be written back around it; what it cannot be is named.
TEST(HfConfigFamilies, MultimodalGemma3ReadsItsTextConfig) {
  json text = gemma3_json();
  text.erase("architectures");
  json j = {{"model_type", "gemma3"},
            {"architectures", {"Gemma3ForConditionalGeneration"}},
            {"text_config", text},
            {"vision_config", {{"model_type", "siglip_vision_model"}, {"hidden_size", 16}}},
            {"tie_word_embeddings", true},
            {"dtype", "bfloat16"}};
  auto c = model_config_from_json(j, "mm/config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "gemma3_text");
  EXPECT_EQ(c->multimodal_type, "gemma3");
  EXPECT_TRUE(c->tie_word_embeddings);
  // Written back: the outer config, its text_config ours, no architectures inside.
  json out = model_config_to_json(*c, "float32");
  EXPECT_EQ(out["model_type"], "gemma3");
  EXPECT_EQ(out["dtype"], "float32");
  EXPECT_EQ(out["vision_config"], j["vision_config"]);
  EXPECT_EQ(out["text_config"]["model_type"], "gemma3_text");
  EXPECT_EQ(out["text_config"]["hidden_size"], text["hidden_size"]);
  EXPECT_FALSE(out["text_config"].contains("architectures"));

  json no_text = j;
  no_text.erase("text_config");
  expect_error(no_text, StatusCode::kInvalidArgument, "text_config: missing");
  json other = j;
  other["text_config"]["model_type"] = "llama";
  expect_error(other, StatusCode::kInvalidArgument, "text_config.model_type");
  json untied = j;
  untied["text_config"]["tie_word_embeddings"] = false;
  expect_error(untied, StatusCode::kInvalidArgument, "disagrees with text_config");
  // The language model's own errors name text_config.
  json bad = j;
  bad["text_config"]["hidden_activation"] = "relu";
  expect_error(bad, StatusCode::kUnimplemented, "text_config");
}

// Item 3 of issue 31: a config naming something none of the models computes is refused, naming the
// file and the key, before anything is built from it.
TEST(HfConfigFamilies, RefusesWhatNoModelComputes) {
  for (const char* family : {"gemma", "phi", "phimoe", "qwen3_moe", "mixtral"}) {
    json j = llama_json();
    j["model_type"] = family;
    j.erase("architectures");
    expect_error(j, StatusCode::kUnimplemented, std::string("model_type: \"") + family);
  }
  const std::pair<const char*, json> keys[] = {{"num_experts", 8},
                                               {"num_local_experts", 8},
                                               {"num_experts_per_tok", 2},
                                               {"n_routed_experts", 64},
                                               {"moe_intermediate_size", 768},
                                               {"final_logit_softcapping", 30.0},
                                               {"attn_logit_softcapping", 50.0},
                                               {"query_pre_attn_scalar", 256},
                                               {"rope_local_base_freq", 1e4}};
  for (const char* family : {"llama", "qwen3"}) {
    for (const auto& [key, value] : keys) {
      json j = std::string(family) == "llama" ? llama_json() : qwen3_json();
      j[key] = value;
      expect_error(j, StatusCode::kUnimplemented, std::string(key) + ": ");
      j[key] = nullptr;  // null (or 0) is what the dense, uncapped configs write
      EXPECT_TRUE(model_config_from_json(j, "x/config.json").ok()) << key;
    }
  }
  json j = qwen3_json();
  j["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 10000.0}};
  expect_error(j, StatusCode::kUnimplemented, "rope_parameters.rope_type: \"longrope\"");
}

}  // namespace
}  // namespace zero::model
