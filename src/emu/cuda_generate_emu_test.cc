// `zero generate --device cuda` without a GPU: runtime::DeviceGenerator with the CUDA model and the
// CUDA backend on the CPU emulator (docs/emu.md) — through the GPU's key/value cache
// (model::CudaKvDecoder) and through a whole forward per token (--no_kv_cache), weights copied
// once — gives the tokens of the CPU model through its key/value cache (runtime::generate), greedy
// and sampled with the same seed, also when the context fills up (the oldest half dropped, the
// newest re-read), on tiny presets with random initialisation (fixed seed). The weight stream's
// blocks from pinned memory or NVMe, and partitioned over 2-4 GPU ranks on threads (stage-3
// inference), give the resident weights' tokens. Built into cuda_engine_emu_test (the same
// emulated CUDA sources).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "comm/self_communicator.h"
#include "comm/thread_communicator.h"
#include "core/storage.h"
#include "data/token_dataset.h"
#include "model/init.h"
#include "offload/nvme_swapper.h"
#include "runtime/batch.h"
#include "runtime/device_generator.h"
#include "runtime/engine.h"
#include "runtime/evaluation.h"
#include "runtime/generate.h"
#include "runtime/model_source.h"
#include "runtime/model_weights.h"
#include "runtime/streamed_params.h"
#include "runtime/token_agreement.h"
#include "sharding/shard_layout.h"

