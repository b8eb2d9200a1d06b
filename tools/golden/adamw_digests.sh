#!/usr/bin/env bash
# Regenerates src/kernels/adamw/adamw_digests.inc: compiles adamw_digest_test.cc against a build of
# the tree from before AdamW moved into kernels/adamw/ (e045532), through a two-header shim mapping
# the new names onto optim::adam_update / offload::cpu_adam_update, and prints the table.
#   tools/golden/adamw_digests.sh OLD_SRC OLD_BUILD     e.g. a worktree of e045532 and its build/release
set -euo pipefail
old_src=$1
old_build=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/kernels/adamw"
cat >"$tmp/kernels/adamw/adamw.h" <<'H'
#pragma once
#include "optim/adam.h"
namespace zero::kernels { using optim::AdamArgs; using optim::AdamShard; }
namespace zero::kernels::cpu { using optim::adam_update; }
H
cat >"$tmp/kernels/adamw/adamw_simd.h" <<'H'
#pragma once
#include "offload/cpu_adam.h"
namespace zero::kernels::cpu {
using offload::CpuIsa; using offload::cpu_isa_supported; using offload::cpu_isa_name;
using AdamSimdOptions = offload::CpuAdamOptions;
inline void adam_update_simd(const AdamArgs& a, const AdamShard& s, float gs,
                             const AdamSimdOptions& o) { offload::cpu_adam_update(a, s, gs, o); }
}
H
cp "$here/src/kernels/adamw/adamw_digests.inc" "$tmp/kernels/adamw/"  # shape of the table only
c++ -std=c++20 -O1 -fopenmp -DZERO_WITH_CUDA=1 -I"$tmp" -I"$old_src/src" -I"$old_build/generated" \
  -isystem /usr/local/cuda/include -o "$tmp/digest" "$here/src/kernels/adamw/adamw_digest_test.cc" \
  "$old_build/libzero_offload.a" "$old_build/libzero_optim.a" "$old_build/libzero_kernel_common.a" \
  "$old_build/libzero_core.a" -lgtest_main -lgtest -lspdlog -lfmt -lxxhash -L/usr/local/cuda/lib \
  -lcudart -Wl,-rpath,/usr/local/cuda/lib -lpthread
# Print mode still checks that every SIMD path equals the reference in the old build.
ADAMW_PRINT_DIGESTS=1 "$tmp/digest" | grep '^    {{'
