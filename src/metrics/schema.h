#pragma once
// The result-file schema: every name the writer (src/metrics) and the analysis tool (analysis/)
// agree on. docs/results-schema.md documents each one with its shape, type and unit.
// Change a name here and both sides follow; bump kSchemaVersion when the layout changes.
#include <array>
#include <cstdint>

namespace hlp::metrics::schema {

inline constexpr int64_t kSchemaVersion = 1;

// ---- root attributes ------------------------------------------------------------------------
inline constexpr const char* kAttrSchemaVersion = "hlp_schema_version";  // int64
inline constexpr const char* kAttrHlpVersion = "hlp_version";            // string "0.1.0"
inline constexpr const char* kAttrGitCommit = "git_commit";              // string
inline constexpr const char* kAttrComplete = "complete";                 // int64 0|1
inline constexpr const char* kAttrWorldSize = "world_size";              // int64
inline constexpr const char* kAttrMesh = "mesh";                         // int64 [3]: dp, pp, tp
// Every mesh axis, cp included: names ("dp,pp,tp,cp") and sizes (int64 [n], same order); absent
// in files written before they existed.
inline constexpr const char* kAttrMeshAxes = "mesh_axes";                // string
inline constexpr const char* kAttrMeshSizes = "mesh_sizes";              // int64 [n]
inline constexpr const char* kAttrStrategy = "strategy";                 // string "fsdp2+tp2"
inline constexpr const char* kAttrBackend = "backend";                   // string "mpi" | "nccl"
inline constexpr const char* kAttrDevice = "device";                     // string "cpu" | "cuda:H100"
inline constexpr const char* kAttrConfig = "config";                     // string, resolved INI
inline constexpr const char* kAttrHosts = "hosts";                       // string, host of each rank
inline constexpr const char* kAttrSlurmJobId = "slurm_job_id";           // string, "" outside Slurm
inline constexpr const char* kAttrSlurmArrayJobId = "slurm_array_job_id";
inline constexpr const char* kAttrSlurmArrayTaskId = "slurm_array_task_id";
// string: 16 hex digits, FNV-1a of the run's identity (RunInfo::config_identity) and the world
// size; a requeued launch appends only to a file with its own fingerprint. Absent before
// 2026-11-27.
inline constexpr const char* kAttrConfigFingerprint = "config_fingerprint";
// float64: the Unix time of trace time 0 (the first launch's aligned run start); every launch's
// trace rows are shifted onto it. Absent before 2026-11-27.
inline constexpr const char* kAttrTraceEpochUnixS = "trace_epoch_unix_s";
inline constexpr const char* kAttrTorchVersion = "libtorch_version";     // string
inline constexpr const char* kAttrMpiVersion = "mpi_version";            // string
inline constexpr const char* kAttrHdf5Version = "hdf5_version";          // string
inline constexpr const char* kAttrStartTime = "start_time";              // string ISO-8601 UTC
inline constexpr const char* kAttrEndTime = "end_time";                  // string, "" until finish
inline constexpr const char* kAttrStartUnixS = "start_unix_s";           // float64 s since epoch
inline constexpr const char* kAttrThreadsPerRank = "threads_per_rank";   // int64 (--threads)
// The compute pools as bounded on rank 0 (train/thread_pools.h) and the node's load.
inline constexpr const char* kAttrThreadsIntraOp = "threads_intra_op";   // int64 LibTorch
inline constexpr const char* kAttrThreadsInterOp = "threads_inter_op";   // int64 LibTorch
inline constexpr const char* kAttrThreadsOpenmp = "threads_openmp";      // int64, -1 none
inline constexpr const char* kAttrBlasLibrary = "blas_library";          // string
inline constexpr const char* kAttrBlasThreads = "blas_threads";          // int64, -1 unknown
inline constexpr const char* kAttrNodeCores = "node_cores";              // int64 (rank 0's node)
// Most ranks / compute threads asked for on one node, over the job's nodes.
inline constexpr const char* kAttrNodeRanks = "node_ranks";                          // int64
inline constexpr const char* kAttrNodeThreadsRequested = "node_threads_requested";  // int64
// 1 when some node's ranks together asked for more compute threads than it has cores.
inline constexpr const char* kAttrOversubscribed = "oversubscribed";     // int64 0|1
// Why a run ended before its last step: "" (it did not), "signal: ...", "non-finite: ...".
inline constexpr const char* kAttrStoppedReason = "stopped_reason";      // string
// Why the trace stops before the steps do: "" (it does not), or the write error ("... No space
// left on device (ENOSPC)") after which the writer dropped the trace and kept writing steps.
inline constexpr const char* kAttrTraceDropped = "trace_dropped";        // string
inline constexpr const char* kAttrPeakFlopsPerDevice = "peak_flops_per_device";  // float64 FLOP/s
inline constexpr const char* kAttrPeakFlopsSource = "peak_flops_source";  // string: how measured
inline constexpr const char* kAttrFlushEvery = "flush_every_steps";      // int64
inline constexpr const char* kAttrClockOffsetS = "clock_offset_s";  // float64 [world]: rank -> 0
inline constexpr const char* kAttrClockRttS = "clock_rtt_s";        // float64 [world]: ping RTT
// The device rank 0 computed on (train/device.h); "" / 0 on CPU runs where not applicable.
inline constexpr const char* kAttrDeviceKind = "device_kind";        // string "cpu" | "cuda"
inline constexpr const char* kAttrDeviceName = "device_name";        // string "NVIDIA H100 80GB HBM3"
inline constexpr const char* kAttrDeviceCount = "device_count";      // int64 GPUs visible to rank 0
inline constexpr const char* kAttrDevicesPerNode = "devices_per_node";  // int64 GPUs rank 0's node used
inline constexpr const char* kAttrComputeCapability = "device_compute_capability";  // string "9.0"
inline constexpr const char* kAttrDeviceMemoryBytes = "device_memory_bytes";  // int64
inline constexpr const char* kAttrCudaDriverVersion = "cuda_driver_version";    // string "12.4"
inline constexpr const char* kAttrCudaRuntimeVersion = "cuda_runtime_version";  // string "13.0"

// ---- /steps: one float64 [world_size, steps] dataset per metric --------------------------------
inline constexpr const char* kStepsGroup = "/steps";
inline constexpr const char* kStepIndex = "/steps/step";  // int64 [steps]: the step number

// Step metrics (names carry their unit). Rank-local unless said otherwise.
inline constexpr const char* kLoss = "loss";                        // mean token loss, nats
inline constexpr const char* kTokens = "tokens";                    // tokens this rank processed
inline constexpr const char* kStepTime = "step_time_s";             // wall time of the step
inline constexpr const char* kTokensPerS = "tokens_per_s";          // GLOBAL tokens / step time
inline constexpr const char* kTokensPerSPerDevice = "tokens_per_s_per_device";  // global / devices
inline constexpr const char* kDataWait = "data_wait_s";             // waiting for the loader
inline constexpr const char* kForward = "forward_s";
inline constexpr const char* kBackward = "backward_s";
inline constexpr const char* kOptimizer = "optimizer_s";
inline constexpr const char* kCommExposed = "comm_exposed_s";       // comm not hidden by compute
inline constexpr const char* kCommBytes = "comm_bytes";             // payload bytes this rank sent
inline constexpr const char* kPeakBytes = "peak_bytes";             // measured allocator peak
inline constexpr const char* kCurrentBytes = "current_bytes";       // allocator bytes at step end
inline constexpr const char* kParamBytes = "param_bytes";           // as reported by the strategy
inline constexpr const char* kGradBytes = "grad_bytes";
inline constexpr const char* kOptimizerBytes = "optimizer_bytes";
inline constexpr const char* kActivationBytes = "activation_bytes";  // peak - (param+grad+opt)
inline constexpr const char* kMfu = "mfu";                 // = mfu_model (the contract's MFU)
inline constexpr const char* kMfuModel = "mfu_model";      // 6N(+mixing) FLOPs / peak
inline constexpr const char* kMfuExecuted = "mfu_executed";  // FLOPs actually run (LoRA: 4N+..)
inline constexpr const char* kLr = "lr";
inline constexpr const char* kGradNorm = "grad_norm";      // global L2 norm before clipping
// hlp-train's extra step metric (WriterOptions::extra_metrics; absent in older files): the
// rank's predicted activation peak (train/activation_model.h), NaN where the probe could not
// run (no allocator counter).
inline constexpr const char* kActivationPredicted = "activation_predicted_bytes";
inline constexpr const char* kStepEnd = "step_end_s";      // aligned time the step ended (s)
// The rest of the step's wall time on the compute thread (docs/results-schema.md: the step
// equation). comm_exposed_s above is time blocked in collectives; this is time blocked in
// point-to-point ops, i.e. a pipeline stage idle while it waits for its neighbour.
inline constexpr const char* kPipelineWait = "pipeline_wait_s";
inline constexpr const char* kOther = "other_s";           // step - every attributed phase
// CPU seconds during the step.
inline constexpr const char* kCpu = "cpu_s";               // whole process (all threads)
inline constexpr const char* kCpuUtil = "cpu_util";        // cpu_s / step_time_s (cores busy)
inline constexpr const char* kComputeCpu = "compute_cpu_s";  // the training (compute) thread
inline constexpr const char* kLoaderCpu = "loader_cpu_s";    // the loader threads
inline constexpr const char* kCommCpu = "comm_cpu_s";        // the communication threads

inline constexpr std::array<const char*, 30> kStepMetrics = {
    kLoss,           kTokens,          kStepTime,     kTokensPerS,  kTokensPerSPerDevice,
    kDataWait,       kForward,         kBackward,     kOptimizer,   kCommExposed,
    kCommBytes,      kPeakBytes,       kCurrentBytes, kParamBytes,  kGradBytes,
    kOptimizerBytes, kActivationBytes, kMfu,          kMfuModel,    kMfuExecuted,
    kLr,             kGradNorm,        kStepEnd,      kPipelineWait, kOther,
    kCpu,            kCpuUtil,         kComputeCpu,   kLoaderCpu,   kCommCpu};

// Step metrics hlp-train adds beyond kStepMetrics (WriterOptions::extra_metrics): absent from
// files written before they existed, so readers test for them (ResultReader::has_step_metric).
inline constexpr const char* kEvalLoss = "eval_loss";          // held-out loss, NaN between evals
inline constexpr const char* kPrecisionBf16 = "precision_bf16";  // 1 in bf16 runs, else 0
inline constexpr const char* kLossScale = "loss_scale";        // fp16: loss scale of the step; 1 otherwise
inline constexpr const char* kStepSkipped = "step_skipped";    // 1: fp16 overflow, update skipped
// GPU runs only: the CUDA caching allocator's reserved bytes (allocated + cached free blocks),
// now and the step's high-water mark, and the host process's resident memory.
inline constexpr const char* kReservedBytes = "reserved_bytes";
inline constexpr const char* kReservedPeakBytes = "reserved_peak_bytes";
inline constexpr const char* kHostRssBytes = "host_rss_bytes";
// Models with sparse MoE layers only (absent elsewhere and in older files):
// GLOBAL: the step's worst sparse layer's routing imbalance, max over experts / mean over
// experts of the (token, k) slots routed to each, over every rank's tokens (1 = even).
inline constexpr const char* kExpertImbalance = "expert_imbalance";
// The bytes this rank sent by all-to-all in the step (--ep: dispatch and combine, forward and
// backward, and the counts; to other ranks only); 0 without --ep.
inline constexpr const char* kAllToAllBytes = "all_to_all_bytes";
// Of comm_exposed_s: the seconds this rank's compute thread was blocked in all-to-all in the
// step (--ep's exchanges; with --cp-scheme / --cp-attention alltoall also cp's head
// re-sharding); 0 without either.
inline constexpr const char* kAllToAllExposed = "all_to_all_exposed_s";
// How a step report becomes these metrics: step_report.h (step_metric_fields, step_metrics).

// ---- /model: attributes -------------------------------------------------------------------------
inline constexpr const char* kModelGroup = "/model";
inline constexpr const char* kParamsTotal = "params_total";                // int64
inline constexpr const char* kParamsTrainable = "params_trainable";        // int64
inline constexpr const char* kFlopsPerToken = "flops_per_token";           // float64, model conv.
inline constexpr const char* kFlopsPerTokenExecuted = "flops_per_token_executed";  // float64
inline constexpr const char* kFlopsConvention = "flops_convention";        // string
inline constexpr const char* kPattern = "pattern";                         // string "GGGAGGGS"
// Activation probe (train/activation_model.h): per layer kind ("G", "A", "S", "head"), bytes of
// one micro-batch at the run's B and T; absent in older files.
inline constexpr const char* kActivationKinds = "activation_kinds";                  // string "G,A,S,head"
inline constexpr const char* kActivationSaved = "activation_saved_bytes";            // float64 [kinds]
inline constexpr const char* kActivationSavedCkpt = "activation_saved_checkpointed_bytes";  // float64 [kinds]
inline constexpr const char* kActivationTransient = "activation_transient_bytes";    // float64 [kinds]
inline constexpr const char* kActivationProbeLengths = "activation_probe_lengths";  // int64 [n]
inline constexpr const char* kAttnImpl = "attn_impl";  // string: kernel the A/S layers ran
inline constexpr const char* kModelName = "name";                          // string "tiny"
inline constexpr const char* kPlanDevice = "plan_device";          // string: hlp-plan's device row
inline constexpr const char* kPlanStepS = "plan_step_s";            // float64: predicted step time
inline constexpr const char* kPlanTokensPerS = "plan_tokens_per_s";  // float64: predicted tokens/s
inline constexpr const char* kParamsPerRank = "params_per_rank";  // int64 [world] held by rank

// ---- /experts: runs whose model has sparse MoE layers (docs/results-schema.md) ----------------
inline constexpr const char* kExpertsGroup = "/experts";
inline constexpr const char* kExpertsCount = "experts";        // int64 attr: E a sparse layer
inline constexpr const char* kExpertsTopK = "top_k";           // int64 attr: K a token
inline constexpr const char* kEpSize = "ep";                   // int64 attr: expert-parallel size
inline constexpr const char* kExpertsLayers = "layers";        // int64 [L] attr: the sparse layers
inline constexpr const char* kExpertsFirstStep = "first_step";  // int64 attr: step of row 0 below
// int64 [steps, L, E] dataset: (token, k) slots each sparse layer routed to each expert in each
// step, over every rank's tokens (this launch's steps: a resumed launch rewrites it)
inline constexpr const char* kExpertsTokens = "tokens_per_expert";
// int64 [world, L, E] dataset: each rank's own slots, summed over those steps
inline constexpr const char* kExpertsRankTokens = "rank_tokens_per_expert";
// int64 [world] attr: bytes each rank sent by all-to-all over those steps (--ep)
inline constexpr const char* kExpertsAllToAllBytes = "all_to_all_bytes";

// ---- /context_parallel: attributes (runs with --cp > 1 only; issue 25) ------------------------
inline constexpr const char* kContextParallelGroup = "/context_parallel";
inline constexpr const char* kCpSize = "cp";              // int64: ranks a sequence is split over
inline constexpr const char* kCpLayout = "layout";        // string zigzag|contiguous
inline constexpr const char* kCpScheme = "scheme";        // string chain|allgather|alltoall; absent = chain
// string ring|alltoall (--cp-attention); absent = ring
inline constexpr const char* kCpAttentionScheme = "attention_scheme";
// int64 [world x kinds x 2]: bytes each rank sent over the whole run, per exchange kind
// (kCpExchangeKinds order) and direction (forward, backward)
inline constexpr const char* kCpBytesSent = "bytes_sent";
inline constexpr const char* kCpExchangeKinds = "exchange_kinds";  // string "conv_halo,gdn_state,..."
// int64 [world]: causal score pairs of the A layers' ring-attention tiles each rank computed;
// float64 [world]: seconds each rank spent in those tiles (the work balance of the layout)
inline constexpr const char* kCpAttentionEntries = "attention_score_entries";
inline constexpr const char* kCpAttentionSeconds = "attention_s";
// float64 [world]: seconds each rank spent in the G layers' state chain, waits included
inline constexpr const char* kCpStateChainSeconds = "state_chain_s";
inline constexpr const char* kCpSteps = "steps";          // int64: steps the totals cover

// ---- /pipeline: attributes (pipeline runs only) --------------------------------------------------
inline constexpr const char* kPipelineGroup = "/pipeline";
inline constexpr const char* kStageFirstLayer = "stage_first_layer";    // int64 [pp x V]
inline constexpr const char* kStageCost = "stage_cost";                 // float64 [pp], predicted
inline constexpr const char* kStageCostMeasured = "stage_cost_measured_s";  // float64 [pp]
inline constexpr const char* kStageCpuMeasured = "stage_cpu_measured_s";    // float64 [pp]
inline constexpr const char* kBubbleFraction = "bubble_fraction";       // float64, measured
// The schedule's closed-form bubble (pipeline_schedule.h bubble_theory) at the measured F/B/W.
inline constexpr const char* kBubbleFractionTheory = "bubble_fraction_theory";
inline constexpr const char* kSchedule = "schedule";  // string gpipe|1f1b|interleaved|zb-h1
// int64 V: model chunks per stage (--pp-virtual); absent in files before 2026-11-25 (V = 1)
inline constexpr const char* kVirtualChunks = "virtual_chunks";
// float64: the schedule's table run on an ideal clock (no message latency) at this run's measured
// per-chunk F, B, W: the theory with the stages as (un)balanced as they were; absent before
// 2026-11-25
inline constexpr const char* kBubbleFractionSimulated = "bubble_fraction_simulated";
inline constexpr const char* kSplit = "split";                          // string
inline constexpr const char* kMicroBatches = "micro_batches";           // int64

// ---- /segments: attributes, one entry per launch that wrote steps (a requeued run: several) ---
// Launch i wrote the steps from first_step[i] to first_step[i + 1] - 1 (the last to the end).
// A launch whose steps were all dropped by a later resume (it never reached a checkpoint past
// the earlier one) is not listed. Absent before 2026-11-27 (one launch).
inline constexpr const char* kSegmentsGroup = "/segments";
inline constexpr const char* kSegFirstStep = "first_step";        // int64 [segments]
inline constexpr const char* kSegStartUnixS = "start_unix_s";     // float64 [segments]
inline constexpr const char* kSegTraceShiftS = "trace_shift_s";   // float64 [segments]: added to
                                                                  // that launch's trace times
inline constexpr const char* kSegSlurmRestartCount = "slurm_restart_count";  // int64 [segments]
// string, one line per segment: "first_step=K start=ISO slurm_job=ID hosts=H mpi=V"
inline constexpr const char* kSegLaunches = "launches";

// ---- /summary: attributes written by finish() (absent in killed files) -------------------------
// For every step metric <m>: "<m>_median_per_rank" float64 [world] (median over the steps after
// the first kSummarySkipSteps, NaN ignored) and "<m>_median_max_over_ranks" float64 scalar.
inline constexpr const char* kSummaryGroup = "/summary";
inline constexpr const char* kSummarySkipSteps = "skip_steps";    // int64: warm-up steps left out
inline constexpr const char* kSummaryStepsUsed = "steps_used";    // int64
inline constexpr const char* kMedianPerRankSuffix = "_median_per_rank";
inline constexpr const char* kMedianMaxSuffix = "_median_max_over_ranks";

// ---- /trace/rank<N>: 1-D compound dataset, one row per event ------------------------------------
inline constexpr const char* kTraceGroup = "/trace";
inline constexpr int kTraceNameBytes = 48;      // fixed-length, NUL-padded (truncated if longer)
inline constexpr int kTraceCategoryBytes = 16;
// compound members
inline constexpr const char* kEvName = "name";
inline constexpr const char* kEvCategory = "category";
inline constexpr const char* kEvLane = "lane";            // int32: 0 compute, 1 comm, 2 data
inline constexpr const char* kEvStart = "start_s";        // float64 s since aligned run start
inline constexpr const char* kEvEnd = "end_s";
inline constexpr const char* kEvStep = "step";            // int64, -1 outside a step
inline constexpr const char* kEvMicroBatch = "micro_batch";  // int32, -1 if none
inline constexpr const char* kEvBytes = "bytes";          // int64, 0 if none

}  // namespace hlp::metrics::schema
