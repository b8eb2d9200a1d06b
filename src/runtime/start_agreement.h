// Ranks agree before the engine's first collective (issue 13 items 8 and 9): a rank whose set-up
// failed stops every rank with it (alone, its peers would wait in the first collective until the
// timeout), and ranks started with different settings (stage, model, batch, learning rate, steps,
// ...) are refused with the first differing key and both ranks' values, instead of crashing or
// training with mixed settings.
#pragma once

#include <cstdio>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"

namespace zero::runtime {

// What must be equal on every rank, as flat "path" → value text (JSON objects flattened with '.').
using RunFingerprint = std::map<std::string, std::string>;

// Adds every leaf of `j` under `prefix` ("zero_optimization.stage" → "3"; arrays are one value).
void add_to_fingerprint(RunFingerprint& fp, const std::string& prefix, const nlohmann::json& j);

// "key\tvalue\n" lines in key order, and their xxh3-64.
std::string serialize_fingerprint(const RunFingerprint& fp);
uint64_t fingerprint_hash(const RunFingerprint& fp);

// The first key whose value differs between `a` (rank `rank_a`'s) and `b` (rank `rank_b`'s),
// present in only one of them included, as "KEY: rank A has X, rank B has Y"; empty when equal.
std::string first_difference(const RunFingerprint& a, int rank_a, const RunFingerprint& b,
                             int rank_b);
// Inverse of serialize_fingerprint.
RunFingerprint parse_fingerprint(const std::string& text);

// Collective over `comm`: every rank calls it exactly once, after its set-up and before the first
// other collective, with its own outcome: `local_exit_code` 0 and its fingerprint when ready, or
// the set-up failure's exit code and message. Returns 0 when every rank is ready with the same
// fingerprint; else the exit code this rank should return, after printing on `err`:
//   - each distinct failure message once ("error: rank R: ...", rank 0 without the prefix), by
//     the lowest rank that has it;
//   - on rank 0 when it did not fail itself, which ranks failed;
//   - for different fingerprints, on rank 0, the first differing key (exit code 2).
// Returns 1 after printing if the agreement's own collectives fail.
int agree_to_start(Communicator& comm, int local_exit_code, const std::string& local_error,
                   const RunFingerprint& fingerprint, std::FILE* err);

}  // namespace zero::runtime
