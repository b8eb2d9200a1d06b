// CudaTransformer against the CPU Transformer (the oracle, itself checked against PyTorch in
// transformer_test.cc): loss, logits and every unit's gradient over two accumulating micro-steps,
// for tiny GPT-2 and Llama (GQA, llama3 / linear RoPE scaling, SwiGLU, RMSNorm, tied and untied,
// biases, a sliding window) models in fp32, bf16 and fp16 working dtypes (16-bit: autocast-style
// GEMMs, within a derived tolerance of the fp32 CPU model), with and without
// activation checkpointing; checkpoints in pinned host memory (cpu_checkpointing) against
// checkpoints in device memory, bitwise. Also the ParamAccess / GradSink call order, which the
// engine relies on.
// Runs on a GPU, and on the CPU emulator as cuda_transformer_emu_test (docs/emu.md).
#include "model/cuda_transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "core/dtype.h"
#include "kernels/cuda_test_util.h"
#include "kernels/tolerance.h"
#include "model/cuda_host_checkpoints.h"
#include "model/cuda_test_configs.h"
#include "model/cuda_transformer_buffers.h"
#include "model/model_config.h"
#include "model/transformer.h"

namespace zero::model {
namespace {

using kernels::testing::all_close;
using kernels::testing::DeviceArray;
using kernels::testing::norm_close;

// The shared tiny models (cuda_test_configs.h); B = 2 sequences of T = 8 tokens.
using testing::kVocab;
constexpr int64_t kB = 2, kT = 8;
constexpr int64_t kHeadChunkRows = 5;

ModelConfig gpt2_config() { return testing::tiny_gpt2_config(/*positions=*/16); }

// GQA, llama3 RoPE scaling.
ModelConfig llama_config(bool tied) { return testing::tiny_llama_config(/*positions=*/64, tied); }

// Untied, q/k/v/o and MLP biases, linear RoPE scaling, a sliding window on layer 0.
ModelConfig llama_biased_config() { return testing::tiny_llama_biased_config(/*positions=*/64); }

// Qwen3: q_norm / k_norm, head_dim 12, a sliding window on layer 1.
ModelConfig qwen3_config() { return testing::tiny_qwen3_config(/*positions=*/64); }

// Phi-3: longrope with its long factors, a sliding window on every layer, tied.
ModelConfig phi3_config() { return testing::tiny_phi3_config(/*positions=*/64); }

// Gemma 3: post-norms, GeGLU, scaled embeddings, the sliding layer's own RoPE.
ModelConfig gemma3_config() { return testing::tiny_gemma3_config(/*positions=*/64); }

// Gemma 2: Gemma 3's block without q_norm / k_norm, soft-capped attention scores and logits.
ModelConfig gemma2_config() { return testing::tiny_gemma2_config(/*positions=*/64); }

// Every unit's parameters on the host (fp32 values, and their 16-bit bits for a 16-bit model) and
// on the device; the same values for both models. Logs acquire (u) and release (~u).
class TestParams {
 public:
  TestParams(const ModelLayout& layout, DType dtype, uint32_t seed) : dtype_(dtype) {
    std::mt19937 rng(seed);
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
        const bool embedding =
            p.kind == ParamKind::kTokenEmbedding || p.kind == ParamKind::kPositionEmbedding;
        const float scale = embedding ? 0.5f : 0.3f;
        std::uniform_real_distribution<float> dist(-scale, scale);
        for (int64_t i = 0; i < p.numel(); ++i) {
          values[static_cast<size_t>(p.offset + i)] = (norm ? identity : 0.0f) + dist(rng);
        }
      }
      if (dtype == DType::kF32) {
        host_f32_.push_back(values);
        device_f32_.push_back(std::make_unique<DeviceArray<float>>(values));
      } else {
        std::vector<uint16_t> bits(values.size());
        convert_from_f32(values.data(), bits.data(), dtype, values.size());
        host_16_.push_back(bits);
        device_16_.push_back(std::make_unique<DeviceArray<uint16_t>>(bits));
      }
    }
  }

  // The ParamAccess of one model: host or device memory.
  class Access : public ParamAccess {
   public:
    Access(TestParams& params, Device device) : params_(params), device_(device) {}
    ParamView acquire(int u) override {
      log.push_back(u);
      const size_t i = static_cast<size_t>(u);
      const bool f32 = params_.dtype_ == DType::kF32;
      ParamView v;
      v.dtype = params_.dtype_;
      v.device = device_;
      if (device_ == Device::kCpu) {
        v.data = f32 ? static_cast<const void*>(params_.host_f32_[i].data())
                     : static_cast<const void*>(params_.host_16_[i].data());
        v.numel =
            static_cast<int64_t>(f32 ? params_.host_f32_[i].size() : params_.host_16_[i].size());
      } else {
        v.data = f32 ? static_cast<const void*>(params_.device_f32_[i]->get())
                     : static_cast<const void*>(params_.device_16_[i]->get());
        v.numel = static_cast<int64_t>(f32 ? params_.device_f32_[i]->size()
                                           : params_.device_16_[i]->size());
      }
      return v;
    }
    void release(int u) override { log.push_back(~u); }
    std::vector<int> log;

