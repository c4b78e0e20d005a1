#pragma once
// One hlp-train job on the world communicator: trainer + recorder + result file + progress.
#include <memory>

#include "comm/communicator.h"
#include "train/config.h"

namespace hlp::cli {

// Collective. Returns the process exit code: 0, or train::kExitCheckpointedOnSignal (75) when
// SIGTERM/SIGUSR1 stopped the run (checkpointed if --checkpoint-dir; the result file is flushed
// and stays complete = 0). Throws hlp::UserError for configurations or data that cannot run.
int run_train_job(const train::TrainConfig& config, std::shared_ptr<comm::Communicator> world);

}  // namespace hlp::cli
