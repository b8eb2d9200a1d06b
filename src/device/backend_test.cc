// The CPU backend against the Backend contract (backend_test_cases.h: plain loops, core/dtype.h
// conversions, optim::adam_update), its streams in delay mode; and make_backend()'s dispatch.
#include <cstdlib>

#include "core/device.h"
#include "device/backend_test_cases.h"

namespace zero::device::testing {
namespace {

const BackendUnderTest kCpu{
    .name = "cpu",
    .device = Device::kCpu,
    .skip_if_unavailable = [] {},
    .alloc = [](size_t nbytes) { return std::malloc(std::max<size_t>(nbytes, 1)); },
    .free = [](void* data) { std::free(data); },
    .upload = [](void* dst, const void* src, size_t nbytes) { std::memcpy(dst, src, nbytes); },
    .download = [](void* dst, const void* src, size_t nbytes) { std::memcpy(dst, src, nbytes); },
    .run_on_stream =
        [](Stream& stream, std::function<void()> fn) {
          static_cast<CpuStream&>(stream).enqueue([fn = std::move(fn)] {
            fn();
            return ok_status();
          });
        },
};

INSTANTIATE_TEST_SUITE_P(Cpu, BackendOps, ::testing::Combine(::testing::Values(&kCpu), op_sizes()),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Cpu, BackendStreams,
                         ::testing::Combine(::testing::Values(&kCpu), stream_sizes()), param_name);

TEST(Backend, DispatchIsByDevice) {
  auto cpu = make_backend(Device::kCpu);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->device(), Device::kCpu);
  // The CUDA backend exists when it is built and a GPU is usable; otherwise the error says which.
  auto cuda = make_backend(Device::kCuda);
  if (probe_cuda().available) {
    ASSERT_TRUE(cuda.ok()) << cuda.status().to_string();
    EXPECT_EQ((*cuda)->device(), Device::kCuda);
  } else {
    ASSERT_FALSE(cuda.ok());
    const std::string why = cuda.status().to_string();
    EXPECT_NE(why.find(probe_cuda().built ? "no usable GPU" : "no CUDA backend"), std::string::npos)
        << why;
    EXPECT_FALSE(ExecutionContext::create(Device::kCuda).ok());
  }
}

// A moved-from buffer is empty: code that pools buffers (the coordinator's stage-3 gathers) tests
// data() to know whether a unit still holds one.
TEST(DeviceBuffer, MovedFromIsEmpty) {
  auto cpu = make_backend(Device::kCpu);
  ASSERT_TRUE(cpu.ok());
  StatusOr<device::DeviceBuffer> a = (*cpu)->allocate(DType::kF32, 8);
  ASSERT_TRUE(a.ok());
  void* data = a->data();
  device::DeviceBuffer b(std::move(*a));
  EXPECT_EQ(a->data(), nullptr);  // NOLINT(bugprone-use-after-move): the contract under test
  EXPECT_EQ(b.data(), data);
  device::DeviceBuffer c;
  c = std::move(b);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(c.numel(), 8);
}

}  // namespace
}  // namespace zero::device::testing