   private:
    TestParams& params_;
    Device device_;
  };

 private:
  DType dtype_;
  std::vector<std::vector<float>> host_f32_;
  std::vector<std::vector<uint16_t>> host_16_;
  std::vector<std::unique_ptr<DeviceArray<float>>> device_f32_;
  std::vector<std::unique_ptr<DeviceArray<uint16_t>>> device_16_;
};

class HostGrads : public GradSink {
 public:
  explicit HostGrads(const ModelLayout& layout) {
    for (const UnitSpec& u : layout.units()) grads.emplace_back(static_cast<size_t>(u.numel), 0.0f);
  }
  float* grad_buffer(int u) override { return grads[static_cast<size_t>(u)].data(); }
  void grad_ready(int u) override { ready.push_back(u); }
  std::vector<std::vector<float>> grads;
  std::vector<int> ready;
};

class DeviceGrads : public GradSink {
 public:
  explicit DeviceGrads(const ModelLayout& layout) {
    for (const UnitSpec& u : layout.units()) {
      grads.push_back(std::make_unique<DeviceArray<float>>(static_cast<size_t>(u.numel)));
    }
  }
  float* grad_buffer(int u) override { return grads[static_cast<size_t>(u)]->get(); }
  void grad_ready(int u) override { ready.push_back(u); }
  std::vector<std::unique_ptr<DeviceArray<float>>> grads;
  std::vector<int> ready;
};

struct Batch {
  std::vector<int32_t> tokens, targets;
};

// Random tokens and targets (B, T); a few targets ignored (-100).
Batch make_batch(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(kVocab) - 1);
  Batch b;
  for (int64_t i = 0; i < kB * kT; ++i) {
    b.tokens.push_back(tok(rng));
    b.targets.push_back(i % 7 == 3 ? -100 : tok(rng));
  }
  return b;
}

// GEMM outputs (logits, gradients) sum many products: the relative error norm at the fp32 bound,
// and elementwise with an absolute floor at the norm's scale (summation order makes the small
// elements of a cancelling sum relatively less exact). `norm_rtol` replaces the fp32 bound.
::testing::AssertionResult matches(const std::vector<float>& got, const std::vector<float>& want,
                                   double norm_rtol = kernels::norm_rtol_for(DType::kF32)) {
  const kernels::Tolerance tol = kernels::tolerance_for(DType::kF32);
  ::testing::AssertionResult by_norm = norm_close(got, want, norm_rtol);
  if (!by_norm) return by_norm;
  double max_abs = 0;
  for (float w : want) max_abs = std::max(max_abs, static_cast<double>(std::fabs(w)));
  return all_close(got, want, {std::max(tol.rtol * 10, norm_rtol), norm_rtol * max_abs});
}

// A 16-bit model against the CPU model, which widens the same 16-bit weights and computes in fp32:
// the GPU rounds the GEMMs' activation inputs and output gradients, and attention's q, k, v,
// output, dy and dq, dk, dv, to the dtype: unit roundoff u = 2^-8 (bf16) or 2^-11 (fp16), a
// relative error uniform in [-u, u] at most, RMS u/sqrt(3). The weights are the same values in both
// models, so a GEMM output's error is Σ_k w_jk x_k δ_k: for random-signed weights its relative norm
// is the RMS of δ, u/sqrt(3). The error reaching a gradient passes through R such roundings in a
// chain: forward, 5 per block (GPT-2: qkv's input, attention's q/k/v, its output = proj's input,
// fc's and fc2's inputs; Llama likewise, q/k/v and gate/up sharing theirs) and the head's input;
// backward, 5 per block (fc2's, fc's and proj's output gradients, attention's dy and its dq/dk/dv =
// the qkv GEMM's output gradient) and the head's, plus a weight gradient's own two operands: R = 2
// (5L + 1) + 2. Independent errors add in quadrature, sqrt(R) u / sqrt(3); a factor 3 covers the
// norms', softmax's and GELU / SwiGLU's Jacobians (O(1), not unit) on the way: sqrt(3 R) u. L =
// 2: 8.5 u, bf16 3.3e-2, fp16 4.1e-3 (measured on the emulator: at most 1.2e-2 and 1.0e-3).
// Logits and the loss pass through fewer roundings: the same bound.
double autocast_norm_rtol(const ModelConfig& c, DType dtype) {
  const double u = dtype == DType::kBF16 ? 0x1p-8 : 0x1p-11;
  const double roundings = 2.0 * (5.0 * static_cast<double>(c.num_layers) + 1.0) + 2.0;
  return std::sqrt(3.0 * roundings) * u;
}

// The fp32 bound for fp32 models, autocast_norm_rtol for 16-bit ones.
double model_norm_rtol(const ModelConfig& c, DType dtype) {
  return dtype == DType::kF32 ? kernels::norm_rtol_for(DType::kF32) : autocast_norm_rtol(c, dtype);
}

