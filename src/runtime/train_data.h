// Opens `zero train`'s --train_file (and --validation_file, `zero eval`'s too): prepared data
// (`zero data prepare`: tokens + loss mask + manifest, checked against the model's tokenizer) or a
// token file (docs/formats/data.md). Plain text is never read as token ids: without --data_dtype it
// is refused with the command to run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "core/storage.h"
#include "data/token_dataset.h"

namespace zero::runtime {

struct TrainDataRequest {
  std::string train_file;                 // --train_file: a token file, PREFIX or PREFIX.tokens
  std::optional<std::string> data_dtype;  // --data_dtype as given
  std::string model;                      // --model: a directory (its tokenizer, if any, is
                                          // checked against a manifest) or preset:NAME
  int64_t block_size = 0;
  int64_t vocab_size = 0;             // the model's
  std::string flag = "--train_file";  // the flag that named the file, for messages
};

// Errors (all bad input) name the file and what to do: an unknown --data_dtype, a manifest whose
// tokenizer hash differs from the model's tokenizer (both hashes named), a --data_dtype that
// contradicts the manifest, plain text without --data_dtype, and TokenDataset::open's errors.
StatusOr<TokenDataset> open_train_data(Storage& storage, const TrainDataRequest& request);

}  // namespace zero::runtime
