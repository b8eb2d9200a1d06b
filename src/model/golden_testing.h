// Test support (header only, for *_test.cc): the committed PyTorch golden models
// (tests/fixtures/golden, made by tools/golden/make_fixtures.py) loaded whole, and a ParamAccess
// over fully resident units (what a single rank without ZeRO does).
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "core/storage.h"
#include "model/hf_checkpoint.h"
#include "model/param_access.h"
#include "model/param_layout.h"

namespace zero::model::testing {

inline const std::string kGolden = std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/";

// Parameters held fully in memory; counts acquires not yet released.
class ResidentParams : public ParamAccess {
 public:
  explicit ResidentParams(std::vector<std::vector<float>> units) : units_(std::move(units)) {}
  ParamView acquire(int u) override {
    held_ += 1;
    const std::vector<float>& values = units_[static_cast<size_t>(u)];
    return ParamView{values.data(), DType::kF32, Device::kCpu, static_cast<int64_t>(values.size())};
  }
  void release(int) override { held_ -= 1; }
  std::vector<std::vector<float>>& units() { return units_; }
  int held() const { return held_; }

 private:
  std::vector<std::vector<float>> units_;
  int held_ = 0;
};

// Parameters held fully in memory in a 16-bit dtype (what a ParamCoordinator hands a bf16/fp16
// model): the values rounded to `dtype`, stored in it. widened() gives them back as fp32.
class TypedResidentParams : public ParamAccess {
 public:
  TypedResidentParams(const std::vector<std::vector<float>>& units, DType dtype) : dtype_(dtype) {
    for (const std::vector<float>& u : units) {
      std::vector<char> bytes(u.size() * dtype_bytes(dtype));
      convert_from_f32(u.data(), bytes.data(), dtype, u.size());
      units_.push_back(std::move(bytes));
    }
  }
  ParamView acquire(int u) override {
    const std::vector<char>& bytes = units_[static_cast<size_t>(u)];
    return ParamView{bytes.data(), dtype_, Device::kCpu,
                     static_cast<int64_t>(bytes.size() / dtype_bytes(dtype_))};
  }
  void release(int) override {}
  // The same values as fp32 (exact).
  std::vector<std::vector<float>> widened() const {
    std::vector<std::vector<float>> out;
    for (const std::vector<char>& bytes : units_) {
      std::vector<float> u(bytes.size() / dtype_bytes(dtype_));
      convert_to_f32(bytes.data(), dtype_, u.data(), u.size());
      out.push_back(std::move(u));
    }
    return out;
  }

 private:
  DType dtype_;
  std::vector<std::vector<char>> units_;
};

struct GoldenModel {
  ModelConfig config;
  std::vector<std::vector<float>> units;  // every unit's parameters, in ModelLayout order
};

// Loads an HF model directory (config.json + model.safetensors or its sharded form) unit by unit,
// the way `zero train --model DIR` reads it.
inline GoldenModel load_hf_dir(const std::string& dir) {
  GoldenModel g;
  auto config = load_model_config(dir);
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  if (!config.ok()) return g;
  g.config = *config;
  ModelLayout layout(g.config);
  auto reader = HfWeightReader::open(*default_storage(), dir, layout);
  if (!reader.ok()) {
    ADD_FAILURE() << reader.status().to_string();
    return g;
  }
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<float> buf(static_cast<size_t>(layout.unit(u).numel));
    Status s = (*reader)->read_unit_range(u, 0, layout.unit(u).numel, buf.data());
    EXPECT_TRUE(s.ok()) << s.to_string();
    g.units.push_back(std::move(buf));
  }
  return g;
}

// Loads tests/fixtures/golden/<name> (config.json + model.safetensors).
inline GoldenModel load_golden(const std::string& name) { return load_hf_dir(kGolden + name); }

}  // namespace zero::model::testing