struct Case {
  std::string name;
  ModelConfig config;
  DType dtype;
  bool checkpointing;
  int micro_steps = 2;  // the second accumulates onto the first's gradients
};

// gtest prints the case by its name (not the bytes of the config).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class CudaTransformerVsCpu : public ::testing::TestWithParam<Case> {};

// Both models see the same parameter values (the CPU widens 16-bit units exactly). fp32: every
// activation is fp32 on both, so the fp32 tolerances apply (summation order only). 16-bit: the
// GPU's GEMMs take 16-bit operands, the CPU's fp32 ones: autocast_norm_rtol.
TEST_P(CudaTransformerVsCpu, LossLogitsAndGradientsMatchTheCpuModel) {
  ZERO_SKIP_WITHOUT_GPU();
  const Case& tc = GetParam();
  const kernels::Tolerance tol = kernels::tolerance_for(DType::kF32);
  const double norm_rtol = model_norm_rtol(tc.config, tc.dtype);

  Transformer cpu(tc.config, {.activation_checkpointing = tc.checkpointing});
  zero::cuda::CudaStream stream;
  // 16-bit: the head's backward in chunks of 5 rows, the last one short (N = 16).
  const CudaTransformerOptions options{.activation_checkpointing = tc.checkpointing,
                                       .lm_head_chunk_rows = kHeadChunkRows};
  auto created = CudaTransformer::create(tc.config, options, stream);
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  CudaTransformer& gpu = **created;
  const ModelLayout& layout = cpu.layout();
  const int64_t V = tc.config.vocab_size;

  TestParams params(layout, tc.dtype, 1234);
  TestParams::Access cpu_params(params, Device::kCpu), gpu_params(params, Device::kCuda);
  HostGrads cpu_grads(layout);
  DeviceGrads gpu_grads(layout);

  for (int micro_step = 0; micro_step < tc.micro_steps; ++micro_step) {
    SCOPED_TRACE("micro-step " + std::to_string(micro_step));
    const Batch batch = make_batch(77 + static_cast<uint32_t>(micro_step));
    const float cpu_loss =
        cpu.forward(cpu_params, batch.tokens.data(), batch.targets.data(), kB, kT);
    const float gpu_loss =
        gpu.forward(gpu_params, batch.tokens.data(), batch.targets.data(), kB, kT);
    EXPECT_NEAR(gpu_loss, cpu_loss,
                tol.atol + std::max(tol.rtol, tc.dtype == DType::kF32 ? 0.0 : norm_rtol) *
                               std::fabs(cpu_loss));
    EXPECT_EQ(gpu.counted_targets(), cpu.counted_targets());

    for (const auto& [b, t] : {std::pair<int64_t, int64_t>{0, 0}, {0, kT - 1}, {1, 5}}) {
      std::vector<float> want(static_cast<size_t>(V)), got(static_cast<size_t>(V));
      cpu.logits_at(b, t, want.data());
      gpu.logits_at(b, t, got.data());
      EXPECT_TRUE(matches(got, want, norm_rtol)) << "logits of (" << b << ", " << t << ")";
    }

    const float dloss = 1.0f / static_cast<float>(cpu.counted_targets() * 2);
    cpu.backward(cpu_params, cpu_grads, dloss);
    gpu.backward(gpu_params, gpu_grads, dloss);
    // Accumulated over the micro-steps so far: the second compares the sums.
    for (int u = 0; u < layout.num_units(); ++u) {
      const std::vector<float> got = gpu_grads.grads[static_cast<size_t>(u)]->download();
      const std::vector<float>& want = cpu_grads.grads[static_cast<size_t>(u)];
      EXPECT_TRUE(matches(got, want, norm_rtol)) << "unit " << layout.unit(u).name;
    }
  }
  // The same calls in the same order: acquire / release nesting and grad_ready order.
  EXPECT_EQ(gpu_params.log, cpu_params.log);
  EXPECT_EQ(gpu_grads.ready, cpu_grads.ready);
  // buffer_bytes, what the model allocated: exactly what memory planning counts for it (the slab
  // activation_bytes sizes, plus the widen buffers and attention's copies of 16-bit units).
  const int64_t slab = CudaTransformer::activation_bytes(tc.config, options, kB, kT, tc.dtype);
  EXPECT_GT(slab, 0);
  EXPECT_EQ(gpu.buffer_bytes(),
            slab + CudaTransformer::widen_bytes(tc.config, tc.dtype) +
                CudaTransformer::attention16_bytes(tc.config, tc.dtype, kB, kT));
  EXPECT_EQ(CudaTransformer::attention16_bytes(tc.config, tc.dtype, kB, kT) > 0,
            tc.dtype != DType::kF32);
  EXPECT_EQ(CudaTransformer::widen_bytes(tc.config, tc.dtype) > 0, tc.dtype != DType::kF32);
}

