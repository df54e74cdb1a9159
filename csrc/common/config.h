// Copyright horovod_cpp authors. Config: every tunable, read once from the environment.
//
// This is the only place in horovod_cpp that reads environment variables. Each field lists its
// variable and default; docs/environment.md documents the same table for users.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/logging.h"
#include "common/status.h"

namespace hvd {

struct Config {
  /// HOROVOD_FUSION_THRESHOLD (bytes, default 64 MiB): the most bytes of allreduces packed
  /// into one fused reduction. 0 disables fusion.
  int64_t fusion_threshold_bytes = 64ll * 1024 * 1024;
  /// HOROVOD_CYCLE_TIME (milliseconds, default 1): the first sleep of an idle background thread
  /// between coordination cycles (doubling while idle, up to 32x). Work wakes it at once, so this
  /// does not delay collectives; it bounds how fast an idle rank notices shutdown and stall
  /// requests of other ranks.
  double cycle_time_ms = 1.0;
  /// HOROVOD_CACHE_CAPACITY (entries, default 4096): response cache size; 0 disables it.
  /// Larger than Horovod's 1024: a model with more tensors than the cache holds misses every
  /// step, and an entry costs only a few hundred bytes (the bit vector covers live entries).
  int64_t cache_capacity = 4096;
  /// HOROVOD_STALL_CHECK_TIME_SECONDS (default 60): after this long with some ranks having
  /// submitted a tensor and others not, rank 0 logs the tensor and the missing ranks.
  double stall_check_seconds = 60.0;
  /// HOROVOD_STALL_CHECK_DISABLE (default 0): 1 turns the stall check off.
  bool stall_check_disabled = false;
  /// HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (default 0 = never): after this long stalled, the job
  /// shuts down; pending operations fail with a ShutdownError that says why.
  double stall_shutdown_seconds = 0.0;
  /// HOROVOD_LOG_LEVEL (trace|debug|info|warning|error|fatal, default warning).
  LogLevel log_level = LogLevel::kWarning;
  /// HOROVOD_TIMELINE (path, default none): rank 0 writes a Chrome-trace JSON timeline there.
  std::string timeline_path;
  /// HOROVOD_TIMELINE_MARK_CYCLES (default 0): 1 adds a marker per coordination cycle.
  bool timeline_mark_cycles = false;
  /// HOROVOD_CPP_SHM (default 1): CPU allreduces among ranks of one host go through shared
  /// memory; 0 forces MPI.
  bool shm_enabled = true;
  /// HOROVOD_CPP_SHM_CONTROL (default 1): with HOROVOD_CPP_SHM, a set whose ranks are all on
  /// one host negotiates through shared memory (the steady-state bit-vector AND); 0: MPI.
  bool shm_control = true;
  /// HOROVOD_CPP_SHM_MIN_BYTES (default 0): smaller allreduces and reducescatters use MPI.
  /// Shared memory is faster at every size, and sums every element in rank order wherever
  /// it lies in a fused batch (bitwise-reproducible results across runs that fuse differently).
  int64_t shm_min_bytes = 0;
  /// HOROVOD_CPP_SHM_CHUNK_BYTES (default 1 MiB): bytes per pipelined shared-memory step; a
  /// multiple of 64 of at most 1 TiB (smaller than 4 KiB counts as 4 KiB).
  int64_t shm_chunk_bytes = 1024 * 1024;
  /// HOROVOD_CPP_SHM_SINGLE_COPY_BYTES (default 0 = never) and
  /// HOROVOD_CPP_SHM_SINGLE_COPY_MAX_BYTES (default 256 KiB; 0 = no limit): broadcasts of at
  /// least the first, and allgathers and alltoalls (longest block x ranks) of at least 8 times
  /// it, and less than the second are read straight from the peer's memory (process_vm_readv,
  /// one copy) when every rank can; the others go through the shared segment (two copies, in
  /// cache, in rounds that move through the slots like a ring). Since the rounds do, the two
  /// copies beat process_vm_readv at every size on the benchmark machine (benchmarks-history.md,
  /// round eleven): single copies are for machines where they do not.
  int64_t shm_single_copy_bytes = 0;
  int64_t shm_single_copy_max_bytes = 256 * 1024;
  /// HOROVOD_CPP_SHM_MEASURED_MIN_BYTES (default 256 KiB; 0 = off): collectives of at least
  /// this many bytes (allgather, alltoall: the longest block times the ranks) choose their way
  /// by measurement, agreed by every rank each cycle (transport/shm/gather_paths.h): broadcasts,
  /// allgathers and alltoalls between two copies and one (when every rank can read its peers'
  /// memory, outside the fixed single-copy window), and every one of them, allreduce and
  /// reducescatter too, between the shm segments and the MPI data plane (MPI controller only;
  /// reductions only where MPI gives the same bits: 2 ranks or integers).
  int64_t shm_measured_min_bytes = 256 * 1024;
  /// HOROVOD_CPP_TEST_SHM_PATH_VOTES (default 0, testing only): the measured paths' votes are
  /// pseudo-random and different on every rank every cycle, so that only the agreement keeps
  /// the ranks on the same way.
  bool test_shm_path_votes = false;
  /// HOROVOD_CPP_TEST_SHM_PATH (default 0, testing only): 0 the measured paths take the agreed
  /// way; 1 every call that chooses there takes the first way (two copies, the shm fold); 2
  /// the second (one copy, MPI: for allreduce and reducescatter only where the data plane is
  /// MPI, for the others only where single copies work).
  int64_t test_shm_path = 0;
  /// HOROVOD_CPP_SHM_GATHER_MAX_BYTES (default 0 = no limit): broadcasts, allgathers and
  /// alltoalls of more bytes per rank than this use MPI instead of shared memory.
  int64_t shm_gather_max_bytes = 0;
  /// HOROVOD_CPP_SHM_HIERARCHICAL (default 1): CPU collectives of a set that spans hosts with
  /// the same number (>= 2) of its ranks on each run through transport/hier/: allreduces as a
  /// shared-memory reduce-scatter on each host, an MPI allreduce of each share across hosts
  /// and a shared-memory allgather; other collectives over MPI. 0: plain MPI.
  bool shm_hierarchical = true;
  /// HOROVOD_CPP_TEST_RANKS_PER_HOST (default 0, testing only): treat every run of this many
  /// consecutive global ranks as one host when choosing CPU transports, so that the paths
  /// for sets spanning hosts run (and are tested) on one machine.
  int64_t test_ranks_per_host = 0;
  /// HOROVOD_CPP_TEST_HOSTS_ROUND_ROBIN (default 0, testing only): with the above, deal the
  /// global ranks to the hosts in turn instead (rank r on host r % hosts), as
  /// `mpirun --map-by node` places them.
  bool test_hosts_round_robin = false;
  /// HOROVOD_CPP_BUFFER_CACHE_BYTES (default 256 MiB, 0 = off): the most bytes of released
  /// result tensors (from 256 KiB up) kept mapped for reuse (common/buffer_cache.h).
  int64_t buffer_cache_bytes = 256ll * 1024 * 1024;
  /// HOROVOD_CPP_HUGE_PAGES (default 1): result tensors from 2 MiB up start on a huge-page
  /// boundary and ask for transparent huge pages (common/buffer_cache.h).
  bool huge_pages = true;
  /// HOROVOD_CPP_REDUCE_CHUNK_BYTES (default 4 MiB): large CPU reductions are issued in pieces
  /// of at most this many bytes, which keeps each piece's working set in cache.
  int64_t reduce_chunk_bytes = 4ll * 1024 * 1024;

