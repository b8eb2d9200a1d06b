// Reading DeepSpeed's pickled values (pickle.h's PyValue trees) with messages that name the file
// and the key: required keys of a given kind, plain values as JSON (ds_config, scheduler and loss
// scaler state), Adam's step count in any of the forms torch and DeepSpeed save it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "checkpoint/pickle.h"
#include "checkpoint/torch_archive.h"
#include "core/status.h"

namespace zero::checkpoint {

// Plain values as JSON; tensors and other objects become null. Bounded in depth and in values
// visited (a pickle may nest, share or cycle).
nlohmann::json py_to_json(const PyValue& v);

// d[key], which must be of `kind` (a tuple counts as a list); DATA_LOSS naming `where` and the key.
StatusOr<const PyValue*> need_key(const PyValue& d, std::string_view key, PyKind kind,
                                  const std::string& where);

// v's integer value, or `fallback` when v is absent or not an int.
int64_t int_or(const PyValue* v, int64_t fallback);

// A step count that may be an int, a float or a one-element tensor (torch.optim's step).
StatusOr<int64_t> py_step(const TorchArchive& archive, const PyValue* v, const std::string& where);

// DeepSpeed's ZeroStageEnum (pickled by member name or value; older versions wrote an int) as 0-3,
// or -1 when v is absent or none of these.
int zero_stage_of(const PyValue* v);

// An int or a float as a double (betas, loss scales).
double py_number(const PyValue& v);

}  // namespace zero::checkpoint