// The emulator runs every CUDA thread as a host thread: fewer cases there that still cover both
// architectures, the three working dtypes, GQA with llama3 RoPE, tied and untied heads,
// checkpointing and each family (Qwen3, Phi-3, Gemma 3, Gemma 2); one micro-step where
// `emulated_one`, two for the checkpointed ones (accumulation). A GPU runs every case, two
// micro-steps each.
std::vector<Case> cases() {
  const int emulated_one = kernels::testing::gpu_or_emulated<int>({2}, {1})[0];
  const Case gpt2_f32{"gpt2_f32", gpt2_config(), DType::kF32, false, emulated_one};
  const Case llama_untied_bf16_ckpt{"llama_untied_bf16_checkpointing", llama_config(false),
                                    DType::kBF16, true};
  const Case llama_tied_f16{"llama_tied_f16", llama_config(true), DType::kF16, false, emulated_one};
  return kernels::testing::gpu_or_emulated<Case>(
      {gpt2_f32,
       llama_untied_bf16_ckpt,
       llama_tied_f16,
       {"gpt2_bf16", gpt2_config(), DType::kBF16, false},
       {"gpt2_f32_checkpointing", gpt2_config(), DType::kF32, true},
       {"llama_tied_f32", llama_config(true), DType::kF32, false},
       {"llama_biased_window_f32", llama_biased_config(), DType::kF32, false},
       {"qwen3_f32", qwen3_config(), DType::kF32, false},
       {"qwen3_bf16_checkpointing", qwen3_config(), DType::kBF16, true},
       {"phi3_f32", phi3_config(), DType::kF32, false},
       {"phi3_bf16", phi3_config(), DType::kBF16, false},
       {"gemma3_f32", gemma3_config(), DType::kF32, false},
       {"gemma3_bf16_checkpointing", gemma3_config(), DType::kBF16, true},
       {"gemma2_f32", gemma2_config(), DType::kF32, false},
       {"gemma2_bf16_checkpointing", gemma2_config(), DType::kBF16, true}},
      {gpt2_f32,
       llama_untied_bf16_ckpt,
       llama_tied_f16,
       {"gpt2_bf16", gpt2_config(), DType::kBF16, false, emulated_one},
       {"qwen3_f32", qwen3_config(), DType::kF32, false, emulated_one},
       {"qwen3_bf16_checkpointing", qwen3_config(), DType::kBF16, true},
       {"phi3_bf16", phi3_config(), DType::kBF16, false, emulated_one},
       {"gemma3_f32", gemma3_config(), DType::kF32, false, emulated_one},
       {"gemma3_bf16_checkpointing", gemma3_config(), DType::kBF16, true},
       {"gemma2_f32", gemma2_config(), DType::kF32, false, emulated_one},
       {"gemma2_bf16_checkpointing", gemma2_config(), DType::kBF16, true}});
}

INSTANTIATE_TEST_SUITE_P(Models, CudaTransformerVsCpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// A 16-bit model's extra device memory is exactly its GEMM operand copies — one (N, in) input and
// one output gradient, 16-bit, rows padded to 8 elements, the widest of every dense layer's (N,
// out) and the LM head's (chunk rows, V) — and its widen buffers hold only the small parameters
// (GPT-2 block: ln_1, ln_2 weight and bias, the four biases, 9C + F, the largest unit's; final:
// ln_f, 2C; embedding: nothing).
TEST(CudaTransformer, SixteenBitBuffersAreTheGemmOperandCopies) {
  ZERO_SKIP_WITHOUT_GPU();
  // A vocabulary wider than F, as real ones are (sizes only: nothing is allocated).
  ModelConfig c = gpt2_config();
  c.vocab_size = 997;
  const int64_t N = kB * kT, C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  auto round_up = [](int64_t n, int64_t m) { return (n + m - 1) / m * m; };
  auto copies = [&](int64_t head_rows) {
    return round_up(2 * N * round_up(std::max(C, F), 8), 256) +
           round_up(2 * std::max(N * round_up(std::max(3 * C, F), 8), head_rows * round_up(V, 8)),
                    256);
  };
  // The default chunk (2048 rows) holds the whole batch: the head's (N, V) copy sets the size;
  // chunks of 5 rows: (5, V); of 2 rows: the MLP's (N, F) is wider.
  EXPECT_GT(copies(N), copies(5));
  EXPECT_GT(copies(5), copies(2));
  EXPECT_EQ(copies(2), copies(1));
  // Kept per block (one set when checkpointing): the 16-bit copies of the four GEMM inputs
  // (norm1, attn_y, norm2: C wide; act: F); and the logits' rows padded to 8.
  const int64_t saved =
      3 * round_up(2 * N * round_up(C, 8), 256) + round_up(2 * N * round_up(F, 8), 256);
  const int64_t logits_padding = round_up(4 * N * round_up(V, 8), 256) - round_up(4 * N * V, 256);
  // ... and the fp32 arrays of those inputs, only read by the forward then, carved once for all
  // blocks.
  const int64_t shared_fp32 = 3 * round_up(4 * N * C, 256) + round_up(4 * N * F, 256);
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (const bool checkpointing : {false, true}) {
      const int64_t blocks = checkpointing ? 1 : c.num_layers;
      for (const int64_t head_rows : {int64_t{2048}, int64_t{5}, int64_t{2}}) {
        const CudaTransformerOptions o{.activation_checkpointing = checkpointing,
                                       .lm_head_chunk_rows = head_rows};
        EXPECT_EQ(CudaTransformer::activation_bytes(c, o, kB, kT, dtype) -
                      CudaTransformer::activation_bytes(c, o, kB, kT, DType::kF32),
                  copies(std::min(N, head_rows)) + blocks * saved + logits_padding -
                      (blocks - 1) * shared_fp32)
            << "head rows " << head_rows;
      }
    }
    EXPECT_EQ(CudaTransformer::widen_bytes(c, dtype), (9 * C + F) * 4);
  }
  EXPECT_EQ(CudaTransformer::widen_bytes(c, DType::kF32), 0);
}

