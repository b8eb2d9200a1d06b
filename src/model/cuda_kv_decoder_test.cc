// CudaKvDecoder against the CPU KvDecoder (itself tested against the full forward on HF models,
// kv_decoder_test.cc) and against the CUDA model's own full forward: the logits from a prompt's
// prefill (the flash kernel), a few rows after it and then one token at a time (attention over the
// cache), and of a prompt that fills the whole cache at once, for tiny random models (GPT-2 with
// its per-layer score divisor; Llama with GQA, Llama 3 RoPE scaling and a tied head; Llama with
// biases, linear RoPE scaling and a sliding window on one layer; Qwen3, Phi-3, Gemma 3, Gemma 2)
// with fp32 and bf16 weights; and Phi-3's longrope switching from its short to its long table past
// its original context (per slot, re-encoding the slot), as the CPU decoder does.
// Self-contained (no fixture files: the GPU pack runs it too). Runs on a GPU, and on the CPU
// emulator as cuda_kv_decoder_emu_test (docs/emu.md).
#include "model/cuda_kv_decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "core/dtype.h"
#include "kernels/cuda_test_util.h"
#include "model/cuda_test_configs.h"
#include "model/cuda_transformer.h"
#include "model/golden_testing.h"
#include "model/kv_decoder.h"

namespace zero::model {
namespace {

using kernels::testing::DeviceArray;

// Largest |a - b| over a row, relative to the row's largest |b| (kv_decoder_test.cc's measure).
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return err / scale;
}

// The shared tiny models (cuda_test_configs.h) with 16 positions.
constexpr int64_t kPositions = 16;

ModelConfig gpt2_config() { return testing::tiny_gpt2_config(kPositions); }

// GQA, llama3 RoPE scaling, a tied head.
ModelConfig llama_config() { return testing::tiny_llama_config(kPositions, /*tied=*/true); }

// Untied, q/k/v/o and MLP biases, linear RoPE scaling, a sliding window of 5 on layer 0.
ModelConfig llama_sliding_config() { return testing::tiny_llama_biased_config(kPositions); }

// Qwen3: q_norm / k_norm, head_dim 12, a sliding window on layer 1.
ModelConfig qwen3_config() { return testing::tiny_qwen3_config(kPositions); }

// Phi-3: longrope (original context 4: the decoders switch to the long factors past it, the
// 16-token full forward uses them throughout), a sliding window on every layer, tied.
ModelConfig phi3_config() { return testing::tiny_phi3_config(kPositions); }

// Gemma 3: post-norms, GeGLU, scaled embeddings, the sliding layer's own RoPE.
ModelConfig gemma3_config() { return testing::tiny_gemma3_config(kPositions); }

// Gemma 2: no q_norm / k_norm, soft-capped attention scores (the flash prefill and the decode
// kernel) and logits.
ModelConfig gemma2_config() { return testing::tiny_gemma2_config(kPositions); }

// Every unit's values, uniform around 0 (norm weights around 1), from a fixed seed.
std::vector<std::vector<float>> random_units(const ModelLayout& layout) {
  std::mt19937 rng(7);
  std::vector<std::vector<float>> units;
  // A norm weight's identity: 1, or 0 for Gemma's (1 + w).
  const float identity = static_cast<float>(1.0 - layout.config().norm_weight_offset);
  for (const UnitSpec& u : layout.units()) {
    std::vector<float> values(static_cast<size_t>(u.numel));
    for (const ParamSpec& p : u.params) {
      const bool norm =
          p.kind == ParamKind::kAttnNormWeight || p.kind == ParamKind::kMlpNormWeight ||
          p.kind == ParamKind::kFinalNormWeight || p.kind == ParamKind::kQNormWeight ||
          p.kind == ParamKind::kKNormWeight || p.kind == ParamKind::kPostAttnNormWeight ||
          p.kind == ParamKind::kPostMlpNormWeight;
      std::uniform_real_distribution<float> dist(-0.3f, 0.3f);
      for (int64_t i = 0; i < p.numel(); ++i) {
        values[static_cast<size_t>(p.offset + i)] = (norm ? identity : 0.0f) + dist(rng);
      }
    }
    units.push_back(std::move(values));
  }
  return units;
}

// fp32 throughout on both sides (the same values, fp32 GEMMs): they differ by summation order
// only. The CPU KvDecoder meets the CPU full forward within the same bound.
constexpr double kTolerance = 1e-5;

// A 16-bit model's decoder rounds every GEMM's input to the dtype (autocast, as the CUDA model's
// forward; attention stays fp32 over the fp32 cache): 4 roundings per block (GPT-2: qkv's, proj's,
// fc's and fc2's inputs; Llama: q/k/v's, o's, gate/up's and down's) and the head's, R = 4L + 1 in a
// chain, each of relative RMS u / sqrt(3) (u = 2^-8 bf16); with cuda_transformer_test.cc's factor
// 3 for the Jacobians on the way, sqrt(3 R) u on the logits' error norm (L = 2: 2.0e-2 bf16).
::testing::AssertionResult logits_close(const std::vector<float>& got,
                                        const std::vector<float>& want, const ModelConfig& c,
                                        DType dtype) {
  if (dtype == DType::kF32) {
    const double err = relative_error(got, want);
    if (err < kTolerance) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "relative error " << err << " >= " << kTolerance;
  }
  const double u = dtype == DType::kBF16 ? 0x1p-8 : 0x1p-11;
  const double roundings = 4.0 * static_cast<double>(c.num_layers) + 1.0;
  return kernels::testing::norm_close(got, want, std::sqrt(3.0 * roundings) * u);
}

// Every unit in device memory, in the dtype of `host`'s views (bitwise their bytes).
class DeviceParams : public ParamAccess {
 public:
  DeviceParams(ParamAccess& host, int num_units) {
    for (int u = 0; u < num_units; ++u) {
      const ParamView v = host.acquire(u);
      std::vector<char> bytes(static_cast<const char*>(v.data),
                              static_cast<const char*>(v.data) + v.numel * dtype_bytes(v.dtype));
      views_.push_back(v);
      arrays_.push_back(std::make_unique<DeviceArray<char>>(bytes));
      views_.back().data = arrays_.back()->get();
      views_.back().device = Device::kCuda;
      host.release(u);
    }
  }
  ParamView acquire(int u) override { return views_[static_cast<size_t>(u)]; }
  void release(int) override {}