namespace zero::runtime {
namespace {

class CudaGenerateOnEmulator : public ::testing::TestWithParam<const char*> {
 protected:
  // The CPU reference with fp32 GEMMs, as the CUDA model computes (see cuda_engine_emu_test.cc).
  void SetUp() override { ::setenv("ZERO_CPU_BF16_GEMM", "0", 1); }
};

TEST_P(CudaGenerateOnEmulator, TokensAreTheCpuModels) {
  auto source = ModelSource::open(std::string("preset:") + GetParam(), 42);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  EngineOptions o;
  o.model_config = (*source)->config();
  o.check_memory = false;
  auto engine = Engine::create(o, (*source)->init_fn());
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();

  // Greedy, and sampled with a fixed seed (the whole distribution, not only its argmax: a random
  // GPT-2 mostly repeats its last token greedily).
  SamplingOptions greedy;
  greedy.max_new_tokens = 6;
  greedy.temperature = 0.0;
  SamplingOptions sampled = greedy;
  sampled.temperature = 1.0;
  sampled.seed = 5;
  // A context of 7 positions for a prompt of 4 and 9 new tokens: the window fills after 3, then
  // its newest 3 are re-read (prefilled) and it fills again.
  SamplingOptions filling = sampled;
  filling.context_limit = 7;
  filling.max_new_tokens = 9;
  const std::vector<int32_t> prompt = {3, 14, 15, 92};
  auto gpu = DeviceGenerator::create(Device::kCuda, o.model_config, (*engine)->params());
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  ASSERT_EQ((*gpu)->model().device(), Device::kCuda);
  using Decoding = DeviceGenerator::Decoding;
  for (const SamplingOptions& s : {greedy, sampled, filling}) {
    std::vector<int32_t> want = prompt;
    generate((*engine)->model(), (*engine)->params(), want, s);
    ASSERT_EQ(want.size(), prompt.size() + static_cast<size_t>(s.max_new_tokens));
    for (Decoding decoding : {Decoding::kCached, Decoding::kRecompute}) {
      std::vector<int32_t> got = prompt;
      auto stopped = (*gpu)->generate(got, s, decoding);
      ASSERT_TRUE(stopped.ok()) << stopped.status().to_string();
      EXPECT_FALSE(*stopped);
      EXPECT_EQ(got, want) << "temperature " << s.temperature << ", context limit "
                           << s.context_limit << ", "
                           << (decoding == Decoding::kCached ? "cached" : "recomputed");
    }
  }
  EXPECT_GT((*gpu)->device_bytes(), 0);
}

// Counts what a batch reports (the tokens are in the sequences).
class CountingObserver final : public BatchObserver {
 public:
  bool on_token(int64_t, int32_t) override { return false; }
  Status on_finish(int64_t, FinishReason) override {
    ++finished;
    return ok_status();
  }
  int finished = 0;
};

// Batched (`zero generate --prompts_file --device cuda`): four ragged prompts through three slots
// of the GPU's cache (a finished sequence's slot taken by the fourth) give the CPU model's batch
// tokens, greedy, and sampled while the context fills (windows re-read inside the batch).
TEST_P(CudaGenerateOnEmulator, BatchedTokensAreTheCpuModels) {
  auto source = ModelSource::open(std::string("preset:") + GetParam(), 42);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  EngineOptions o;
  o.model_config = (*source)->config();
  o.check_memory = false;
  auto engine = Engine::create(o, (*source)->init_fn());
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto gpu = DeviceGenerator::create(Device::kCuda, o.model_config, (*engine)->params());
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  SamplingOptions greedy;
  greedy.temperature = 0.0;
  // Sampled with a repetition penalty, in a context of 7 positions that fills.
  SamplingOptions filling;
  filling.temperature = 1.0;
  filling.repetition_penalty = 1.3;
  filling.seed = 5;
  filling.context_limit = 7;
  for (const SamplingOptions& options : {greedy, filling}) {
    auto batch = [&] {
      std::vector<BatchSequence> seqs(4);
      const std::vector<std::vector<int32_t>> prompts = {{3, 14, 15, 92}, {6}, {5, 3, 5}, {8, 9}};
      for (size_t i = 0; i < seqs.size(); ++i) {
        seqs[i].tokens = prompts[i];
        seqs[i].options = options;
        seqs[i].options.max_new_tokens = 3 + 2 * static_cast<int64_t>(i);
        seqs[i].options.seed = sequence_seed(options.seed, static_cast<int64_t>(i));
      }
      return seqs;
    };
    std::vector<BatchSequence> want = batch(), got = batch();
    CountingObserver cpu_done, gpu_done;
    ASSERT_TRUE(generate_batch((*engine)->model(), (*engine)->params(), want, 3, cpu_done).ok());
    const Status status = (*gpu)->generate_batch(got, 3, gpu_done);
    ASSERT_TRUE(status.ok()) << status.to_string();
    EXPECT_EQ(gpu_done.finished, 4);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens)
          << "sequence " << i << ", temperature " << options.temperature << ", context limit "
          << options.context_limit;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaGenerateOnEmulator,
                         ::testing::Values("gpt2-tiny", "llama-tiny"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// ZeRO-Inference (runtime/streamed_params.h): the blocks streamed through device slots from pinned
// memory (2 slots) or from NVMe (3 slots: 5 blocks do not divide into them, so the cyclic window
// wraps at a different slot each forward) give the resident path's tokens, bitwise, one sequence
// and a ragged batch, and the same eval loss; every block is copied once per forward; the swap
// file's directory is gone after the run. Five layers (a tiny preset's widths) so blocks stream.
class StreamedOnEmulator : public ::testing::TestWithParam<std::tuple<const char*, DType>> {
 protected:
  void SetUp() override {
    auto source = ModelSource::open(std::string("preset:") + std::get<0>(GetParam()), 42);
    ASSERT_TRUE(source.ok()) << source.status().to_string();
    config_ = (*source)->config();
    config_.num_layers = 5;
    layout_ = std::make_unique<model::ModelLayout>(config_);
    const model::ModelLayout* layout = layout_.get();
    init_ = [layout](int u, int64_t begin, int64_t end, float* dst) {
      model::init_unit_range(*layout, u, 7, begin, end, dst);
      return ok_status();
    };
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& ch : name) {
      if (ch == '/') ch = '_';
    }
    nvme_dir_ = ::testing::TempDir() + "zero_streamed_" + name;
    std::filesystem::remove_all(nvme_dir_);
  }
  void TearDown() override { std::filesystem::remove_all(nvme_dir_); }

  DType dtype() const { return std::get<1>(GetParam()); }
  DType cache_dtype() const { return dtype() == DType::kF32 ? DType::kF32 : DType::kBF16; }
  // The weights without the blocks, which the stream fills itself.
  std::unique_ptr<ModelWeights> without_blocks() const {
    const model::ModelLayout* layout = layout_.get();
    auto w = ModelWeights::load(*layout_, dtype(), init_, [layout](int u) {
      return u == layout->embedding_unit() || u == layout->final_unit();
    });
    EXPECT_TRUE(w.ok()) << w.status().to_string();
    return std::move(*w);
  }
  WeightStreaming streaming(ParamOffload offload, int slots) const {
    WeightStreaming s;
    s.offload = offload;
    s.slots = slots;
    s.nvme_path = nvme_dir_;
    const model::ModelLayout* layout = layout_.get();
    const UnitInitFn init = init_;
    const DType d = dtype();
    s.fill_block = [layout, init, d](int u, int64_t begin, int64_t end, void* dst) {
      return ModelWeights::fill_range(*layout, u, begin, end, d, init, dst);
    };
    return s;
  }
  static std::vector<BatchSequence> ragged_batch() {
    std::vector<BatchSequence> seqs(4);
    const std::vector<std::vector<int32_t>> prompts = {{3, 14, 15, 92}, {6}, {5, 3, 5}, {8, 9}};
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].tokens = prompts[i];
      seqs[i].options.temperature = 0.0;
      seqs[i].options.max_new_tokens = 2 + static_cast<int64_t>(i);
    }
    return seqs;
  }