// The 16-bit head's backward in chunks (of 5 rows, of 1) against one chunk of all N rows: the same
// loss and logits, and gradients that differ only by fp32 summation order (dweight is summed over
// the chunks, each chunk's d(input) rows by GEMMs of other shapes); the tied head (Llama f16,
// the embedding's gradient) and GPT-2's own head (bf16).
TEST(CudaTransformer, HeadChunksChangeOnlyTheSummationOrder) {
  ZERO_SKIP_WITHOUT_GPU();
  const int64_t N = kB * kT;
  for (const auto& [config, dtype] : {std::pair{gpt2_config(), DType::kBF16},
                                      std::pair{llama_config(/*tied=*/true), DType::kF16}}) {
    SCOPED_TRACE(dtype_name(dtype));
    zero::cuda::CudaStream stream;
    auto whole = CudaTransformer::create(config, {.lm_head_chunk_rows = N}, stream);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    const ModelLayout& layout = (*whole)->layout();
    TestParams params(layout, dtype, 99);
    TestParams::Access access(params, Device::kCuda);
    const Batch batch = make_batch(5);
    DeviceGrads want_grads(layout);
    const float want_loss =
        (*whole)->forward(access, batch.tokens.data(), batch.targets.data(), kB, kT);
    const float dloss = 1.0f / static_cast<float>((*whole)->counted_targets());
    (*whole)->backward(access, want_grads, dloss);
    for (const int64_t rows : {int64_t{5}, int64_t{1}}) {
      SCOPED_TRACE("chunks of " + std::to_string(rows));
      auto chunked = CudaTransformer::create(config, {.lm_head_chunk_rows = rows}, stream);
      ASSERT_TRUE(chunked.ok()) << chunked.status().to_string();
      DeviceGrads got_grads(layout);
      EXPECT_EQ((*chunked)->forward(access, batch.tokens.data(), batch.targets.data(), kB, kT),
                want_loss);
      (*chunked)->backward(access, got_grads, dloss);
      for (int u = 0; u < layout.num_units(); ++u) {
        EXPECT_TRUE(norm_close(got_grads.grads[static_cast<size_t>(u)]->download(),
                               want_grads.grads[static_cast<size_t>(u)]->download(),
                               kernels::norm_rtol_for(DType::kF32)))
            << "unit " << layout.unit(u).name;
      }
    }
  }
}

// The norms and GELU / SwiGLU writing the GEMMs' 16-bit inputs in the same pass (the default)
// against the separate casts: the same loss, logits and every gradient, bitwise (the copies are
// the same roundings of the same fp32 values). GPT-2 bf16, Llama fp16 (tied) and bf16 (untied,
// with activation checkpointing: the recomputed forward writes them too).
TEST(CudaTransformer, Fused16BitCopiesAreBitwiseTheSeparateCasts) {
  ZERO_SKIP_WITHOUT_GPU();
  struct Case {
    ModelConfig config;
    DType dtype;
    bool checkpointing;
  };
  for (const Case& c : {Case{gpt2_config(), DType::kBF16, false},
                        Case{llama_config(/*tied=*/true), DType::kF16, false},
                        Case{llama_config(/*tied=*/false), DType::kBF16, true}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + (c.checkpointing ? " checkpointing" : ""));
    zero::cuda::CudaStream stream;
    auto fused =
        CudaTransformer::create(c.config, {.activation_checkpointing = c.checkpointing}, stream);
    auto separate = CudaTransformer::create(
        c.config, {.activation_checkpointing = c.checkpointing, .fuse_16bit_copies = false},
        stream);
    ASSERT_TRUE(fused.ok() && separate.ok());
    const ModelLayout& layout = (*fused)->layout();
    TestParams params(layout, c.dtype, 31);
    TestParams::Access access(params, Device::kCuda);
    const Batch batch = make_batch(9);
    DeviceGrads want(layout), got(layout);
    const float want_loss =
        (*separate)->forward(access, batch.tokens.data(), batch.targets.data(), kB, kT);
    const float dloss = 1.0f / static_cast<float>((*separate)->counted_targets());
    (*separate)->backward(access, want, dloss);
    EXPECT_EQ((*fused)->forward(access, batch.tokens.data(), batch.targets.data(), kB, kT),
              want_loss);
    (*fused)->backward(access, got, dloss);
    for (int u = 0; u < layout.num_units(); ++u) {
      EXPECT_EQ(got.grads[static_cast<size_t>(u)]->download(),
                want.grads[static_cast<size_t>(u)]->download())
          << "unit " << layout.unit(u).name;
    }
  }
}

