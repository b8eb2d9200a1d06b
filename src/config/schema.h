// The ds_config schema as data: every key DeepSpeed's code knows, per block, with its type,
// default, range, alias, deprecation and whether ZeRO.cpp implements it (docs/config.md).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

namespace zero::config {

enum class Kind : uint8_t {
  kBool,
  kInt,      // int64; integral floats such as 2e8 count
  kFloat,    // any number
  kString,   // any string
  kEnum,     // one of KeySpec::choices
  kNumList,  // array of numbers ("betas": [0.9, 0.999])
  kList,     // any array
  kBlock,    // an object described by KeySpec::block
  kOpenMap,  // a free-form object (or any value) we do not descend into
};

enum class Support : uint8_t {
  kImplemented,    // ZeRO.cpp honours it
  kNoEffect,       // accepted; has no effect in DeepSpeed either (dead keys) or is meaningless here
  kUnimplemented,  // DeepSpeed feature ZeRO.cpp lacks: a non-default value draws a warning
};

// What an unknown key inside a block means.
enum class UnknownKeys : uint8_t {
  kError,  // DeepSpeed rejects it too (pydantic extra="forbid", constructor kwargs)
  kTypo,   // key set fully modelled: a near miss of a known key is an error, others a warning
  kAllow,  // free-form extras (apex amp kwargs, torch optimizer kwargs): accepted silently
};

struct BlockSpec;

struct KeySpec {
  std::string_view name;  // canonical spelling (the one `config show` prints)
  Kind kind = Kind::kBool;
  // Default as JSON text; "null" is DeepSpeed's None; "" means no default (key stays absent).
  std::string_view default_json = "null";
  Support support = Support::kImplemented;
  bool nullable = false;  // null accepted (the default is None)
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;           // value must be > min
  std::string_view choices = {};        // kEnum: "none|cpu|nvme"
  bool case_insensitive = false;        // kEnum compared case-insensitively
  std::string_view alias = {};          // second accepted spelling
  std::string_view deprecated_by = {};  // successor key in the same block (old+new is an error)
  std::string_view note = {};           // hint printed with warnings about this key
  bool required = false;                // must be given (optimizer/scheduler params)
  int min_stage = 0;                    // ignored by DeepSpeed below this ZeRO stage
  const BlockSpec* block = nullptr;     // kBlock
};

struct BlockSpec {
  std::string_view name;  // for messages: "zero_optimization", "optimizer.params (Adam)"
  std::span<const KeySpec> keys;
  UnknownKeys unknown = UnknownKeys::kTypo;
};

// An optimizer or scheduler `type` DeepSpeed accepts.
struct TypeSpec {
  std::string_view name;          // canonical spelling
  bool case_insensitive = false;  // DeepSpeed lower-cases optimizer names it knows
  const BlockSpec* params = nullptr;
  Support support = Support::kImplemented;
  bool zero_supported = true;  // optimizer runs under ZeRO without zero_allow_untested_optimizer
  bool zero_incompatible = false;  // 1-bit optimizers: asserts when ZeRO is on
};

// The top-level block.
const BlockSpec& root_schema();
// Known optimizer / scheduler types (DeepSpeed's own and the torch fallbacks).
std::span<const TypeSpec> optimizer_types();
std::span<const TypeSpec> scheduler_types();

// Finds `key` in `block` by canonical name or alias; nullptr when unknown.
const KeySpec* find_key(const BlockSpec& block, std::string_view key);
// Finds a type by name (case-insensitively where DeepSpeed does); nullptr when unknown.
const TypeSpec* find_type(std::span<const TypeSpec> types, std::string_view name);

}  // namespace zero::config