  model::ModelConfig config_;
  std::unique_ptr<model::ModelLayout> layout_;
  UnitInitFn init_;
  std::string nvme_dir_;
};

// Counts the sequences that finished, in order.
class FinishedObserver final : public BatchObserver {
 public:
  bool on_token(int64_t, int32_t) override { return false; }
  Status on_finish(int64_t i, FinishReason) override {
    finished.push_back(i);
    return ok_status();
  }
  std::vector<int64_t> finished;
};

TEST_P(StreamedOnEmulator, TokensAndEvalLossAreTheResidentOnes) {
  auto full = ModelWeights::load(*layout_, dtype(), init_);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  auto resident = DeviceGenerator::create(Device::kCuda, config_, **full, cache_dtype());
  ASSERT_TRUE(resident.ok()) << resident.status().to_string();
  ASSERT_EQ((*resident)->streamed(), nullptr);

  SamplingOptions greedy;
  greedy.max_new_tokens = 4;
  greedy.temperature = 0.0;
  const std::vector<int32_t> prompt = {3, 14, 15, 92};
  std::vector<int32_t> want = prompt;
  ASSERT_TRUE((*resident)->generate(want, greedy).ok());
  std::vector<BatchSequence> want_batch = ragged_batch();
  FinishedObserver resident_done;
  ASSERT_TRUE((*resident)->generate_batch(want_batch, 3, resident_done).ok());
  // Eval: two micro-batches of 2 x 6 tokens, a few targets ignored.
  std::vector<MicroBatch> micro(2);
  for (size_t m = 0; m < micro.size(); ++m) {
    micro[m].batch = 2;
    micro[m].seq = 6;
    for (int i = 0; i < 12; ++i) {
      micro[m].tokens.push_back(static_cast<int32_t>((i * 37 + m * 11 + 5) % 256));
      micro[m].targets.push_back(i % 5 == 4 ? -100 : static_cast<int32_t>((i * 53 + m) % 256));
    }
  }
  auto want_loss = forward_loss_sum((*resident)->model(), (*resident)->params(), micro);
  ASSERT_TRUE(want_loss.ok()) << want_loss.status().to_string();

  const int L = static_cast<int>(config_.num_layers);
  for (const auto& [offload, slots] :
       {std::pair{ParamOffload::kCpu, 2}, std::pair{ParamOffload::kNvme, 3}}) {
    SCOPED_TRACE(param_offload_name(offload));
    std::unique_ptr<ModelWeights> host = without_blocks();
    EXPECT_LT(host->bytes(), (*full)->bytes());
    auto streamed = DeviceGenerator::create(Device::kCuda, config_, *host, cache_dtype(),
                                            streaming(offload, slots));
    ASSERT_TRUE(streamed.ok()) << streamed.status().to_string();
    const StreamedParams* stream = (*streamed)->streamed();
    ASSERT_NE(stream, nullptr);
    if (offload == ParamOffload::kNvme) {
      EXPECT_TRUE(std::filesystem::is_directory(stream->swap_dir())) << stream->swap_dir();
    }

    std::vector<int32_t> got = prompt;
    auto stopped = (*streamed)->generate(got, greedy);
    ASSERT_TRUE(stopped.ok()) << stopped.status().to_string();
    EXPECT_EQ(got, want);
    // Every block once per forward: the first acquire copies the window (slots blocks), each
    // later one the block slots - 1 ahead.
    const int64_t copied = stream->blocks_copied();
    EXPECT_EQ((copied - (slots - 1)) % L, 0) << copied;
    EXPECT_GE(copied, L * (greedy.max_new_tokens));

    std::vector<BatchSequence> got_batch = ragged_batch();
    FinishedObserver done;
    const Status batch = (*streamed)->generate_batch(got_batch, 3, done);
    ASSERT_TRUE(batch.ok()) << batch.to_string();
    EXPECT_EQ(done.finished, resident_done.finished);
    for (size_t i = 0; i < got_batch.size(); ++i) {
      EXPECT_EQ(got_batch[i].tokens, want_batch[i].tokens) << "sequence " << i;
    }

    auto got_loss = forward_loss_sum((*streamed)->model(), (*streamed)->params(), micro);
    ASSERT_TRUE(got_loss.ok()) << got_loss.status().to_string();
    EXPECT_EQ(got_loss->loss_sum, want_loss->loss_sum);  // bitwise: the same kernels, bytes
    EXPECT_EQ(got_loss->tokens, want_loss->tokens);
    streamed->reset();
    if (offload == ParamOffload::kCpu) {
      // zero eval's GPU model keeps one block's activations (activation checkpointing): the same
      // forward values.
      model::TransformerOptions checkpointed;
      checkpointed.activation_checkpointing = true;
      auto eval = DeviceGenerator::create(Device::kCuda, config_, *host, cache_dtype(),
                                          streaming(offload, slots), checkpointed);
      ASSERT_TRUE(eval.ok()) << eval.status().to_string();
      auto loss = forward_loss_sum((*eval)->model(), (*eval)->params(), micro);
      ASSERT_TRUE(loss.ok()) << loss.status().to_string();
      EXPECT_EQ(loss->loss_sum, want_loss->loss_sum);
    }
    // The swap file and its per-run directory are removed with the stream.
    if (std::filesystem::exists(nvme_dir_)) {
      EXPECT_TRUE(std::filesystem::is_empty(nvme_dir_)) << nvme_dir_;
    }
  }
}

// Fails every NVMe read after the first `ok_reads` completions.
class FailingReads final : public offload::NvmeFaultHook {
 public:
  explicit FailingReads(int ok_reads) : left_(ok_reads) {}
  int64_t on_completion(const offload::IoRequestInfo& request, int64_t result) override {
    if (request.is_write) return result;
    return left_.fetch_sub(1) > 0 ? result : -EIO;
  }

