#pragma once
// One hlp-train job on the world communicator: trainer + recorder + result file + progress.
#include <memory>

#include "comm/communicator.h"
#include "train/config.h"

namespace hlp::cli {

// Collective. Throws hlp::UserError for configurations or data that cannot run.
void run_train_job(const train::TrainConfig& config, std::shared_ptr<comm::Communicator> world);

}  // namespace hlp::cli
