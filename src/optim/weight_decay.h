// Which parameters get weight decay: the HF Trainer's grouping (what DeepSpeed receives from it).
#pragma once

#include <cstdint>

namespace zero::optim {

// Weight decay applies to tensors with >= 2 dims (weight matrices, embeddings) and never to
// 1-dim tensors (biases, LayerNorm/RMSNorm weights) or scalars. The decay group uses
// optimizer.params.weight_decay, the other group 0.
constexpr bool decays(int64_t tensor_rank) { return tensor_rank >= 2; }

// The weight decay a tensor of `tensor_rank` dims is updated with.
constexpr double group_weight_decay(int64_t tensor_rank, double weight_decay) {
  return decays(tensor_rank) ? weight_decay : 0.0;
}

}  // namespace zero::optim