 private:
  std::atomic<int> left_;
};

// A read that fails mid-batch ends it with the error: the sequences that finished before it stay
// reported (their lines are written), none finishes after it, and the swap directory is removed.
TEST_P(StreamedOnEmulator, FailedReadEndsTheBatchKeepingFinishedLines) {
  std::unique_ptr<ModelWeights> host = without_blocks();
  // Sequence 0 (2 new tokens) finishes after 2 forwards: about 2 * 5 + 2 reads.
  FailingReads hook(14);
  WeightStreaming s = streaming(ParamOffload::kNvme, 3);
  s.fault_hook = &hook;
  {
    auto streamed = DeviceGenerator::create(Device::kCuda, config_, *host, cache_dtype(), s);
    ASSERT_TRUE(streamed.ok()) << streamed.status().to_string();
    std::vector<BatchSequence> seqs = ragged_batch();
    FinishedObserver done;
    const Status status = (*streamed)->generate_batch(seqs, 3, done);
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.to_string().find("reading block"), std::string::npos) << status.to_string();
    EXPECT_GE(done.finished.size(), 1u);
    EXPECT_LT(done.finished.size(), seqs.size());
  }
  if (std::filesystem::exists(nvme_dir_)) {
    EXPECT_TRUE(std::filesystem::is_empty(nvme_dir_)) << nvme_dir_;
  }
}