// GPT-2 124M in bf16 at 8 x 1024: the head's backward in chunks of 2048 rows makes its 16-bit
// gradient copy (2048, 50264) instead of (8192, 50264), 617,644,032 bytes less (one chunk of all
// rows gives the size the unchunked head had).
TEST(CudaTransformer, Gpt2HeadChunksShrinkTheGradientCopy) {
  ZERO_SKIP_WITHOUT_GPU();
  auto config = preset_model_config("gpt2-124m");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const int64_t B = 8, T = 1024, N = B * T, padded_V = 50264;
  const int64_t chunked = CudaTransformer::activation_bytes(*config, {}, B, T, DType::kBF16);
  const int64_t whole =
      CudaTransformer::activation_bytes(*config, {.lm_head_chunk_rows = N}, B, T, DType::kBF16);
  std::printf(
      "gpt2-124m bf16 8x1024 activation_bytes: %lld with the head in one chunk, %lld in "
      "chunks of 2048 rows\n",
      static_cast<long long>(whole), static_cast<long long>(chunked));
  EXPECT_EQ(whole - chunked, 2 * (N - 2048) * padded_V);
}

// cuBLASLt's tensor-core algorithms want 16-byte aligned operands. A 16-bit model's GEMMs read
// each weight at unit base + offset with a leading dimension of its in_features; unit bases are
// allocation- or shard-aligned (kShardAlignNumel = 16 elements, 32 bytes in 16-bit), so every
// built-in preset's weight and embedding offsets must be multiples of 8 elements (they are: every
// parameter's size is a multiple of C, and C of 8) and so must the leading dimensions — except
// llama-tiny's intermediate size 172 (its down projection's rows are 344 bytes: cuBLASLt picks a
// less aligned algorithm or MatmulContext falls back to the reference GEMM; a 0.1M-parameter toy).
// The activation copies are padded to 8 elements by the model itself.
TEST(CudaTransformer, PresetGemmWeightsAreSixteenByteAligned) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    auto config = preset_model_config(name);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    const ModelLayout layout(*config);
    for (const UnitSpec& u : layout.units()) {
      for (const ParamSpec& p : u.params) {
        if (!read_in_unit_dtype(p.kind)) continue;
        EXPECT_EQ(p.offset % 8, 0) << p.name;
        const int64_t ld = p.shape.dim(-1);
        if (name == "llama-tiny" && p.kind == ParamKind::kMlpDownWeight) {
          EXPECT_NE(ld % 8, 0) << "llama-tiny's down projection became aligned: update the comment";
        } else {
          EXPECT_EQ(ld % 8, 0) << p.name << " in_features " << ld;
        }
      }
    }
  }
}

// Issue 32 item 2: out of device memory mid-run (here forced by the ZERO_DEVICE_MEMORY_LIMIT
// budget, on a GPU and on the emulator alike) names the buffer, the bytes asked and the plan's
// figure, and exits with status 1 at once (it aborted naming only the cudaMalloc expression).
// "threadsafe": the child re-executes the test binary, so it never inherits a CUDA context.
TEST(CudaTransformerDeathTest, OutOfMemoryMidRunNamesTheBufferAndExits) {
  ZERO_SKIP_WITHOUT_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const ModelConfig config = gpt2_config();
  const int64_t slab_bytes = CudaTransformer::activation_bytes(config, {}, kB, kT, DType::kF32);
  EXPECT_EXIT(
      {
        Transformer cpu(config);
        zero::cuda::CudaStream stream;
        auto created = CudaTransformer::create(config, {}, stream);
        if (!created.ok()) std::_Exit(3);
        TestParams params(cpu.layout(), DType::kF32, 7);
        TestParams::Access gpu_params(params, Device::kCuda);
        const Batch batch = make_batch(1);
        // From now on the device allows one byte in use: the first step's slab does not fit.
        ::setenv("ZERO_DEVICE_MEMORY_LIMIT", "1", 1);
        (*created)->forward(gpu_params, batch.tokens.data(), batch.targets.data(), kB, kT);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1),
      "zero: error: out of GPU memory on device [0-9]+: the CUDA model's activation slab for 2 x 8 "
      "tokens \\(f32\\) asks for " +
          std::to_string(slab_bytes) + " bytes .*the memory plan counted " +
          std::to_string(slab_bytes) +
          " bytes .*ZERO_DEVICE_MEMORY_LIMIT allows 1 bytes .*--per_device_train_batch_size");
}