  /// HOROVOD_CPP_ABORT_GRACE_SECONDS (default 5, 0 = only at exit): after a fatal condition
  /// (a stall shutdown, a failed coordination; common/fatal.h) the job is ended with MPI_Abort
  /// this long afterwards unless every rank has called hvd::init() again, and at once at
  /// process exit. Raise it to leave time for e.g. saving a checkpoint. Always 0 with
  /// HOROVOD_ELASTIC=1: there the program (its elastic loop) and the driver decide.
  double abort_grace_seconds = 5.0;
  /// HOROVOD_CPP_TEST_FAKE_VERSION (tests only, default empty): this rank claims to run this
  /// library version in the init-time check that every rank runs the same version and wire
  /// format, so the mismatch can be tested.
  std::string test_fake_version;
  /// HOROVOD_CPP_TEST_CORRUPT_RESPONSE (tests only, default empty): rank 0 corrupts its
  /// responses to tensors named "hvd_corrupt.*" this way (coordination/test_faults.h), so
  /// that tests can check that every rank refuses them.
  std::string test_corrupt_response;
  /// HOROVOD_CPP_TEST_EXIT_AFTER_CONNECT (tests only, default 0): init() ends this process
  /// (_exit(9)) right after its World connected, before the init-time agreements: a member
  /// lost while its elastic membership is being set up.
  bool test_exit_after_connect = false;

  // Autotune (csrc/tuning/, docs/running.md): the fusion threshold and cycle time are searched
  // on the job's own steps, then the best are kept. Must be the same on every rank.
  /// HOROVOD_AUTOTUNE (default 0): 1 turns autotuning on (global process set).
  bool autotune = false;
  /// HOROVOD_AUTOTUNE_LOG (path, default none): rank 0 writes one CSV line per trial there.
  std::string autotune_log;
  /// HOROVOD_AUTOTUNE_WARMUP_SAMPLES (default 1): samples discarded after each change.
  int64_t autotune_warmup_samples = 1;
  /// HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE (default 10): coordination cycles that moved
  /// allreduce data per sample.
  int64_t autotune_steps_per_sample = 10;
  /// HOROVOD_CPP_AUTOTUNE_SAMPLES_PER_TRIAL (default 3): samples whose median scores a trial.
  int64_t autotune_samples_per_trial = 3;

