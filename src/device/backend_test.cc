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

// The host engine's update (the CPU backend on inline streams): the vectorised CPU Adam with the
// rollback copy written in the same pass, bitwise the scalar optimizer, and the copy the state as
// it was before the update.
TEST(CpuBackend, AdamwWritesTheRollbackCopyOnAnInlineStream) {
  auto backend = make_cpu_backend();
  StreamOptions inline_options;
  inline_options.inline_host = true;
  CpuStream host("host", inline_options);
  const int64_t n = 1000;
  std::vector<float> p(n), g(n), m(n, 0.1f), v(n, 0.2f);
  for (int64_t i = 0; i < n; ++i) {
    p[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i % 17) - 0.05f;
    g[static_cast<size_t>(i)] = 0.003f * static_cast<float>(i % 13) - 0.02f;
  }
  const std::vector<float> p0 = p, m0 = m, v0 = v;
  std::vector<float> p2 = p, m2 = m, v2 = v;
  std::vector<float> prev_p(n), prev_m(n), prev_v(n);
  optim::AdamArgs args;
  args.lr = 1e-2f;
  args.weight_decay = 0.1f;
  args.step = 2;
  auto view = [n](std::vector<float>& x) {
    return TensorView{x.data(), DType::kF32, Shape{n}, Device::kCpu};
  };
  AdamShardViews shard{view(p), view(g),      view(m),      view(v),
                       {},      view(prev_p), view(prev_m), view(prev_v)};
  backend->adamw(host, args, shard, 0.5f);  // inline: done when it returns
  optim::AdamShard direct{p2.data(), g.data(), m2.data(), v2.data(), n};
  optim::adam_update(args, direct, 0.5f);
  EXPECT_EQ(p, p2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
  EXPECT_EQ(prev_p, p0);
  EXPECT_EQ(prev_m, m0);
  EXPECT_EQ(prev_v, v0);
  EXPECT_TRUE(host.synchronize().ok());
}

}  // namespace
}  // namespace zero::device::testing
