// libFuzzer target for the ds_config loader: parse, validate, build and render the effective
// config, reload the rendering and build the typed view. Must never crash, hang or throw.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/ds_config.h"
#include "config/effective.h"
#include "config/loader.h"
#include "config/validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zero::config;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto loaded = load_ds_config_text(text, "fuzz");
  if (!loaded.ok()) return 0;
  ValidateOptions options;
  options.world_size = 1 + static_cast<int64_t>(size % 8);
  ValidationReport report = validate_ds_config(loaded->json, options, &loaded->sources);
  (void)report.format();
  if (!report.ok()) return 0;
  auto eff = build_effective_config(loaded->json, options.world_size);
  if (!eff.ok()) return 0;
  std::string rendered = render_effective_config(*eff);
  auto again = load_ds_config_text(rendered, "rendered");
  if (!again.ok()) __builtin_trap();  // the renderer must emit loadable text
  (void)make_ds_config(*eff);
  return 0;
}