  // GPU data plane (docs/gpu.md); used only by builds with NCCL.
  /// HOROVOD_HIERARCHICAL_ALLREDUCE (default 0): 1 reduces CUDA tensors in three steps: NCCL
  /// reduce-scatter within each host, MPI allreduce across hosts, NCCL allgather within the
  /// host. Must be the same on every rank (checked when the first GPU collective runs).
  bool hierarchical_allreduce = false;
  /// HOROVOD_CPP_CUDA_DEVICE (default -1 = local_rank()): the CUDA device this rank uses; CUDA
  /// tensors on another device are rejected.
  int64_t cuda_device = -1;
  /// NCCL_MULTI_RANK_GPU_ENABLE (NCCL's own variable, default 0): 1 lets several ranks of a
  /// host share one GPU with NCCL >= 2.30 (for testing: the GPU is time-sliced). The default
  /// device then becomes local_rank() modulo the host's device count.
  bool nccl_multi_rank_gpu = false;
  /// HOROVOD_CPP_NCCL_TIMEOUT_SECONDS (default 300, 0 = never): a GPU collective not finished
  /// after this long aborts its NCCL communicator; its tensors (and later ones on that process
  /// set) fail with an error instead of hanging.
  double nccl_timeout_seconds = 300.0;

  /// Reads the variables above through `lookup` (getenv when empty). Fails with a message that
  /// names the variable and the bad value.
  static Status from_env(Config* out,
                         const std::function<std::optional<std::string>(const char*)>& lookup = {});

  /// One line listing every field, for the debug log at startup.
  std::string describe() const;
};

/// The Gloo controller's settings (docs/environment.md, issue 36's contract with hvdrun --gloo).
/// Read apart from Config: they differ from rank to rank (Config must agree across ranks).
struct GlooConfig {
  /// HOROVOD_GLOO=1 or HOROVOD_CONTROLLER=gloo: init() builds the Gloo World, never MPI's.
  bool enabled = false;
  /// HOROVOD_GLOO_RENDEZVOUS_ADDR / _PORT: the rendezvous store (TCP).
  std::string rendezvous_addr;
  int64_t rendezvous_port = 0;
  /// HOROVOD_CPP_RENDEZVOUS_SECRET: the job's secret, sent with every store request.
  std::string secret;
  /// HOROVOD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE (-1: not set).
  int64_t rank = -1, size = -1, local_rank = -1, local_size = -1, cross_rank = -1, cross_size = -1;
  /// HOROVOD_HOSTNAME (default: gethostname()): groups the ranks of one host.
  std::string hostname;
  /// HOROVOD_CPP_WORKER_ID (optional): re-inits read their place from the store's
  /// assign/<worker_id>/<n> key.
  std::string worker_id;
  /// HOROVOD_GLOO_IFACE (optional): the interface Gloo's TCP device binds.
  std::string iface;
  /// HOROVOD_GLOO_TIMEOUT_SECONDS (default 30): rendezvous and connection timeout.
  double timeout_seconds = 30.0;
  /// HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS (default 5): a collective waiting longer on a peer
  /// fails with hvd::InternalError on every surviving rank.
  double op_timeout_seconds = 5.0;
  /// HOROVOD_CPP_GLOO_DIRECT_MAX_BYTES (default -1: chosen at init): allreduces, allgathers
  /// and broadcasts up to this many bytes go over the direct links (gloo_direct.h) rather
  /// than Gloo's own algorithms. Every rank of a job takes the smallest of the ranks' values.
  int64_t direct_max_bytes = -1;
  /// HOROVOD_ELASTIC=1: elastic mode (issue 37; hvdrun's elastic driver sets it). Every init()
  /// reads its place from assign/<worker_id>/<n> after announcing itself with ready/<id>/<n>,
  /// and a lost peer never ends the process (Config::abort_grace_seconds is 0).
  bool elastic = false;
  /// HOROVOD_ELASTIC_TIMEOUT (seconds, default 600): how long an elastic init() waits for its
  /// assignment (the driver may be waiting for hosts); connecting keeps timeout_seconds.
  double elastic_timeout_seconds = 600.0;

  /// Reads the variables above through `lookup` (getenv when empty).
  static Status from_env(GlooConfig* out,
                         const std::function<std::optional<std::string>(const char*)>& lookup = {});
};

}  // namespace hvd