// Two forwards without targets back to back (no host sync between them; the second waits for the
// first's batch upload before reusing its staging): logits only, loss 0, no counted targets. With
// host checkpoints the copies out are never awaited by a backward: the second forward's writes
// into the ring wait for them, then a third at another shape frees the slab under them.
TEST(CudaTransformer, ForwardWithoutTargetsComputesLogits) {
  ZERO_SKIP_WITHOUT_GPU();
  const ModelConfig config = gpt2_config();
  for (const CudaTransformerOptions options :
       {CudaTransformerOptions{}, CudaTransformerOptions{.activation_checkpointing = true,
                                  .checkpoints_in_host_memory = true}}) {
    SCOPED_TRACE(options.checkpoints_in_host_memory ? "host checkpoints" : "no checkpointing");
    Transformer cpu(config);
    zero::cuda::CudaStream stream;
    auto created = CudaTransformer::create(config, options, stream);
    ASSERT_TRUE(created.ok()) << created.status().to_string();
    CudaTransformer& gpu = **created;
    TestParams params(cpu.layout(), DType::kF32, 99);
    TestParams::Access cpu_params(params, Device::kCpu), gpu_params(params, Device::kCuda);
    const Batch first = make_batch(1), second = make_batch(2);
    EXPECT_EQ(gpu.forward(gpu_params, first.tokens.data(), nullptr, kB, kT), 0.0f);
    EXPECT_EQ(gpu.forward(gpu_params, second.tokens.data(), nullptr, kB, kT), 0.0f);
    EXPECT_EQ(gpu.counted_targets(), 0);
    EXPECT_EQ(cpu.forward(cpu_params, second.tokens.data(), nullptr, kB, kT), 0.0f);
    std::vector<float> want(static_cast<size_t>(config.vocab_size)), got(want.size());
    cpu.logits_at(1, kT - 1, want.data());
    gpu.logits_at(1, kT - 1, got.data());
    EXPECT_TRUE(matches(got, want));
    EXPECT_EQ(gpu.forward(gpu_params, first.tokens.data(), nullptr, 1, kT - 2), 0.0f);
    EXPECT_EQ(cpu.forward(cpu_params, first.tokens.data(), nullptr, 1, kT - 2), 0.0f);
    cpu.logits_at(0, kT - 3, want.data());
    gpu.logits_at(0, kT - 3, got.data());
    EXPECT_TRUE(matches(got, want));
  }
}

// cpu_checkpointing: the block inputs in pinned host memory, copied out and back on a side stream,
// must change nothing — loss, logits and every gradient bitwise those of checkpointing in device
// memory — while the device slab shrinks from L + 1 residual buffers to three. Two micro-steps of
// different sequence lengths (the second reallocates both memories and accumulates), 3 and 4
// layers (the ring of two slots wraps an odd and an even number of times).
struct HostCheckpointCase {
  std::string name;
  ModelConfig config;
  DType dtype;
};
void PrintTo(const HostCheckpointCase& c, std::ostream* os) { *os << c.name; }

class CudaTransformerHostCheckpoints : public ::testing::TestWithParam<HostCheckpointCase> {};

TEST_P(CudaTransformerHostCheckpoints, BitwiseEqualToDeviceCheckpointsInLessDeviceMemory) {
  ZERO_SKIP_WITHOUT_GPU();
  const HostCheckpointCase& tc = GetParam();
  const CudaTransformerOptions on_device{.activation_checkpointing = true};
  const CudaTransformerOptions on_host{.activation_checkpointing = true,
                                       .checkpoints_in_host_memory = true};
  zero::cuda::CudaStream stream_device, stream_host;
  auto device_model = CudaTransformer::create(tc.config, on_device, stream_device);
  auto host_model = CudaTransformer::create(tc.config, on_host, stream_host);
  ASSERT_TRUE(device_model.ok()) << device_model.status().to_string();
  ASSERT_TRUE(host_model.ok()) << host_model.status().to_string();
  CudaTransformer& want_model = **device_model;
  CudaTransformer& got_model = **host_model;
  const ModelLayout& layout = want_model.layout();
  TestParams params(layout, tc.dtype, 4321);
  TestParams::Access want_params(params, Device::kCuda), got_params(params, Device::kCuda);
  DeviceGrads want_grads(layout), got_grads(layout);
  const int64_t V = tc.config.vocab_size;

  for (const int64_t T : {kT, kT - 3}) {
    SCOPED_TRACE("T = " + std::to_string(T));
    const Batch batch = make_batch(static_cast<uint32_t>(T));
    const float want_loss =
        want_model.forward(want_params, batch.tokens.data(), batch.targets.data(), kB, T);
    const float got_loss =
        got_model.forward(got_params, batch.tokens.data(), batch.targets.data(), kB, T);
    EXPECT_EQ(got_loss, want_loss);
    std::vector<float> want(static_cast<size_t>(V)), got(static_cast<size_t>(V));
    want_model.logits_at(1, T - 1, want.data());
    got_model.logits_at(1, T - 1, got.data());
    EXPECT_EQ(got, want);
    const float dloss = 1.0f / static_cast<float>(want_model.counted_targets() * 2);
    want_model.backward(want_params, want_grads, dloss);
    got_model.backward(got_params, got_grads, dloss);
    for (int u = 0; u < layout.num_units(); ++u) {
      EXPECT_EQ(got_grads.grads[static_cast<size_t>(u)]->download(),
                want_grads.grads[static_cast<size_t>(u)]->download())
          << "unit " << layout.unit(u).name;
    }
    // The device slab: two ring slots and the last output instead of L + 1 residual buffers; the
    // sizing functions memory planning uses say so exactly.
    const int64_t residual_bytes = kB * T * tc.config.hidden_size * 4;
    EXPECT_EQ(want_model.buffer_bytes() - got_model.buffer_bytes(),
              (tc.config.num_layers + 1 - 3) * residual_bytes);
    // Attention's 16-bit copies keep the size of the largest shape run (T = kT, the first).
    EXPECT_EQ(got_model.buffer_bytes(),
              CudaTransformer::activation_bytes(tc.config, on_host, kB, T, tc.dtype) +
                  CudaTransformer::widen_bytes(tc.config, tc.dtype) +
                  CudaTransformer::attention16_bytes(tc.config, tc.dtype, kB, kT));
    EXPECT_EQ(CudaTransformer::host_checkpoint_bytes(tc.config, on_host, kB, T),
              tc.config.num_layers * residual_bytes);
    EXPECT_EQ(CudaTransformer::host_checkpoint_bytes(tc.config, on_device, kB, T), 0);
  }
  EXPECT_EQ(got_params.log, want_params.log);
  EXPECT_EQ(got_grads.ready, want_grads.ready);
}

