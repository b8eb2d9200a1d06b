// Scaling of the ds_config reader (config/json_text.h): parse time per value must stay flat as the
// document grows (Complexity() fits O(N)). Before the fix every value's line/column was found by
// rescanning the text from the start: 40,000 array elements took 5 s, quadratically.
#include <string>

#include <benchmark/benchmark.h>

#include "config/json_text.h"

namespace {

std::string array_document(int64_t count) {
  std::string text = "{\"values\": [\n";
  for (int64_t i = 0; i < count; ++i) {
    text += std::to_string(i);
    text += i + 1 < count ? (i % 10 == 9 ? ",\n" : ", ") : "\n";
  }
  return text + "]}";
}

std::string object_document(int64_t count) {
  std::string text = "{\n";
  for (int64_t i = 0; i < count; ++i) text += "  \"key_" + std::to_string(i) + "\": true,\n";
  return text + "}";
}

void BM_ParseArray(benchmark::State& state) {
  const std::string text = array_document(state.range(0));
  for (auto _ : state) {
    auto parsed = zero::config::parse_json_text(text);
    benchmark::DoNotOptimize(parsed);
  }
  state.SetComplexityN(state.range(0));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_ParseArray)
    ->RangeMultiplier(4)
    ->Range(1 << 10, 1 << 20)
    ->Complexity()
    ->Unit(benchmark::kMillisecond);

void BM_ParseObject(benchmark::State& state) {
  const std::string text = object_document(state.range(0));
  for (auto _ : state) {
    auto parsed = zero::config::parse_json_text(text);
    benchmark::DoNotOptimize(parsed);
  }
  state.SetComplexityN(state.range(0));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_ParseObject)
    ->RangeMultiplier(4)
    ->Range(1 << 10, 1 << 18)
    ->Complexity()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