INSTANTIATE_TEST_SUITE_P(PresetsAndDtypes, StreamedOnEmulator,
                         ::testing::Combine(::testing::Values("gpt2-tiny", "llama-tiny"),
                                            ::testing::Values(DType::kF32, DType::kBF16)),
                         [](const ::testing::TestParamInfo<std::tuple<const char*, DType>>& info) {
                           std::string name =
                               std::string(std::get<0>(info.param)) + "_" +
                               (std::get<1>(info.param) == DType::kF32 ? "fp32" : "bf16");
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// Stage-3 inference on several GPU ranks (DeviceGenerator with WeightStreaming::world): worlds of
// 2, 3 (blocks that do not divide into the shards: padding gathered too) and 4 ranks on threads,
// each on its own emulated GPU, hold 1/N of every block and all-gather each block into a slot one
// block ahead (NCCL's stand-in; at world 2 also the host communicator staged through pinned
// memory, the transport of ranks sharing a GPU; world 3 and the staged transport in fp32 only).
// Every rank gives the tokens of one rank with the weights resident, bitwise (the same kernels
// read the same bytes): greedy, sampled with a seed while the context fills, a ragged sampled
// batch, and the eval loss.
class GatheredOnEmulator : public StreamedOnEmulator {
 protected:
  struct Outputs {
    std::vector<int32_t> greedy, sampled;
    std::vector<std::vector<int32_t>> batch;
    double loss_sum = 0.0;
    int64_t loss_tokens = 0;
  };
  static SamplingOptions greedy() {
    SamplingOptions s;
    s.max_new_tokens = 4;
    s.temperature = 0.0;
    return s;
  }
  // Sampled in a context of 7 positions that fills (its newest half re-read mid-generation).
  static SamplingOptions sampled() {
    SamplingOptions s;
    s.max_new_tokens = 6;
    s.temperature = 1.0;
    s.seed = 5;
    s.context_limit = 7;
    return s;
  }
  // Two micro-batches of 2 x 6 tokens, a few targets ignored.
  static std::vector<MicroBatch> eval_batches() {
    std::vector<MicroBatch> micro(2);
    for (size_t m = 0; m < micro.size(); ++m) {
      micro[m].batch = 2;
      micro[m].seq = 6;
      for (int i = 0; i < 12; ++i) {
        micro[m].tokens.push_back(static_cast<int32_t>((i * 37 + m * 11 + 5) % 256));
        micro[m].targets.push_back(i % 5 == 4 ? -100 : static_cast<int32_t>((i * 53 + m) % 256));
      }
    }
    return micro;
  }
  // What `zero generate` and `zero eval` compute, on `gen` (ADD_FAILURE on an error).
  static Outputs run(DeviceGenerator& gen) {
    Outputs out;
    const std::vector<int32_t> prompt = {3, 14, 15, 92};
    out.greedy = out.sampled = prompt;
    auto a = gen.generate(out.greedy, greedy());
    EXPECT_TRUE(a.ok()) << a.status().to_string();
    auto b = gen.generate(out.sampled, sampled());
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    std::vector<BatchSequence> seqs = ragged_batch();
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].options.temperature = 0.8;
      seqs[i].options.seed = sequence_seed(9, static_cast<int64_t>(i));
    }
    FinishedObserver done;
    const Status batch = gen.generate_batch(seqs, 3, done);
    EXPECT_TRUE(batch.ok()) << batch.to_string();
    for (const BatchSequence& seq : seqs) out.batch.push_back(seq.tokens);
    auto loss = forward_loss_sum(gen.model(), gen.params(), eval_batches());
    EXPECT_TRUE(loss.ok()) << loss.status().to_string();
    if (loss.ok()) {
      out.loss_sum = loss->loss_sum;
      out.loss_tokens = loss->tokens;
    }
    EXPECT_TRUE(gen.status().ok()) << gen.status().to_string();
    return out;
  }
  // Every rank's outputs are `want`'s, bitwise.
  static void expect_every_rank(const std::vector<Outputs>& got, const Outputs& want) {
    for (size_t r = 0; r < got.size(); ++r) {
      const Outputs& g = got[r];
      EXPECT_EQ(g.greedy, want.greedy) << "rank " << r;
      EXPECT_EQ(g.sampled, want.sampled) << "rank " << r;
      EXPECT_EQ(g.batch, want.batch) << "rank " << r;
      EXPECT_EQ(g.loss_sum, want.loss_sum) << "rank " << r;  // bitwise
      EXPECT_EQ(g.loss_tokens, want.loss_tokens) << "rank " << r;
    }
  }
  // This rank's shard bytes of the blocks (ShardLayout's, in the weights' dtype).
  int64_t shard_bytes(int world, int rank) const {
    const sharding::ShardLayout shards(*layout_, world, rank);
    int64_t numel = 0;
    for (int l = 0; l < config_.num_layers; ++l) {
      numel += shards.unit(layout_->block_unit(static_cast<int>(l))).shard_numel;
    }
    return numel * static_cast<int64_t>(dtype_bytes(dtype()));
  }
};