 private:
  std::vector<ParamView> views_;
  std::vector<std::unique_ptr<DeviceArray<char>>> arrays_;
};

struct ModelCase {
  const char* name;
  ModelConfig (*config)();
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

class CudaKvDecoderTest : public ::testing::TestWithParam<std::tuple<ModelCase, DType>> {};

TEST_P(CudaKvDecoderTest, LogitsEqualTheCpuDecoderAndTheFullForward) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto [model_case, dtype] = GetParam();
  const ModelConfig config = model_case.config();
  const ModelLayout layout(config);
  const std::vector<std::vector<float>> units = random_units(layout);
  testing::TypedResidentParams typed(units, dtype);
  testing::ResidentParams f32(units);
  ParamAccess& host = dtype == DType::kF32 ? static_cast<ParamAccess&>(f32) : typed;
  DeviceParams device(host, layout.num_units());

  zero::cuda::CudaStream stream;
  auto model = CudaTransformer::create(config, {}, stream.get());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  // The whole cache: the models' context window.
  const int64_t T = config.max_position_embeddings, V = config.vocab_size;
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) tokens[static_cast<size_t>(t)] = (t * 37 + 11) % V;
  auto gpu = CudaKvDecoder::create(**model, T);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  KvDecoder cpu(layout, T);

  // A prompt of 5 in one append (the prefill into the empty cache), 3 more in one append (rows
  // after cached ones), then one token at a time up to the capacity.
  std::vector<std::vector<float>> got(static_cast<size_t>(T));  // by position: the last of appends
  std::vector<float> logits(static_cast<size_t>(V)), want(static_cast<size_t>(V));
  std::vector<int64_t> lasts;  // the positions whose logits an append returned
  for (int64_t first = 0; first < T;) {
    const int64_t n = first == 0 ? 5 : first == 5 ? 3 : 1;
    (*gpu)->append(device, tokens.data() + first, n, logits.data());
    cpu.append(host, tokens.data() + first, n, want.data());
    first += n;
    EXPECT_TRUE(logits_close(logits, want, config, dtype)) << "position " << first - 1;
    got[static_cast<size_t>(first - 1)] = logits;
    lasts.push_back(first - 1);
  }
  EXPECT_EQ((*gpu)->length(), T);
  EXPECT_GE((*gpu)->device_bytes(), CudaKvDecoder::cache_bytes(config, T));

