// engine_checkpoint.h.
#include "runtime/engine_checkpoint.h"

#include "runtime/resume_notes.h"

namespace zero::runtime {

StatusOr<std::vector<checkpoint::UnitPartition>> checkpoint_partitions(const Engine& e) {
  std::vector<checkpoint::UnitPartition> p;
  for (int u = 0; u < e.layout().num_units(); ++u) {
    checkpoint::UnitPartition part{e.partition_begin(u), e.partition_numel(u), e.master(u),
                                   e.exp_avg(u),         e.exp_avg_sq(u),      {}};
    if (part.master == nullptr && part.numel > 0) {
      part.exp_avg = part.exp_avg_sq = nullptr;
      part.read = [&e, u](float* master, float* exp_avg, float* exp_avg_sq) {
        return e.read_partition_state(u, master, exp_avg, exp_avg_sq);
      };
    }
    p.push_back(std::move(part));
  }
  return p;
}

StatusOr<checkpoint::SaveRequest> engine_save_request(const Engine& engine) {
  checkpoint::SaveRequest r;
  r.tag = checkpoint::default_tag(engine.global_step());
  r.layout = &engine.layout();
  r.shard_layout = &engine.shard_layout();
  r.stage = engine.options().zero.stage;
  r.model_dtype = engine.options().dtype;
  const checkpoint::RunIdentity id = run_identity(engine.options());
  r.optimizer_type = id.optimizer_type;
  r.beta1 = id.beta1;
  r.beta2 = id.beta2;
  ZERO_ASSIGN_OR_RETURN(r.partitions, checkpoint_partitions(engine));
  r.state = {{"global_step", engine.global_step()},
             {"optimizer_updates", engine.optimizer_updates()},
             {"schedule", engine.schedule().state()},
             {"loss_scaler", engine.loss_scaler().state()}};
  return r;
}

}  // namespace zero::runtime
