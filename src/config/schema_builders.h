// Compact constructors for the schema tables (schema.cc, schema_optim.cc). Internal header.
#pragma once

#include <limits>
#include <string_view>

#include "config/schema.h"

namespace zero::config::schema_builders {

constexpr Support kImpl = Support::kImplemented;
constexpr Support kNone = Support::kNoEffect;
constexpr Support kUnimpl = Support::kUnimplemented;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Compact constructors for the common shapes; anything unusual uses designated initializers.
constexpr KeySpec flag(std::string_view name, std::string_view def, Support s = kImpl) {
  return {.name = name, .kind = Kind::kBool, .default_json = def, .support = s};
}
constexpr KeySpec count(std::string_view name, std::string_view def, double min = 0,
                        Support s = kImpl) {
  return {.name = name, .kind = Kind::kInt, .default_json = def, .support = s, .min = min};
}
constexpr KeySpec real(std::string_view name, std::string_view def, double min = 0,
                       Support s = kImpl) {
  return {.name = name, .kind = Kind::kFloat, .default_json = def, .support = s, .min = min};
}
constexpr KeySpec text(std::string_view name, std::string_view def, Support s = kImpl) {
  return {.name = name, .kind = Kind::kString, .default_json = def, .support = s, .nullable = true};
}
constexpr KeySpec open_map(std::string_view name, Support s = kUnimpl) {
  return {.name = name, .kind = Kind::kOpenMap, .default_json = "", .support = s, .nullable = true};
}
constexpr KeySpec block(std::string_view name, const BlockSpec* b, Support s = kImpl) {
  return {.name = name, .kind = Kind::kBlock, .default_json = "{}", .support = s, .block = b};
}

}  // namespace zero::config::schema_builders