  // The CUDA model's full forward over the same tokens, position by position, on the fp32 values
  // of the units (a 16-bit model's forward runs attention on 16-bit copies of q, k, v, as
  // torch.autocast's SDPA; the decoders keep fp32 activations).
  // Position t's logits are the full forward's of the first t + 1 tokens: those of all T serve
  // every position but longrope's within its original context, which use the short table (the
  // full forward of that many tokens).
  testing::ResidentParams widened(typed.widened());
  DeviceParams device_f32(dtype == DType::kF32 ? host : widened, layout.num_units());
  auto full = CudaTransformer::create(config, {}, stream.get());
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  (*full)->forward(device_f32, tokens.data(), nullptr, 1, T);
  const int64_t original = config.rope_scaling.original_max_position_embeddings;
  const bool longrope = config.rope_scaling.type == "longrope" && original < T;
  std::unique_ptr<CudaTransformer> within;
  if (longrope) {
    auto m = CudaTransformer::create(config, {}, stream.get());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    within = std::move(*m);
    within->forward(device_f32, tokens.data(), nullptr, 1, original);
  }
  for (int64_t t : lasts) {
    (longrope && t < original ? *within : **full).logits_at(0, t, want.data());
    EXPECT_TRUE(logits_close(got[static_cast<size_t>(t)], want, config, dtype))
        << "full forward, position " << t;
  }

  // A prompt that fills the cache in one prefill (after a reset, as generation re-reads its
  // window).
  (*gpu)->reset();
  (*gpu)->append(device, tokens.data(), T, logits.data());
  EXPECT_TRUE(logits_close(logits, got.back(), config, dtype)) << "one prefill of " << T;
  EXPECT_EQ((*gpu)->length(), T);
}

// A bf16 cache rounds each layer's new keys and values (2 roundings per layer) on top of a 16-bit
// model's GEMM inputs: logits_close's bound with those roundings counted.
::testing::AssertionResult bf16_cache_close(const std::vector<float>& got,
                                            const std::vector<float>& want, const ModelConfig& c,
                                            DType weights) {
  const double layers = static_cast<double>(c.num_layers);
  const double roundings = 2.0 * layers + (weights == DType::kF32 ? 0.0 : 4.0 * layers + 1.0);
  return kernels::testing::norm_close(got, want, std::sqrt(3.0 * roundings) * 0x1p-8);
}