TEST_P(GatheredOnEmulator, EveryRankGeneratesOneRanksTokens) {
  auto full = ModelWeights::load(*layout_, dtype(), init_);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  auto one = DeviceGenerator::create(Device::kCuda, config_, **full, cache_dtype());
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  const Outputs want = run(**one);
  ASSERT_EQ(want.greedy.size(), 8u);
  const int64_t L = config_.num_layers;
  for (const auto& [world, dist] :
       {std::pair{2, DistBackend::kAuto}, std::pair{2, DistBackend::kMpi},
        std::pair{3, DistBackend::kAuto}, std::pair{4, DistBackend::kAuto}}) {
    // The padding of world 3 and the staged transport move bytes whatever their dtype: fp32 only
    // (CI time: each world is a few seconds on the emulator).
    if (dtype() != DType::kF32 && (world == 3 || dist == DistBackend::kMpi)) continue;
    SCOPED_TRACE(testing::Message()
                 << "world " << world << ", --dist_backend " << dist_backend_name(dist));
    std::mutex mu;
    std::vector<Outputs> got(static_cast<size_t>(world));
    ThreadCommunicator::run(world, [&](Communicator& comm) {
      std::unique_ptr<ModelWeights> host = without_blocks();
      WeightStreaming s = streaming(ParamOffload::kNone, 2);
      s.world = &comm;
      s.dist = dist;
      auto gen = DeviceGenerator::create(Device::kCuda, config_, *host, cache_dtype(), s);
      ASSERT_TRUE(gen.ok()) << gen.status().to_string();
      EXPECT_EQ((*gen)->gather_transport(),
                dist == DistBackend::kMpi ? "staged through pinned host memory" : "NCCL");
      const StreamedParams* stream = (*gen)->streamed();
      ASSERT_NE(stream, nullptr);
      EXPECT_EQ(stream->shard_bytes(), shard_bytes(world, comm.rank()));
      EXPECT_EQ(stream->slots(), 2);
      Outputs out = run(**gen);
      // Each forward gathers every block once: the first acquire the window of two, each later
      // one the block after it.
      EXPECT_EQ((stream->blocks_copied() - 1) % L, 0) << stream->blocks_copied();
      std::lock_guard<std::mutex> lock(mu);
      got[static_cast<size_t>(comm.rank())] = std::move(out);
    });
    expect_every_rank(got, want);
  }
}

// `zero eval` on several GPU ranks (runtime::evaluate_weights, what eval_command.cc runs): each
// rank evaluates its own samples of each round over the blocks gathered from the shards (11
// samples in rounds of 2 per rank: short last rounds, some ranks only padding), the loss sums
// all-reduced: one resident rank's loss up to the all-reduce's order (1e-6), the same tokens.
TEST_P(GatheredOnEmulator, RanksEvaluateTheirOwnSamplesAsOneRank) {
  constexpr int64_t kT = 6, kSamples = 11;
  const std::string path = ::testing::TempDir() + "zero_gathered_eval_" +
                           std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                           std::string(dtype_name(dtype())) + ".bin";
  {
    std::vector<uint16_t> ids(static_cast<size_t>(kSamples * kT + 1));
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<uint16_t>((i * 37 + 5) % static_cast<size_t>(config_.vocab_size));
    }
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(ids.data(), sizeof(uint16_t), ids.size(), f), ids.size());
    std::fclose(f);
  }
  TokenDatasetOptions o;
  o.block_size = kT;
  o.vocab_size = config_.vocab_size;
  auto data = TokenDataset::open(*default_storage(), path, o);
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  auto full = ModelWeights::load(*layout_, dtype(), init_);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  auto one = DeviceGenerator::create(Device::kCuda, config_, **full, cache_dtype());
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  SelfCommunicator self;
  auto want = evaluate_weights(*data, 2, self, (*one)->model(), (*one)->params());
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  for (int world : {2, 3}) {
    if (dtype() != DType::kF32 && world == 3) continue;  // CI time: padding is dtype-blind
    SCOPED_TRACE(testing::Message() << "world " << world);
    ThreadCommunicator::run(world, [&](Communicator& comm) {
      std::unique_ptr<ModelWeights> host = without_blocks();
      WeightStreaming s = streaming(ParamOffload::kNone, 2);
      s.world = &comm;
      auto gen = DeviceGenerator::create(Device::kCuda, config_, *host, cache_dtype(), s);
      ASSERT_TRUE(gen.ok()) << gen.status().to_string();
      DeviceGenerator& g = **gen;
      auto got =
          evaluate_weights(*data, 2, comm, g.model(), g.params(), [&g] { return g.status(); });
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_EQ(got->tokens, want->tokens) << "rank " << comm.rank();
      EXPECT_NEAR(got->loss, want->loss, 1e-6 * want->loss) << "rank " << comm.rank();
    });
  }
  std::remove(path.c_str());
}