// CudaHostCheckpoints' three orderings, each forced: a host function holds one stream for 100 ms
// while the other runs ahead, so a missing event lands the wrong values every time (the model test
// above would see only a rare interleaving).
void hold_stream(cudaStream_t stream) {
  CUDA_ABORT_IF_ERROR(cudaLaunchHostFunc(
      stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }, nullptr));
}

void copy_on(cudaStream_t stream, float* dst, const float* src, int64_t n) {
  CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream));
}

TEST(CudaHostCheckpoints, EventsOrderEveryCopyAgainstTheComputeStream) {
  ZERO_SKIP_WITHOUT_GPU();
  constexpr int64_t n = 37;
  auto filled = [](float v) { return std::vector<float>(static_cast<size_t>(n), v); };
  const DeviceArray<float> a(filled(1.0f)), b(filled(2.0f)), x(filled(3.0f)), y(filled(4.0f));
  DeviceArray<float> slot0(static_cast<size_t>(n)), slot1(static_cast<size_t>(n));
  DeviceArray<float> out(static_cast<size_t>(n));
  zero::cuda::CudaStream compute;
  CudaHostCheckpoints host;
  host.reset(3, n, {slot0.get(), slot1.get()});
  ASSERT_EQ(host.device_input(2), slot0.get());
  ASSERT_EQ(host.host_bytes(), 3 * n * 4);

  // Forward: the write of layer 2's input into slot 0 waits for the copy out of layer 0's.
  hold_stream(host.side_stream());
  copy_on(compute, slot0.get(), a.get(), n);
  host.save(0, compute);
  host.await_copies(2, compute);
  copy_on(compute, slot0.get(), b.get(), n);
  // The copy out follows the compute work that produced it (the side stream is free now).
  copy_on(compute, slot1.get(), x.get(), n);
  host.save(1, compute);
  host.await_copies(1, compute);
  copy_on(compute, slot1.get(), y.get(), n);

  // Backward: the copy back into slot 1 follows the compute stream's last read of it ...
  hold_stream(compute);
  copy_on(compute, out.get(), slot1.get(), n);
  host.fetch(1, compute);
  host.await_copies(1, compute);
  EXPECT_EQ(out.download(), filled(4.0f))
      << "the copy back overwrote the slot before its last read";
  EXPECT_EQ(slot1.download(), filled(3.0f)) << "layer 1's input, saved before y overwrote it";
  // ... and the compute stream's read of a copied-back input waits for the copy.
  hold_stream(host.side_stream());
  host.fetch(0, compute);
  host.await_copies(0, compute);
  copy_on(compute, out.get(), slot0.get(), n);
  EXPECT_EQ(out.download(), filled(1.0f)) << "layer 0's input: a, not b written after its save";
}

ModelConfig with_layers(ModelConfig c, int layers) {
  c.num_layers = layers;
  c.sliding_layers.clear();
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaTransformerHostCheckpoints,
    ::testing::Values(
        HostCheckpointCase{"gpt2_4_layers_f32", with_layers(gpt2_config(), 4), DType::kF32},
        HostCheckpointCase{"llama_3_layers_bf16", with_layers(llama_config(/*tied=*/false), 3),
                           DType::kBF16}),
    [](const ::testing::TestParamInfo<HostCheckpointCase>& info) { return info.param.name; });

}  // namespace
}  // namespace zero::model