// Three slots of one cache: ragged prompts prefilled in one append, then decode rows beside a new
// prompt in a freed slot (kv_decoder_test.cc's schedule), against the CPU KvDecoder with the same
// slots and appends (itself tested against one single-slot decoder per sequence); with an fp32 and
// a bf16 cache. The bf16 cache's batch also against one single-slot bf16-cache decoder per
// sequence (the same roundings: fp32 summation order apart).
TEST_P(CudaKvDecoderTest, BatchedSlotsEqualTheCpuDecoder) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto [model_case, dtype] = GetParam();
  const ModelConfig config = model_case.config();
  const ModelLayout layout(config);
  const std::vector<std::vector<float>> units = random_units(layout);
  testing::TypedResidentParams typed(units, dtype);
  testing::ResidentParams f32(units);
  ParamAccess& host = dtype == DType::kF32 ? static_cast<ParamAccess&>(f32) : typed;
  DeviceParams device(host, layout.num_units());
  zero::cuda::CudaStream stream;
  auto model = CudaTransformer::create(config, {}, stream.get());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int64_t V = config.vocab_size, capacity = 12;
  std::vector<std::vector<int32_t>> seqs(4);
  for (int64_t s = 0; s < 4; ++s) {
    for (int64_t t = 0; t < 12; ++t) {
      seqs[static_cast<size_t>(s)].push_back(static_cast<int32_t>((s * 101 + t * 37 + 5) % V));
    }
  }
  const int64_t prompt[4] = {7, 3, 1, 5};
  // (sequence, slot) per step: 0-2 prefill, decode twice, 3 replaces 1 while 0 and 2 decode.
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> steps = {
      {{0, 0}, {1, 1}, {2, 2}}, {{0, 0}, {1, 1}, {2, 2}}, {{2, 2}, {0, 0}, {1, 1}},
      {{0, 0}, {3, 1}, {2, 2}}, {{3, 1}, {0, 0}, {2, 2}}, {{0, 0}, {2, 2}, {3, 1}}};
  for (const DType cache : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(cache == DType::kF32 ? "fp32 cache" : "bf16 cache");
    auto gpu = CudaKvDecoder::create(**model, capacity, 3, cache);
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    EXPECT_EQ((*gpu)->slots(), 3);
    KvDecoder cpu(layout, capacity, 3);
    std::vector<std::unique_ptr<CudaKvDecoder>> alone;  // bf16: one per sequence
    for (int s = 0; s < 4 && cache == DType::kBF16; ++s) {
      auto one = CudaKvDecoder::create(**model, capacity, 1, cache);
      ASSERT_TRUE(one.ok()) << one.status().to_string();
      alone.push_back(std::move(*one));
    }
    std::vector<int64_t> read(4, 0);
    double worst = 0;  // largest relative difference from the CPU's fp32 cache
    for (size_t k = 0; k < steps.size(); ++k) {
      std::vector<SlotTokens> entries;
      std::vector<int64_t> seq_of;
      for (const auto& [seq, slot] : steps[k]) {
        const int64_t at = read[static_cast<size_t>(seq)];
        if (at == 0) {
          (*gpu)->reset_slot(slot);
          cpu.reset_slot(slot);
        }
        entries.push_back(
            {slot, seqs[static_cast<size_t>(seq)].data() + at, at == 0 ? prompt[seq] : 1});
        seq_of.push_back(seq);
        read[static_cast<size_t>(seq)] += entries.back().n;
      }
      std::vector<float> got(entries.size() * static_cast<size_t>(V)), want(got.size());
      (*gpu)->append_batch(device, entries, got.data());
      cpu.append_batch(host, entries, want.data());
      for (size_t e = 0; e < entries.size(); ++e) {
        const auto row = [&](const std::vector<float>& all) {
          return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(e * V),
                                    all.begin() + static_cast<std::ptrdiff_t>((e + 1) * V));
        };
        if (cache == DType::kF32) {
          EXPECT_TRUE(logits_close(row(got), row(want), config, dtype))
              << "step " << k << " entry " << e;
        } else {
          EXPECT_TRUE(bf16_cache_close(row(got), row(want), config, dtype))
              << "step " << k << " entry " << e;
          std::vector<float> one(static_cast<size_t>(V));
          alone[static_cast<size_t>(seq_of[e])]->append(device, entries[e].tokens, entries[e].n,
                                                        one.data());
          EXPECT_LT(relative_error(row(got), one), kTolerance) << "step " << k << " entry " << e;
        }
        EXPECT_EQ((*gpu)->slot_length(entries[e].slot), cpu.slot_length(entries[e].slot));
        worst = std::max(worst, relative_error(row(got), row(want)));
      }
    }
    std::printf("%s %s weights, %s cache: batched vs the CPU, largest relative difference %.2e\n",
                model_case.name, dtype == DType::kF32 ? "fp32" : "bf16",
                cache == DType::kF32 ? "fp32" : "bf16", worst);
    EXPECT_GE((*gpu)->device_bytes(), CudaKvDecoder::cache_bytes(config, capacity, 3, cache));
  }
  EXPECT_EQ(CudaKvDecoder::cache_bytes(config, capacity, 3, DType::kBF16) * 2,
            CudaKvDecoder::cache_bytes(config, capacity, 3, DType::kF32));
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaKvDecoderTest,
    ::testing::Combine(
        ::testing::Values(ModelCase{"gpt2", gpt2_config}, ModelCase{"llama", llama_config},
                          ModelCase{"llama_sliding", llama_sliding_config},
                          ModelCase{"qwen3", qwen3_config}, ModelCase{"phi3", phi3_config},
                          ModelCase{"gemma3", gemma3_config}, ModelCase{"gemma2", gemma2_config}),
        ::testing::Values(DType::kF32, DType::kBF16)),
    [](const ::testing::TestParamInfo<std::tuple<ModelCase, DType>>& info) {
      return std::string(std::get<0>(info.param).name) +
             (std::get<1>(info.param) == DType::kF32 ? "_fp32" : "_bf16");
    });

