// Copyright horovod_cpp authors.
#include "transport/factory/gloo_world.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "common/fatal.h"
#include "common/logging.h"
#include "transport/factory/transports.h"
#include "transport/gloo/gloo_bootstrap.h"
#include "transport/gloo/gloo_call.h"
#include "transport/gloo/gloo_control_plane.h"
#include "transport/gloo/gloo_direct.h"
#include "transport/gloo/store_client.h"

namespace hvd {
namespace {

std::atomic<int> g_inits{0};        // Gloo inits made by this process: the assignment's <n>
std::atomic<int> g_active{0};       // live GlooWorlds
std::atomic<int> g_abort_rank{-1};  // this rank, for the fixed-mode aborter

int abort_rank() {
  return g_abort_rank.load();
}
// Fixed mode: the launcher (hvdrun --gloo) sees this worker fail and ends the others.
void abort_gloo_job() {
  std::fprintf(stderr, "horovod_cpp: rank %d ends the Gloo job (exit status 1)\n", abort_rank());
  std::fflush(stderr);
  ::_exit(1);
}

// The place of this worker in the job, and the generation its keys are prefixed with.
struct Place {
  int rank = -1, size = -1, local_rank = -1, local_size = -1, cross_rank = -1, cross_size = -1;
  int64_t generation = 0;
};

// The driver's word that this worker's part in the elastic job is over: "end,<reason>".
constexpr char kEndPrefix[] = "end,";

Status parse_assignment(const std::string& key, const std::string& text, Place* p) {
  if (text.rfind(kEndPrefix, 0) == 0) {
    // Not InternalError: the elastic loop restores and re-inits on that, and there is no
    // next membership to join.
    const std::string reason = text.substr(sizeof(kEndPrefix) - 1);
    return Status::Shutdown(
        "horovod_cpp: the elastic driver ended this worker's part in the job (" + key +
        "): " + reason);
  }
  long long v[7];
  char tail = 0;
  if (std::sscanf(text.c_str(), "%lld,%lld,%lld,%lld,%lld,%lld,%lld%c", &v[0], &v[1], &v[2], &v[3],
                  &v[4], &v[5], &v[6], &tail) != 7 ||
      v[1] < 1 || v[0] < 0 || v[0] >= v[1] || v[3] < 1 || v[2] < 0 || v[2] >= v[3] || v[5] < 1 ||
      v[4] < 0 || v[4] >= v[5] || v[6] < 0) {
    return Status::InvalidArgument("rendezvous key " + key + " holds '" + text +
                                   "', not rank,size,local_rank,local_size,cross_rank,cross_size,"
                                   "generation with each rank below its size, nor end,<reason>");
  }
  *p = Place{int(v[0]), int(v[1]), int(v[2]), int(v[3]), int(v[4]), int(v[5]), v[6]};
  return Status::OK();
}

Status place_from_env(const GlooConfig& c, Place* p) {
  if (c.rank < 0 || c.size < 1 || c.rank >= c.size) {
    return Status::InvalidArgument(
        "the Gloo controller needs HOROVOD_RANK and HOROVOD_SIZE (0 <= rank < size) or "
        "HOROVOD_CPP_WORKER_ID (its place then comes from the rendezvous store)");
  }
  p->rank = int(c.rank);
  p->size = int(c.size);
  // Without the local/cross variables every rank is taken for a host of its own.
  p->local_rank = c.local_rank >= 0 ? int(c.local_rank) : 0;
  p->local_size = c.local_size >= 1 ? int(c.local_size) : 1;
  p->cross_rank = c.cross_rank >= 0 ? int(c.cross_rank) : p->rank;
  p->cross_size = c.cross_size >= 1 ? int(c.cross_size) : p->size;
  p->generation = 0;
  return Status::OK();
}

bool cores_shared(int local_size) {
#ifdef __linux__
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0) return true;
  return local_size > CPU_COUNT(&mine);
#else
  return true;
#endif
}

std::string host_name(const GlooConfig& c) {
  if (!c.hostname.empty()) return c.hostname;
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

// A set's planes and the groups they run on (the data group owns the transports' context).
class GlooSetPlanes : public SetPlanes {
 public:
  ~GlooSetPlanes() override {
    transports.reset();  // may still use the bootstrap (NCCL drains its work)
    control.reset();
    bootstrap.reset();
  }
  std::unique_ptr<GlooBootstrap> bootstrap;
};

class GlooWorld : public World {
 public:
  ~GlooWorld() override {
    world_.reset();
    g_active.fetch_sub(1);
  }
  Status init(const InitOptions& options);
  int rank() const override { return place_.rank; }
  int size() const override { return place_.size; }
  int local_rank() const override { return place_.local_rank; }
  int local_size() const override { return place_.local_size; }
  int cross_rank() const override { return place_.cross_rank; }
  int cross_size() const override { return place_.cross_size; }
  Status allgather(const std::vector<int64_t>& mine, std::vector<int64_t>* all) override;
  Status broadcast(std::vector<int>* values, int count) override;
  Status make_set(int id, const std::vector<int>& ranks, const Config& config,
                  std::unique_ptr<SetPlanes>* out) override;
  Status elastic_hosts_updated(bool* updated) override;
  int64_t elastic_generation() const override { return config_.elastic ? place_.generation : 0; }
  bool elastic() const override { return config_.elastic; }

 private:
  /// Reads this init's place from assign/<worker id>/<n> (elastic: after SETting
  /// ready/<worker id>/<n>, waiting up to HOROVOD_ELASTIC_TIMEOUT).
  Status read_assignment(const std::string& where, int n);
  /// Sets job_.direct_max_bytes, the same on every rank (collective over world_).
  Status agree_direct_max_bytes();

  GlooConfig config_;
  Place place_;
  std::unique_ptr<StoreClient> store_;
  GlooJob job_;
  std::string prefix_;                    // g<generation>
  std::unique_ptr<GlooBootstrap> world_;  // every rank: World::allgather/broadcast
  int sets_made_ = 0;                     // make_set calls (collective): each set's key prefix
};

Status GlooWorld::init(const InitOptions& options) {
  g_active.fetch_add(1);  // undone by the destructor, whatever happens here
  if (options.use_comm) {
    return Status::InvalidArgument(
        "init(MPI_Comm) asks for MPI, but HOROVOD_GLOO selects the Gloo "
        "controller (no MPI in such a job)");
  }
  HVD_RETURN_IF_ERROR(GlooConfig::from_env(&config_));
  if (config_.rendezvous_addr.empty() || config_.rendezvous_port == 0) {
    return Status::InvalidArgument(
        "the Gloo controller needs HOROVOD_GLOO_RENDEZVOUS_ADDR and "
        "HOROVOD_GLOO_RENDEZVOUS_PORT (hvdrun --gloo sets them)");
  }
  const auto ms = [](double s) {
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  };
  job_.connect_timeout = ms(config_.timeout_seconds);
  job_.op_timeout = ms(config_.op_timeout_seconds);
  if (config_.elastic) {
    // At least 5 s: a loaded machine may take seconds to accept a connection.
    job_.pair_timeout =
        std::min(job_.connect_timeout, ms(std::max(config_.op_timeout_seconds, 5.0)));
  }
  job_.hostname = host_name(config_);
  const std::string where = "the rendezvous store at " + config_.rendezvous_addr + ":" +
                            std::to_string(config_.rendezvous_port);
  HVD_RETURN_IF_ERROR(gloo_call(where, "connecting", [&] {
    store_ = std::make_unique<StoreClient>(config_.rendezvous_addr, int(config_.rendezvous_port),
                                           config_.secret, job_.connect_timeout);
  }));
  if (config_.elastic && config_.worker_id.empty()) {
    return Status::InvalidArgument(
        "HOROVOD_ELASTIC=1 needs HOROVOD_CPP_WORKER_ID (the elastic driver sets both)");
  }
  job_.store = store_.get();
  HVD_RETURN_IF_ERROR(gloo_call(where, "creating the Gloo TCP device", [&] {
    std::string host;  // the address the store sees, unless an interface is named
    if (config_.iface.empty()) {
      host = is_loopback(config_.rendezvous_addr) ? "127.0.0.1" : store_->local_address();
    }
    job_.device = make_tcp_device(host, config_.iface);
  }));
  for (;;) {
    const int n = g_inits.fetch_add(1);
    // Elastic workers take every place from the driver, the first one too.
    const bool assigned =
        !config_.worker_id.empty() && (config_.elastic || n > 0 || config_.rank < 0);
    if (assigned) {
      HVD_RETURN_IF_ERROR(read_assignment(where, n));
    } else {
      HVD_RETURN_IF_ERROR(place_from_env(config_, &place_));
    }
    // An assignment's generation is new for every membership. Places from the environment
    // are generation 0 every time: a fixed job whose ranks shut down and init again (in step)
    // add their init count, so that no init reads the addresses of an earlier one.
    prefix_ = "g" + std::to_string(place_.generation);
    if (!assigned) prefix_ += "/i" + std::to_string(n);
    // The driver gives a membership up when one of its members is lost (the key holds why):
    // the others then stop waiting for that member's addresses.
    if (config_.elastic) {
      store_->set_abort_key("elastic/abort/" + std::to_string(place_.generation));
    }
    Status st = GlooBootstrap::connect(&job_, prefix_ + "/world", place_.rank, place_.size,
                                       "the job (Gloo)", &world_);
    // The first exchange of the new world: a member lost just after connecting fails it here,
    // and an elastic worker then waits for the next membership as below.
    if (st.ok()) st = agree_direct_max_bytes();
    if (st.ok()) break;
    // Elastic: a member was lost after the driver counted it in (e.g. its node went down
    // before the driver heard of it). This worker announces itself for the next membership,
    // which the driver forms without the lost one; no assignment in time ends the wait.
    if (!config_.elastic) return st;
    HVD_LOG(kWarning) << "elastic generation " << place_.generation
                      << " did not connect, waiting for the next one: " << st.message();
  }
  g_abort_rank.store(place_.rank);
  return Status::OK();
}

// The direct links stream a buffer in pieces, one sent and one received in turn: no hand-off
// to Gloo's device thread, but a piece's latency each. Where this host's ranks have fewer
// than two cores each (a user and a background thread), every hand-off may wait for a time
// slice, and the direct links win up to megabytes (two netns hosts on 2 vCPUs: allreduce
// 64 KiB-1 MiB 0.4-0.6x Gloo's ring, docs/benchmarks.md); with cores to spare Gloo's pipelined
// algorithms win from a few pieces on a real network. Every rank takes the smallest wish:
// the members of a group must take the same path.
Status GlooWorld::agree_direct_max_bytes() {
  int64_t wish = config_.direct_max_bytes;
  if (wish < 0)
    wish = cores_shared(2 * place_.local_size) ? int64_t{1} << 20 : DirectLinks::kMaxBytes;
  std::vector<int64_t> wishes(static_cast<size_t>(place_.size));
  HVD_RETURN_IF_ERROR(world_->allgather(&wish, sizeof(wish), wishes.data()));
  job_.direct_max_bytes = *std::min_element(wishes.begin(), wishes.end());
  return Status::OK();
}

Status GlooWorld::read_assignment(const std::string& where, int n) {
  const std::string id_n = config_.worker_id + "/" + std::to_string(n);
  const std::string key = "assign/" + id_n;
  std::vector<char> value;
  if (!config_.elastic) {
    HVD_RETURN_IF_ERROR(
        gloo_call(where, ("reading " + key).c_str(), [&] { value = store_->get(key); }));
  } else {
    // The driver counts the workers waiting for the next membership by their ready keys.
    const auto wait =
        std::chrono::milliseconds(static_cast<int64_t>(config_.elastic_timeout_seconds * 1000));
    const std::string what = "announcing ready/" + id_n + " and reading " + key;
    Status st = gloo_call(where, what.c_str(), [&] {
      store_->set("ready/" + id_n, {'1'});
      value = store_->get(key, wait);
    });
    // No assignment in time means the driver is gone or gave up: nothing for the elastic
    // loop to retry (an InternalError would make it restore and wait again).
    if (!st.ok()) {
      return Status::Shutdown(st.message() + " (elastic mode: HOROVOD_ELASTIC_TIMEOUT=" +
                              seconds_str(config_.elastic_timeout_seconds) + ")");
    }
  }
  return parse_assignment(key, std::string(value.begin(), value.end()), &place_);
}

Status GlooWorld::elastic_hosts_updated(bool* updated) {
  *updated = false;
  if (!config_.elastic) return Status::OK();
  const std::string key = "elastic/hosts_updated/" + std::to_string(place_.generation);
  int flag = 0;  // rank 0: 1 set, 0 not set, -1 the store failed (every rank then fails)
  Status read = Status::OK();
  if (place_.rank == 0) {
    read = gloo_call("the rendezvous store", ("checking " + key).c_str(),
                     [&] { flag = store_->check(key) ? 1 : 0; });
    if (!read.ok()) flag = -1;
  }
  // Rank 0's answer for all: ranks that acted on different answers would part ways.
  HVD_RETURN_IF_ERROR(world_->broadcast(&flag, sizeof(flag), 0));
  if (flag < 0) {
    return read.ok() ? Status::Internal("rank 0 could not read " + key + " from the store") : read;
  }
  *updated = flag == 1;
  return Status::OK();
}

Status GlooWorld::allgather(const std::vector<int64_t>& mine, std::vector<int64_t>* all) {
  all->resize(mine.size() * static_cast<size_t>(place_.size));
  return world_->allgather(mine.data(), mine.size() * sizeof(int64_t), all->data());
}

Status GlooWorld::broadcast(std::vector<int>* values, int count) {
  values->resize(static_cast<size_t>(count));
  return world_->broadcast(values->data(), values->size() * sizeof(int), 0);
}

Status GlooWorld::make_set(int id, const std::vector<int>& ranks, const Config& config,
                           std::unique_ptr<SetPlanes>* out) {
  out->reset();
  const std::string prefix = prefix_ + "/set" + std::to_string(sets_made_++);
  int me = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == place_.rank) me = static_cast<int>(i);
  }
  if (me < 0) return Status::OK();  // not a member
  const int n = static_cast<int>(ranks.size());
  const std::string name = "process set " + std::to_string(id);
  auto planes = std::make_unique<GlooSetPlanes>();
  HVD_RETURN_IF_ERROR(
      GlooBootstrap::connect(&job_, prefix + "/data", me, n, name, &planes->bootstrap));
  std::shared_ptr<gloo::Context> control;
  HVD_RETURN_IF_ERROR(
      connect_group(job_, prefix + "/control", me, n, name + " (control)", &control));
  std::unique_ptr<DirectLinks> direct;  // the negotiation's small messages
  if (n > 1) {
    HVD_RETURN_IF_ERROR(
        connect_direct_links(job_, prefix + "/direct", me, n, name + " (direct)", &direct));
  }
  TransportContext ctx;
  ctx.set_id = id;
  ctx.layout.global_ranks = ranks;
  ctx.layout.size = n;
  ctx.layout.rank = me;
  ctx.bootstrap = planes->bootstrap.get();
  ctx.config = &config;
  ctx.world_size = place_.size;
  ctx.local_rank = place_.local_rank;
  ctx.local_size = place_.local_size;
  ctx.cores_shared = cores_shared(place_.local_size);
  ctx.lost_peer_code = ErrorCode::kInternal;  // a lost peer is hvd::InternalError under Gloo
  planes->control = std::make_unique<GlooControlPlane>(std::move(control), name, std::move(direct));
  finish_set_planes(ctx, &planes->control, &planes->transports);
  *out = std::move(planes);
  return Status::OK();
}

}  // namespace

Status make_gloo_world(const InitOptions& options, std::unique_ptr<World>* out) {
  auto world = std::make_unique<GlooWorld>();
  HVD_RETURN_IF_ERROR(world->init(options));
  JobAborter aborter;
  aborter.rank = abort_rank;
  aborter.abort = abort_gloo_job;
  set_job_aborter(aborter);
  *out = std::move(world);
  return Status::OK();
}

bool gloo_world_active() {
  return g_active.load() > 0;
}

}  // namespace hvd
