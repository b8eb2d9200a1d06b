// check_gpu_arch against CUDA's compatibility rules (Programming Guide, "Binary Compatibility":
// sm_XY machine code runs on X.Z, Z >= Y; PTX is JIT-compiled for newer GPUs; "a" targets run on
// their own GPU only).
#include "core/gpu_arch.h"

#include <gtest/gtest.h>

namespace zero {
namespace {

TEST(GpuArch, SameArchRunsAndNamesIt) {
  GpuArchFit f = check_gpu_arch("90", 9, 0);
  EXPECT_TRUE(f.runs);
  EXPECT_FALSE(f.by_jit);
  EXPECT_EQ(f.message, "binary built for sm_90");
  EXPECT_TRUE(check_gpu_arch("80;90", 8, 0).runs);
  EXPECT_EQ(check_gpu_arch("80;90", 9, 0).message, "binary built for sm_80, sm_90");
}

TEST(GpuArch, OlderGpuIsRefusedWithTheRebuildFlag) {
  GpuArchFit f = check_gpu_arch("90", 8, 0);
  EXPECT_FALSE(f.runs);
  EXPECT_EQ(f.message,
            "built for sm_90, this GPU is sm_80: rebuild with -DCMAKE_CUDA_ARCHITECTURES=80");
  // sm_86 machine code does not run on 8.0 (minor below), nor PTX of compute_86.
  EXPECT_FALSE(check_gpu_arch("86", 8, 0).runs);
}

TEST(GpuArch, MachineCodeRunsOnLaterMinorsOfTheSameMajor) {
  EXPECT_TRUE(check_gpu_arch("80-real", 8, 6).runs);
  EXPECT_FALSE(check_gpu_arch("80-real", 8, 6).by_jit);
  EXPECT_TRUE(check_gpu_arch("80-real", 8, 9).runs);
  // Another major needs PTX: "-real" has none.
  GpuArchFit f = check_gpu_arch("80-real", 9, 0);
  EXPECT_FALSE(f.runs);
  EXPECT_EQ(f.message,
            "built for sm_80, this GPU is sm_90: rebuild with -DCMAKE_CUDA_ARCHITECTURES=90");
}

TEST(GpuArch, PtxRunsOnNewerGpusThroughTheJit) {
  // CMake's plain "80" carries compute_80 PTX too.
  GpuArchFit f = check_gpu_arch("80", 9, 0);
  EXPECT_TRUE(f.runs);
  EXPECT_TRUE(f.by_jit);
  EXPECT_NE(f.message.find("JIT"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("-DCMAKE_CUDA_ARCHITECTURES=90"), std::string::npos) << f.message;
  EXPECT_TRUE(check_gpu_arch("90-virtual", 10, 0).by_jit);
  EXPECT_TRUE(check_gpu_arch("90", 12, 0).runs);
  // PTX never runs on an older GPU.
  EXPECT_FALSE(check_gpu_arch("90-virtual", 8, 9).runs);
}

TEST(GpuArch, ArchSpecificTargetsRunOnTheirGpuOnly) {
  EXPECT_TRUE(check_gpu_arch("90a", 9, 0).runs);
  EXPECT_EQ(check_gpu_arch("90a", 9, 0).message, "binary built for sm_90a");
  EXPECT_FALSE(check_gpu_arch("90a", 10, 0).runs);
  EXPECT_FALSE(check_gpu_arch("100a", 10, 3).runs);
}

TEST(GpuArch, ThreeDigitArchitectures) {
  EXPECT_TRUE(check_gpu_arch("100", 10, 0).runs);
  EXPECT_EQ(check_gpu_arch("90;120-real", 12, 0).message, "binary built for sm_90, sm_120");
}

TEST(GpuArch, ListsWithoutFixedArchitecturesAreNotChecked) {
  for (const char* built : {"all", "all-major", "native", ""}) {
    GpuArchFit f = check_gpu_arch(built, 8, 0);
    EXPECT_TRUE(f.runs) << built;
    EXPECT_NE(f.message.find("not checked"), std::string::npos) << f.message;
  }
}

}  // namespace
}  // namespace zero
