// The probe's verdicts from CUDA's facts alone (assess_cuda_facts, cuda_device_claim_error): pure,
// so they run in every build; cuda_probe_emu_test checks the same through the emulated runtime.
#include "core/device.h"

#include <gtest/gtest.h>

#include <string>

namespace zero {
namespace {

CudaFacts h100(int driver_version = 12040, int runtime_version = 12040) {
  CudaFacts f;
  f.driver_version = driver_version;
  f.runtime_version = runtime_version;
  f.device_count = 1;
  f.have_properties = true;
  f.name = "NVIDIA H100 80GB HBM3";
  f.compute_major = 9;
  f.compute_minor = 0;
  f.total_memory_bytes = size_t{80} << 30;
  return f;
}

bool has(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

TEST(CudaProbeFacts, VersionsReadAsCudaWritesThem) {
  EXPECT_EQ(cuda_version_text(12040), "12.4");
  EXPECT_EQ(cuda_version_text(11080), "11.8");
  EXPECT_EQ(cuda_version_text(13000), "13.0");
}

TEST(CudaProbeFacts, AMatchingGpuAndDriverAreUsable) {
  const CudaProbe p = assess_cuda_facts(h100(), "90");
  EXPECT_TRUE(p.available) << p.why_not;
  EXPECT_EQ(p.description, "GPU 0: NVIDIA H100 80GB HBM3 (sm_90), binary built for sm_90");
  // A driver of an older minor version runs machine code (CUDA's minor version compatibility).
  EXPECT_TRUE(assess_cuda_facts(h100(12020, 12040), "90").available);
}

TEST(CudaProbeFacts, AnOlderDriverMajorIsRefusedNamingBothVersions) {
  CudaFacts f = h100(11080, 12040);
  f.count_error = 35;
  f.count_error_text = "CUDA driver version is insufficient for CUDA runtime version";
  const CudaProbe p = assess_cuda_facts(f, "90");
  EXPECT_FALSE(p.available);
  EXPECT_TRUE(has(p.why_not, "supports CUDA 11.8")) << p.why_not;
  EXPECT_TRUE(has(p.why_not, "CUDA runtime 12.4")) << p.why_not;
}

TEST(CudaProbeFacts, PtxOnlyUnderAnOlderDriverMinorIsRefused) {
  const CudaProbe p = assess_cuda_facts(h100(12020, 12040), "80");
  EXPECT_FALSE(p.available);
  EXPECT_TRUE(has(p.why_not, "-DCMAKE_CUDA_ARCHITECTURES=90")) << p.why_not;
}

TEST(CudaProbeFacts, ProhibitedModeAndAnotherArchitectureAreRefused) {
  CudaFacts prohibited = h100();
  prohibited.compute_mode = 2;
  EXPECT_TRUE(has(assess_cuda_facts(prohibited, "90").why_not, "compute mode PROHIBITED"));
  CudaFacts a100 = h100();
  a100.compute_major = 8;
  EXPECT_TRUE(has(assess_cuda_facts(a100, "90").why_not, "-DCMAKE_CUDA_ARCHITECTURES=80"));
}

TEST(CudaProbeFacts, ClaimErrorsNameTheModeAndTheWayOut) {
  const Status held = cuda_device_claim_error(1, 46, "busy or unavailable", 3);
  EXPECT_EQ(held.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(has(held.message(),
                  "GPU 1 is in compute mode EXCLUSIVE_PROCESS and another process "
                  "already holds it"))
      << held.message();
  const Status other = cuda_device_claim_error(0, 999, "unknown error", 0);
  EXPECT_TRUE(has(other.message(), "creating the CUDA context on GPU 0 failed: unknown error"))
      << other.message();
}

}  // namespace
}  // namespace zero