// Phi-3's longrope (original context 4) in one slot and in three: appends that stay within the
// original context, cross it by one token and by several (re-encoding the slot: the flash prefill
// over its positions again), start past it, and restart after a reset, against the CPU KvDecoder
// (itself against the full forward of each length, kv_decoder_test.cc), with an fp32 and a bf16
// cache. Each slot switches at its own length.
TEST(CudaKvDecoder, LongropeSwitchesTablesPerSlotAsTheCpuDecoder) {
  ZERO_SKIP_WITHOUT_GPU();
  const ModelConfig config = phi3_config();
  ASSERT_EQ(config.rope_scaling.original_max_position_embeddings, 4);
  const ModelLayout layout(config);
  testing::ResidentParams host(random_units(layout));
  DeviceParams device(host, layout.num_units());
  zero::cuda::CudaStream stream;
  auto model = CudaTransformer::create(config, {}, stream.get());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int64_t V = config.vocab_size;
  std::vector<std::vector<int32_t>> seqs(4);
  for (int64_t s = 0; s < 4; ++s) {
    for (int64_t t = 0; t < kPositions; ++t) {
      seqs[static_cast<size_t>(s)].push_back(static_cast<int32_t>((s * 29 + t * 37 + 11) % V));
    }
  }
  struct Entry {
    int64_t slot, seq, n;
  };
  // (slot, sequence, tokens) per step; a slot's new sequence resets it. One slot: within, then
  // crossing by three; sequence 1 within, then crossing by one. Three slots (kv_decoder_test.cc's
  // KvDecoderLongrope.BatchedSlotsSwitchTablesAtTheirOwnLengths with the context halved): slot 2
  // long from its prompt; slot 0 crosses alone at step 2, slot 1 at step 3; sequence 3 replaces
  // sequence 1 in slot 1 at step 4 and crosses by three at step 5.
  const std::vector<std::vector<Entry>> one_slot = {{{0, 0, 3}}, {{0, 0, 3}}, {{0, 0, 1}},
                                                    {{0, 1, 2}}, {{0, 1, 1}}, {{0, 1, 1}},
                                                    {{0, 1, 1}}, {{0, 1, 1}}};
  const std::vector<std::vector<Entry>> three_slots = {{{0, 0, 3}, {1, 1, 1}, {2, 2, 6}},
                                                       {{0, 0, 1}, {1, 1, 1}, {2, 2, 1}},
                                                       {{0, 0, 1}, {1, 1, 2}, {2, 2, 1}},
                                                       {{1, 1, 1}, {0, 0, 1}},
                                                       {{1, 3, 2}, {0, 0, 2}},
                                                       {{0, 0, 1}, {1, 3, 3}}};
  for (const DType cache : {DType::kF32, DType::kBF16}) {
    for (const auto* steps : {&one_slot, &three_slots}) {
      const int64_t slots = steps == &one_slot ? 1 : 3;
      SCOPED_TRACE(std::string(cache == DType::kF32 ? "fp32" : "bf16") + " cache, " +
                   std::to_string(slots) + " slot(s)");
      auto gpu = CudaKvDecoder::create(**model, kPositions, slots, cache);
      ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
      KvDecoder cpu(layout, kPositions, slots);
      std::vector<int64_t> read(4, 0);  // tokens of each sequence read so far
      std::vector<int64_t> seq_in_slot(static_cast<size_t>(slots), -1);
      for (size_t k = 0; k < steps->size(); ++k) {
        std::vector<SlotTokens> entries;
        for (const Entry& e : (*steps)[k]) {
          if (seq_in_slot[static_cast<size_t>(e.slot)] != e.seq) {  // a new sequence: reset
            (*gpu)->reset_slot(e.slot);
            cpu.reset_slot(e.slot);
            seq_in_slot[static_cast<size_t>(e.slot)] = e.seq;
          }
          entries.push_back(
              {e.slot, seqs[static_cast<size_t>(e.seq)].data() + read[static_cast<size_t>(e.seq)],
               e.n});
          read[static_cast<size_t>(e.seq)] += e.n;
        }
        std::vector<float> got(entries.size() * static_cast<size_t>(V)), want(got.size());
        (*gpu)->append_batch(device, entries, got.data());
        cpu.append_batch(host, entries, want.data());
        for (size_t i = 0; i < entries.size(); ++i) {
          const auto row = [&](const std::vector<float>& all) {
            return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(i * V),
                                      all.begin() + static_cast<std::ptrdiff_t>((i + 1) * V));
          };
          const int64_t length = read[static_cast<size_t>((*steps)[k][i].seq)];
          if (cache == DType::kF32) {
            EXPECT_TRUE(logits_close(row(got), row(want), config, DType::kF32))
                << "step " << k << ", slot " << entries[i].slot << " at " << length;
          } else {
            EXPECT_TRUE(bf16_cache_close(row(got), row(want), config, DType::kF32))
                << "step " << k << ", slot " << entries[i].slot << " at " << length;
          }
          EXPECT_EQ((*gpu)->slot_length(entries[i].slot), length);
        }
      }
    }
  }
}

TEST(CudaKvDecoder, RefusesACacheTheModelCannotHold) {
  ZERO_SKIP_WITHOUT_GPU();
  const ModelConfig config = gpt2_config();
  zero::cuda::CudaStream stream;
  auto model = CudaTransformer::create(config, {}, stream.get());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto past = CudaKvDecoder::create(**model, config.max_position_embeddings + 1);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("max_position_embeddings"), std::string::npos)
      << past.status().to_string();
  EXPECT_FALSE(CudaKvDecoder::create(**model, 0).ok());
}

}  // namespace
}  // namespace zero::model