// ZeRO-Infinity inference on several ranks (DeepSpeed's stage 3 + offload_param): each rank's shard
// of every block in pinned host memory (cpu) or its own swap file (nvme), copied up into its own
// block of the slot and gathered in place: one resident rank's tokens, batch and eval loss, bitwise
// (worlds 2 and 3, world 3 in fp32); no block shard on the GPU (device bytes below the
// device-resident shards' run by those shards); the host holds the shards (cpu) or a staging buffer
// per slot (nvme); every rank's swap directory its own (named with its rank), gone after the run.
TEST_P(GatheredOnEmulator, OffloadedShardsGiveOneRanksTokens) {
  auto full = ModelWeights::load(*layout_, dtype(), init_);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  auto one = DeviceGenerator::create(Device::kCuda, config_, **full, cache_dtype());
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  const Outputs want = run(**one);
  for (ParamOffload offload : {ParamOffload::kCpu, ParamOffload::kNvme}) {
    for (int world : {2, 3}) {
      // CI time (each world is a few seconds): bf16 at world 2 only; nvme in fp32 at world 3 only
      // (the last rank's padded shard through the swap file; world 2's nvme is bf16's).
      const bool fp32 = dtype() == DType::kF32;
      if (world == 3 && !fp32) continue;
      if (world == 2 && fp32 && offload == ParamOffload::kNvme) continue;
      SCOPED_TRACE(testing::Message()
                   << "world " << world << ", offload_param " << param_offload_name(offload));
      std::mutex mu;
      std::vector<Outputs> got(static_cast<size_t>(world));
      std::vector<std::string> dirs;
      ThreadCommunicator::run(world, [&](Communicator& comm) {
        std::unique_ptr<ModelWeights> host = without_blocks();
        WeightStreaming resident_shards = streaming(ParamOffload::kNone, 2);
        resident_shards.world = &comm;
        int64_t resident_device_bytes = 0;
        {
          auto gen = DeviceGenerator::create(Device::kCuda, config_, *host, cache_dtype(),
                                             resident_shards);
          ASSERT_TRUE(gen.ok()) << gen.status().to_string();
          resident_device_bytes = (*gen)->streamed()->device_bytes();
        }
        WeightStreaming s = streaming(offload, 2);
        s.world = &comm;
        auto gen = DeviceGenerator::create(Device::kCuda, config_, *host, cache_dtype(), s);
        ASSERT_TRUE(gen.ok()) << gen.status().to_string();
        const StreamedParams* stream = (*gen)->streamed();
        ASSERT_NE(stream, nullptr);
        EXPECT_EQ(stream->shard_bytes(), 0) << "no block shard on the GPU";
        EXPECT_EQ(stream->device_bytes(), resident_device_bytes - shard_bytes(world, comm.rank()));
        if (offload == ParamOffload::kCpu) {
          EXPECT_EQ(stream->host_bytes(), shard_bytes(world, comm.rank()));
        } else {
          EXPECT_GT(stream->host_bytes(), 0);
          EXPECT_LT(stream->host_bytes(), shard_bytes(world, comm.rank()));
        }
        Outputs out = run(**gen);
        std::lock_guard<std::mutex> lock(mu);
        if (offload == ParamOffload::kNvme) {
          dirs.push_back(stream->swap_dir());
          EXPECT_NE(dirs.back().find("_rank" + std::to_string(comm.rank()) + "_"),
                    std::string::npos)
              << dirs.back();
        }
        got[static_cast<size_t>(comm.rank())] = std::move(out);
      });
      expect_every_rank(got, want);
      std::sort(dirs.begin(), dirs.end());
      EXPECT_EQ(std::unique(dirs.begin(), dirs.end()), dirs.end()) << "ranks share a swap dir";
      for (const std::string& d : dirs) EXPECT_FALSE(std::filesystem::exists(d)) << d;
    }
  }
}

