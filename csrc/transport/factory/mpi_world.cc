// Copyright horovod_cpp authors.
#include "transport/factory/mpi_world.h"

#include "transport/mpi/mpi_bootstrap.h"
#include "transport/mpi/mpi_control_plane.h"
#include "transport/factory/transports.h"
#include "transport/control_plane.h"
#include "common/fatal.h"
#include "horovod_cpp_build_config.h"
#if HOROVOD_CPP_HAVE_GLOO
#include "transport/factory/gloo_world.h"
#endif

namespace hvd {
namespace {

bool mpi_usable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// The job aborter of common/fatal.h: MPI_Abort ends every rank of the job.
int world_rank_for_abort() {
  int rank = -1;
  if (mpi_usable()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
void abort_mpi_job() {
  if (mpi_usable()) MPI_Abort(MPI_COMM_WORLD, 1);
}

// A set's planes, the Bootstrap its transports were built over (it owns the data
// communicator) and the control communicator (freed after the planes).
class MpiSetPlanes : public SetPlanes {
 public:
  MpiSetPlanes(std::unique_ptr<MpiBootstrap> bootstrap, MPI_Comm control)
      : bootstrap_(std::move(bootstrap)), control_(control) {}
  ~MpiSetPlanes() override {
    transports.reset();  // may still use the bootstrap (NCCL drains its work, frees its comms)
    control.reset();
    bootstrap_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&control_);
  }
  Bootstrap* bootstrap() const { return bootstrap_.get(); }

 private:
  std::unique_ptr<MpiBootstrap> bootstrap_;
  MPI_Comm control_;
};

}  // namespace

// The controller is chosen before anything touches MPI: a Gloo job never calls MPI_Init.
Status make_world(const InitOptions& options, std::unique_ptr<World>* out) {
  GlooConfig gloo;
  HVD_RETURN_IF_ERROR(GlooConfig::from_env(&gloo));
  if (gloo.enabled) {
#if HOROVOD_CPP_HAVE_GLOO
    return make_gloo_world(options, out);
#else
    return Status::InvalidArgument("HOROVOD_GLOO / HOROVOD_CONTROLLER=gloo asks for the Gloo "
                                   "controller, but this build has no Gloo (libgloo-dev)");
#endif
  }
  auto world = std::make_unique<MpiWorld>();
  HVD_RETURN_IF_ERROR(world->init(options));
  JobAborter aborter;
  aborter.rank = world_rank_for_abort;
  aborter.abort = abort_mpi_job;
  set_job_aborter(aborter);
  *out = std::move(world);
  return Status::OK();
}

Status MpiWorld::init(const InitOptions& options) {
  return mpi_.init(options.use_comm, static_cast<MPI_Fint>(options.mpi_comm_fortran));
}

Status MpiWorld::allgather(const std::vector<int64_t>& mine, std::vector<int64_t>* all) {
  static_assert(sizeof(long long) == sizeof(int64_t), "MPI_LONG_LONG carries int64_t");
  const int n = static_cast<int>(mine.size());
  all->resize(mine.size() * static_cast<size_t>(mpi_.size()));
  HVD_MPI_CHECK(MPI_Allgather(mine.data(), n, MPI_LONG_LONG, all->data(), n, MPI_LONG_LONG,
                              mpi_.base_comm()));
  return Status::OK();
}

Status MpiWorld::broadcast(std::vector<int>* values, int count) {
  values->resize(static_cast<size_t>(count));
  HVD_MPI_CHECK(MPI_Bcast(values->data(), count, MPI_INT, 0, mpi_.base_comm()));
  return Status::OK();
}

Status MpiWorld::make_set(int id, const std::vector<int>& ranks, const Config& config,
                          std::unique_ptr<SetPlanes>* out) {
  out->reset();
  MPI_Comm data = MPI_COMM_NULL, control = MPI_COMM_NULL;
  HVD_RETURN_IF_ERROR(mpi_.make_comms(ranks, &data, &control));
  if (data == MPI_COMM_NULL) return Status::OK();  // not a member
  auto planes = std::make_unique<MpiSetPlanes>(
      std::make_unique<MpiBootstrap>(&mpi_, data, /*owns=*/true, config.reduce_chunk_bytes,
                                     "process set " + std::to_string(id)),
      control);
  TransportContext ctx;
  ctx.set_id = id;
  ctx.layout.global_ranks = ranks;
  ctx.layout.size = static_cast<int>(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == mpi_.rank()) ctx.layout.rank = static_cast<int>(i);
  }
  ctx.bootstrap = planes->bootstrap();
  ctx.config = &config;
  ctx.world_size = mpi_.size();
  ctx.local_rank = mpi_.local_rank();
  ctx.local_size = mpi_.local_size();
  ctx.cores_shared = mpi_.cores_shared();
  planes->control = std::make_unique<MpiControlPlane>(control, ctx.layout.rank, ctx.layout.size,
                                                     mpi_.cores_shared());
  finish_set_planes(ctx, &planes->control, &planes->transports);
  *out = std::move(planes);
  return Status::OK();
}

}  // namespace hvd
