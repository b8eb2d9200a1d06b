// DeepSpeed `optimizer` block parsing: names, defaults, the Adam/AdamW rule and errors.
#include "optim/optimizer_spec.h"

#include <gtest/gtest.h>

namespace zero::optim {
namespace {

using nlohmann::json;

TEST(OptimizerSpec, AdamDefaultsAreAdamW) {
  auto s = optimizer_spec_from_json("Adam", json::object());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->kind, OptimizerKind::kAdam);
  EXPECT_EQ(s->type_name, "adam");
  EXPECT_TRUE(s->adam_w_mode);  // DeepSpeed: adam_w_mode defaults to true
  EXPECT_EQ(s->lr, 1e-3);
  EXPECT_EQ(s->beta1, 0.9);
  EXPECT_EQ(s->beta2, 0.999);
  EXPECT_EQ(s->eps, 1e-8);
  EXPECT_EQ(s->weight_decay, 0.0);
  EXPECT_TRUE(s->bias_correction);
}

TEST(OptimizerSpec, AdamWModeRules) {
  auto l2 = optimizer_spec_from_json("adam", {{"adam_w_mode", false}});
  ASSERT_TRUE(l2.ok());
  EXPECT_FALSE(l2->adam_w_mode);
  // "AdamW" forces decoupled decay even if adam_w_mode says false (effective = adamw or flag).
  auto forced = optimizer_spec_from_json("AdamW", {{"adam_w_mode", false}});
  ASSERT_TRUE(forced.ok());
  EXPECT_TRUE(forced->adam_w_mode);
  EXPECT_EQ(forced->type_name, "adamw");
  auto torch_adam = optimizer_spec_from_json("ADAM", {{"torch_adam", true}, {"amsgrad", false}});
  ASSERT_TRUE(torch_adam.ok());
  EXPECT_TRUE(torch_adam->torch_adam);
}

TEST(OptimizerSpec, ParsesParams) {
  auto s = optimizer_spec_from_json("AdamW", {{"lr", 3e-4},
                                              {"betas", {0.9, 0.95}},
                                              {"eps", 1e-6},
                                              {"weight_decay", 0.1},
                                              {"bias_correction", false}});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->lr, 3e-4);
  EXPECT_EQ(s->beta2, 0.95);
  EXPECT_EQ(s->eps, 1e-6);
  EXPECT_FALSE(s->bias_correction);
  const AdamArgs a = s->adam_args(1e-4, 7, 0.0);
  EXPECT_EQ(a.lr, 1e-4f);
  EXPECT_EQ(a.step, 7);
  EXPECT_EQ(a.weight_decay, 0.0f);
  EXPECT_EQ(a.beta2, 0.95f);
  EXPECT_FALSE(a.bias_correction);
}

TEST(OptimizerSpec, Lamb) {
  auto s = optimizer_spec_from_json("LAMB", {{"max_coeff", 5.0}, {"min_coeff", 0.1}});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->kind, OptimizerKind::kLamb);
  const LambArgs a = s->lamb_args(1e-3, 1, 0.01);
  EXPECT_EQ(a.max_coeff, 5.0f);
  EXPECT_EQ(a.min_coeff, 0.1f);
  EXPECT_FALSE(a.eps_inside_sqrt);
  auto defaults = optimizer_spec_from_json("lamb", json::object());
  EXPECT_EQ(defaults->max_coeff, 10.0);
  EXPECT_EQ(defaults->min_coeff, 0.01);
  EXPECT_FALSE(optimizer_spec_from_json("lamb", {{"adam_w_mode", true}}).ok());
}

TEST(OptimizerSpec, Errors) {
  auto clip = optimizer_spec_from_json("Adam", {{"max_grad_norm", 1.0}});
  ASSERT_FALSE(clip.ok());
  EXPECT_NE(clip.status().message().find("gradient_clipping"), std::string::npos);
  auto ams = optimizer_spec_from_json("Adam", {{"amsgrad", true}});
  ASSERT_FALSE(ams.ok());
  EXPECT_EQ(ams.status().code(), StatusCode::kUnimplemented);
  auto typo = optimizer_spec_from_json("Adam", {{"weight_decays", 0.1}});
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("weight_decays"), std::string::npos);
  EXPECT_EQ(optimizer_spec_from_json("OneBitAdam", json::object()).status().code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ(optimizer_spec_from_json("RMSprop", json::object()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(optimizer_spec_from_json("Adam", {{"betas", {0.9}}}).ok());
  EXPECT_FALSE(optimizer_spec_from_json("Adam", {{"betas", {0.9, 1.0}}}).ok());
  EXPECT_FALSE(optimizer_spec_from_json("Adam", {{"lr", -1}}).ok());
  EXPECT_FALSE(optimizer_spec_from_json("Adam", {{"lr", "1e-3"}}).ok());
  EXPECT_FALSE(optimizer_spec_from_json("Adam", {{"adam_w_mode", 1}}).ok());
}

TEST(OptimizerSpec, ToJsonRoundTrip) {
  auto s = optimizer_spec_from_json("AdamW", {{"lr", 2e-4}, {"weight_decay", 0.05}});
  const json j = optimizer_spec_to_json(*s);
  json params = j;
  params.erase("type");
  auto back = optimizer_spec_from_json(j["type"].get<std::string>(), params);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(optimizer_spec_to_json(*back), j);
}

}  // namespace
}  // namespace zero::optim