// --max_gpu_memory on several ranks is one rank's (plan_partitioned_weights, what
// cli::plan_weights runs with the world): a budget of three gather slots beside the whole units
// gives each rank three slots (blocks gathered two ahead), the plan's slot bytes, with one
// resident rank's outputs, bitwise; a byte short of two slots is refused naming the budget, the
// rank and the bytes needed. fp32, world 2, shards in pinned memory (CI time: the slots are
// dtype-blind).
TEST_P(GatheredOnEmulator, PerRankBudgetSetsTheSlots) {
  if (dtype() != DType::kF32) GTEST_SKIP() << "dtype-blind (CI time)";
  constexpr int kWorld = 2;
  auto full = ModelWeights::load(*layout_, dtype(), init_);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  auto one = DeviceGenerator::create(Device::kCuda, config_, **full, cache_dtype());
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  const Outputs want = run(**one);
  auto probe =
      plan_partitioned_weights(*layout_, dtype(), ParamOffload::kCpu, std::nullopt, 0, kWorld, 0);
  ASSERT_TRUE(probe.ok()) << probe.status().to_string();
  const int64_t budget = probe->resident_bytes + 3 * probe->block_bytes;
  const int64_t L = config_.num_layers;
  std::mutex mu;
  std::vector<Outputs> got(kWorld);
  ThreadCommunicator::run(kWorld, [&](Communicator& comm) {
    auto plan = plan_partitioned_weights(*layout_, dtype(), ParamOffload::kCpu, budget, 0, kWorld,
                                         comm.rank());
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    EXPECT_EQ(plan->slots, 3);
    std::unique_ptr<ModelWeights> host = without_blocks();
    WeightStreaming s = streaming(ParamOffload::kCpu, plan->slots);
    s.world = &comm;
    auto gen = DeviceGenerator::create(Device::kCuda, config_, *host, cache_dtype(), s);
    ASSERT_TRUE(gen.ok()) << gen.status().to_string();
    const StreamedParams* stream = (*gen)->streamed();
    ASSERT_NE(stream, nullptr);
    EXPECT_EQ(stream->slots(), 3);
    Outputs out = run(**gen);
    // The slots as planned; the whole units within a slot of the plan's (their device copies
    // may hold a few more bytes than the layout's numel: 20 for these presets).
    EXPECT_EQ(stream->slots() * stream->slot_bytes(), plan->slots * plan->block_bytes);
    EXPECT_EQ(stream->shard_bytes(), 0);
    EXPECT_LT(stream->device_bytes(), plan->device_bytes() + plan->block_bytes);
    // The first acquire gathers the window of three, each later one the block two ahead.
    EXPECT_EQ((stream->blocks_copied() - 2) % L, 0) << stream->blocks_copied();
    std::lock_guard<std::mutex> lock(mu);
    got[static_cast<size_t>(comm.rank())] = std::move(out);
  });
  expect_every_rank(got, want);
  const int64_t need = probe->resident_bytes + 2 * probe->block_bytes;
  auto small =
      plan_partitioned_weights(*layout_, dtype(), ParamOffload::kCpu, need - 1, 0, kWorld, 1);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("--max_gpu_memory " + std::to_string(need - 1) +
                                          " is too small for rank 1 of 2: " + std::to_string(need) +
                                          " bytes needed"),
            std::string::npos)
      << small.status().message();
}

// An NVMe read failing on one rank (its stale shard copied up: every rank's gathered block is
// wrong) ends every rank at the same step with an error: the failing rank's names the block, its
// peer's names the failing rank; no rank is left in a gather until the world's timeout (60 s:
// this ends in seconds, and the peer's error is not a timeout). A batch, then one sequence and an
// evaluation round on the failed stream. fp32, world 2 (CI time).
TEST_P(GatheredOnEmulator, FailedReadOnOneRankEndsEveryRank) {
  if (dtype() != DType::kF32) GTEST_SKIP() << "dtype-blind (CI time)";
  const auto start = std::chrono::steady_clock::now();
  ThreadCommunicator::run(2, [&](Communicator& comm) {
    // Rank 1's reads fail from its second forward on (5 blocks a forward).
    FailingReads hook(comm.rank() == 1 ? 7 : 1 << 30);
    std::unique_ptr<ModelWeights> host = without_blocks();
    WeightStreaming s = streaming(ParamOffload::kNvme, 2);
    s.world = &comm;
    s.fault_hook = &hook;
    auto gen = DeviceGenerator::create(Device::kCuda, config_, *host, cache_dtype(), s);
    ASSERT_TRUE(gen.ok()) << gen.status().to_string();
    const std::string want = comm.rank() == 1 ? "reading block" : "rank 1 failed";
    std::vector<BatchSequence> seqs = ragged_batch();
    FinishedObserver done;
    const Status batch = (*gen)->generate_batch(seqs, 3, done);
    ASSERT_FALSE(batch.ok()) << "rank " << comm.rank();
    EXPECT_NE(batch.to_string().find(want), std::string::npos) << batch.to_string();
    EXPECT_LT(done.finished.size(), seqs.size());
    std::vector<int32_t> tokens = {3, 14, 15, 92};
    auto single = (*gen)->generate(tokens, greedy());
    ASSERT_FALSE(single.ok()) << "rank " << comm.rank();
    EXPECT_NE(single.status().to_string().find(want), std::string::npos)
        << single.status().to_string();
    // zero eval's check after each forward (runtime::evaluate_weights), agreed the same way.
    const Status eval = agree_on_status(comm, (*gen)->status());
    EXPECT_NE(eval.to_string().find(want), std::string::npos) << eval.to_string();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(50));
}

INSTANTIATE_TEST_SUITE_P(PresetsAndDtypes, GatheredOnEmulator,
                         ::testing::Combine(::testing::Values("gpt2-tiny", "llama-tiny"),
                                            ::testing::Values(DType::kF32, DType::kBF16)),
                         [](const ::testing::TestParamInfo<std::tuple<const char*, DType>>& info) {
                           std::string name =
                               std::string(std::get<0>(info.param)) + "_" +
                               (std::get<1>(info.param) == DType::kF32 ? "fp32" : "bf16");
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace zero::runtime
