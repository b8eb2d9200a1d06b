// Issue 32 item 2, the start-up refusals, on the CPU emulator (docs/emu.md) with its driver and
// GPUs set by the test (emu::emulated_gpus()): a driver older than the runtime, no driver, a binary
// built for another architecture, PTX the driver cannot compile, a GPU in compute mode PROHIBITED,
// and a GPU another process holds in exclusive mode — each one line saying what to do, from the
// same runtime calls a GPU answers (core/cuda/cuda_probe.h), and the engine refusing before any
// work.
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA runtime calls.
#include <gtest/gtest.h>

#include <string>

#include "core/cuda/cuda_probe.h"
#include "core/device.h"
#include "model/model_config.h"
#include "runtime/engine.h"

namespace zero {
namespace {

// Restores the emulated driver and GPUs after each test (they are process-wide).
class CudaProbeOnEmulator : public ::testing::Test {
 protected:
  void TearDown() override { emu::emulated_gpus() = emu::EmulatedGpus{}; }
  emu::EmulatedGpus& gpus() { return emu::emulated_gpus(); }
};

void expect_parts(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* part : parts) {
    EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' in: " << text;
  }
  EXPECT_EQ(text.find('\n'), std::string::npos) << "one line: " << text;
}

TEST_F(CudaProbeOnEmulator, AnSm90GpuOnACurrentDriverIsUsable) {
  const CudaProbe p = assess_cuda_facts(cuda::read_cuda_facts(), "90");
  EXPECT_TRUE(p.available) << p.why_not;
  EXPECT_EQ(p.device_count, emu::kNumDevices);
  EXPECT_EQ(p.description, "GPU 0: Emulated GPU (CPU threads) (sm_90), binary built for sm_90");
}

// CUDA 11.8's driver under a CUDA 12.4 runtime: cudaGetDeviceCount says only "error 35".
TEST_F(CudaProbeOnEmulator, ADriverOlderThanTheRuntimeNamesBothVersions) {
  gpus().driver_version = 11080;
  gpus().runtime_version = 12040;
  const CudaProbe p = assess_cuda_facts(cuda::read_cuda_facts(), "90");
  EXPECT_FALSE(p.available);
  expect_parts(p.why_not, {"the NVIDIA driver supports CUDA 11.8", "CUDA runtime 12.4",
                           "install a driver for CUDA 12.4 or newer"});
}

TEST_F(CudaProbeOnEmulator, NoDriverAtAllSaysSo) {
  gpus().driver_version = 0;
  const CudaProbe p = assess_cuda_facts(cuda::read_cuda_facts(), "90");
  EXPECT_FALSE(p.available);
  expect_parts(p.why_not, {"no NVIDIA driver is loaded", "--device cpu"});
}

// A build for sm_90 on an A100 (sm_80): refused at start naming the rebuild flag, not "no kernel
// image is available" at the first launch.
TEST_F(CudaProbeOnEmulator, ABinaryForAnotherArchitectureNamesTheRebuild) {
  gpus().compute_major = 8;
  gpus().compute_minor = 0;
  const CudaProbe p = assess_cuda_facts(cuda::read_cuda_facts(), "90");
  EXPECT_FALSE(p.available);
  expect_parts(p.why_not, {"GPU 0: Emulated GPU (CPU threads) (sm_80)", "built for sm_90",
                           "-DCMAKE_CUDA_ARCHITECTURES=80"});
}

// Only PTX for the GPU (compute_80 on sm_90) and a driver of an older minor version than the
// toolkit: the driver cannot JIT the newer PTX. With machine code it would run (minor version
// compatibility), and with a current driver the PTX runs.
TEST_F(CudaProbeOnEmulator, PtxNewerThanTheDriverIsRefused) {
  gpus().driver_version = 12020;
  gpus().runtime_version = 12040;
  const CudaProbe jit = assess_cuda_facts(cuda::read_cuda_facts(), "80");
  EXPECT_FALSE(jit.available);
  expect_parts(jit.why_not, {"only PTX", "driver (CUDA 12.2)", "newer CUDA 12.4",
                             "-DCMAKE_CUDA_ARCHITECTURES=90"});
  EXPECT_TRUE(assess_cuda_facts(cuda::read_cuda_facts(), "90").available);
  gpus().driver_version = 12040;
  EXPECT_TRUE(assess_cuda_facts(cuda::read_cuda_facts(), "80").available);
}

TEST_F(CudaProbeOnEmulator, AProhibitedGpuIsRefusedAtTheProbe) {
  gpus().compute_mode = cudaComputeModeProhibited;
  const CudaProbe p = assess_cuda_facts(cuda::read_cuda_facts(), "90");
  EXPECT_FALSE(p.available);
  expect_parts(p.why_not, {"compute mode PROHIBITED", "nvidia-smi -i 0 -c DEFAULT"});
}

// Exclusive-process mode: the probe reads device facts without a context, so it passes; creating
// this process's context on a GPU another process holds fails with cudaErrorDevicesUnavailable,
// named with the mode and the way out. A free GPU in the same mode is claimed.
TEST_F(CudaProbeOnEmulator, AnExclusiveGpuHeldElsewhereIsNamedWhenClaimed) {
  gpus().compute_mode = cudaComputeModeExclusiveProcess;
  gpus().held_elsewhere[3] = true;
  EXPECT_TRUE(assess_cuda_facts(cuda::read_cuda_facts(), "90").available);
  const Status held = cuda::claim_cuda_device(3);
  EXPECT_EQ(held.code(), StatusCode::kFailedPrecondition);
  expect_parts(held.message(),
               {"GPU 3 is in compute mode EXCLUSIVE_PROCESS", "another process already holds it",
                "CUDA_VISIBLE_DEVICES", "nvidia-smi -i 3 -c DEFAULT"});
  EXPECT_TRUE(cuda::claim_cuda_device(2).ok());
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
}

// The engine claims its GPU before anything else on it: Engine::create fails with the one line
// (the trainer prints it as the run's error), nothing allocated, no step run.
TEST_F(CudaProbeOnEmulator, TheEngineRefusesAnExclusiveGpuHeldElsewhereBeforeAnyWork) {
  gpus().compute_mode = cudaComputeModeExclusiveProcess;
  gpus().held_elsewhere[0] = true;
  auto config =
      model::load_model_config(std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/gpt2_tiny");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  runtime::EngineOptions o;
  o.model_config = *config;
  o.device = Device::kCuda;
  o.check_memory = false;
  auto engine = runtime::Engine::create(std::move(o), [](int, int64_t b, int64_t e, float* dst) {
    std::fill(dst, dst + (e - b), 0.01f);
    return ok_status();
  });
  ASSERT_FALSE(engine.ok());
  expect_parts(engine.status().message(),
               {"GPU 0 is in compute mode EXCLUSIVE_PROCESS", "another process already holds it"});
}

}  // namespace
}  // namespace zero
