// `zero --version`: the version and the backends this binary was built with.
#include <mpi.h>

#include <string>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/build_info.h"

#if defined(ZERO_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif
#if defined(ZERO_WITH_NCCL)
#include <nccl.h>
#endif

namespace zero::cli {

std::string version_text() {
  std::string out = fmt::format("zero {}\n", ZERO_VERSION_STRING);
#if defined(ZERO_WITH_CUDA)
  out += fmt::format("cuda: {}.{} (CMAKE_CUDA_ARCHITECTURES {})\n", CUDART_VERSION / 1000,
                     (CUDART_VERSION % 1000) / 10, ZERO_BUILT_CUDA_ARCHITECTURES);
#else
  out += "cuda: off\n";
#endif
#if defined(ZERO_WITH_NCCL)
  out += fmt::format("nccl: {}.{}.{}\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
  out += "nccl: off\n";
#endif
  // MPI_Get_library_version may be called before MPI_Init; keep the first line's "name vX.Y.Z"
  // part.
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS && len > 0) {
    std::string s(lib, static_cast<size_t>(len));
    size_t cut = s.find_first_of(",\n");
    out += fmt::format("mpi: {}\n", s.substr(0, cut));
  } else {
    out += "mpi: off\n";
  }
  return out;
}

}  // namespace zero::cli
