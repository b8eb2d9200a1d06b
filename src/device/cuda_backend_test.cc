// The CUDA backend against the Backend contract (backend_test_cases.h: the CPU backend's own tests,
// so the results are bitwise the CPU backend's except the sum of squares' order). Skips without a
// GPU; also runs on the CPU emulator (src/emu/cuda_backend_emu_test.cc), where every stream op
// starts after a random delay (ZERO_EMU_STREAM_DELAY_US) so a missing event wait shows.
#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"
#include "device/backend_test_cases.h"
#include "device/cuda_stream.h"
#include "kernels/cuda_test_util.h"

namespace zero::device::testing {
namespace {

// The device the harness allocates, uploads and downloads on (the backend's; one test changes it).
int buffer_device = 0;

void CUDART_CB run_host_function(void* user_data) {
  auto* fn = static_cast<std::function<void()>*>(user_data);
  (*fn)();
  delete fn;
}

const BackendUnderTest kCuda{
    .name = "cuda",
    .device = Device::kCuda,
    .skip_if_unavailable = [] { ZERO_SKIP_WITHOUT_GPU(); },
    .alloc =
        [](size_t nbytes) {
          void* data = nullptr;
          CUDA_ABORT_IF_ERROR(cudaSetDevice(buffer_device));
          CUDA_ABORT_IF_ERROR(cudaMalloc(&data, std::max<size_t>(nbytes, 1)));
          return data;
        },
    .free = [](void* data) { CUDA_ABORT_IF_ERROR(cudaFree(data)); },
    .upload =
        [](void* dst, const void* src, size_t nbytes) {
          CUDA_ABORT_IF_ERROR(cudaSetDevice(buffer_device));
          CUDA_ABORT_IF_ERROR(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice));
          // Why: a pageable upload may return before it lands; the backend's streams are
          // non-blocking, so they would not wait for it.
          CUDA_ABORT_IF_ERROR(cudaStreamSynchronize(cudaStreamLegacy));
        },
    .download =
        [](void* dst, const void* src, size_t nbytes) {
          CUDA_ABORT_IF_ERROR(cudaSetDevice(buffer_device));
          CUDA_ABORT_IF_ERROR(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost));
        },
    .run_on_stream =
        [](Stream& stream, std::function<void()> fn) {
          auto& s = static_cast<CudaStream&>(stream);
          s.activate();
          CUDA_ABORT_IF_ERROR(
              cudaLaunchHostFunc(s.get(), &run_host_function, new std::function<void()>(fn)));
        },
};

// The emulator runs every CUDA thread as a host thread: its sizes stay small (docs/emu.md).
INSTANTIATE_TEST_SUITE_P(
    Cuda, BackendOps,
    ::testing::Combine(::testing::Values(&kCuda),
                       ::testing::ValuesIn(kernels::testing::gpu_or_emulated<int64_t>(
                           {1, 97, 16384, 16385, 40009, 1 << 22}, {1, 97, 4099}))),
    param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, BackendStreams,
                         ::testing::Combine(::testing::Values(&kCuda), stream_sizes()), param_name);

TEST(CudaBackend, RejectsADeviceThatIsNotVisible) {
  ZERO_SKIP_WITHOUT_GPU();
  StreamOptions options;
  options.cuda_device = 1000;
  auto ctx = ExecutionContext::create(Device::kCuda, options);
  ASSERT_FALSE(ctx.ok());
  EXPECT_NE(ctx.status().to_string().find("CUDA device 1000"), std::string::npos)
      << ctx.status().to_string();
}

// The backend on the last visible device (the emulator has 8), driven from a thread whose current
// device is 0 (as the engine's comm and offload threads may be): streams and events are created
// and used on the chosen device, which the emulator checks as CUDA does (an event recorded on
// another device's stream is an error).
TEST(CudaBackend, EveryCallRunsOnTheChosenDevice) {
  ZERO_SKIP_WITHOUT_GPU();
  int device_count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&device_count), cudaSuccess);
  StreamOptions options;
  options.cuda_device = device_count - 1;
  auto ctx = ExecutionContext::create(Device::kCuda, options);
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ((*ctx)->device(), Device::kCuda);
  auto& compute = static_cast<CudaStream&>((*ctx)->compute());
  auto& comm = static_cast<CudaStream&>((*ctx)->comm());
  buffer_device = device_count - 1;  // the buffers on the backend's GPU (no peer access needed)
  struct Restore {
    ~Restore() { buffer_device = 0; }
  } restore;
  EXPECT_EQ(compute.device_index(), device_count - 1);
  EXPECT_EQ(comm.device_index(), device_count - 1);
  Backend& backend = (*ctx)->backend();
  DeviceBuffer a(kCuda, DType::kF32, 5), b(kCuda, DType::kBF16, 5);
  a.upload(std::vector<float>{1, 2, 3, 4, 5});
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  auto event = backend.create_event();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  backend.scale(compute, a.view(), 2.0f);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  compute.record(*event);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  comm.wait(*event);
  backend.copy(comm, b.view(), a.view());
  SumSquaresOut sq;
  backend.sum_squares(comm, b.view(), &sq);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const Status status = comm.synchronize();
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_TRUE(compute.synchronize().ok());
  event->synchronize();
  EXPECT_TRUE(event->query());
  EXPECT_EQ(sq.sum_sq, 4.0 * (1 + 4 + 9 + 16 + 25));  // small integers: exact in bf16 and fp64
}

// A failure kept by the stream (here planted, as a call that failed to queue would keep it) is
// returned once by synchronize(), naming the stream and the call; ops queued meanwhile are skipped
// (CUDA's sticky errors, as CpuStream's), and the stream works again after.
TEST(CudaBackend, KeptFailureIsReturnedOnceAndSkipsLaterOps) {
  ZERO_SKIP_WITHOUT_GPU();
  auto ctx = ExecutionContext::create(Device::kCuda);
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  auto& stream = static_cast<CudaStream&>((*ctx)->compute());
  DeviceBuffer buf(kCuda, DType::kF32, 3);
  buf.upload(std::vector<float>{1.0f, 2.0f, 3.0f});
  stream.note_error(cudaErrorInvalidValue, "planted");
  EXPECT_TRUE(stream.failed());
  (*ctx)->backend().zero(stream, buf.view());  // skipped
  const Status first = stream.synchronize();
  ASSERT_FALSE(first.ok());
  EXPECT_NE(first.to_string().find("compute"), std::string::npos) << first.to_string();
  EXPECT_NE(first.to_string().find("planted failed"), std::string::npos) << first.to_string();
  EXPECT_EQ(buf.download<float>(), (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_TRUE(stream.synchronize().ok());
  (*ctx)->backend().zero(stream, buf.view());
  ASSERT_TRUE(stream.synchronize().ok());
  EXPECT_EQ(buf.download<float>(), std::vector<float>(3, 0.0f));
}

}  // namespace
}  // namespace zero::device::testing
