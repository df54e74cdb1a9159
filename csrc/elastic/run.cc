// Copyright horovod_cpp authors. run(): Horovod's elastic loop over shutdown() and init().
#include "horovod_cpp/elastic.h"

namespace hvd {
namespace elastic {
namespace {

// A new membership: init() waits for the driver's next assignment (and fails if the driver
// ended the job, which then leaves run()).
void reset(State& state) {
  shutdown();
  init();
  state.on_reset();
}

}  // namespace

void run(State& state, const std::function<void(State&)>& fn) {
  for (;;) {
    try {
      // Every pass starts from rank 0's state: after a failure rank 0 (a survivor, numbered
      // first) holds the last commit; new workers have nothing else. A sync that loses a
      // peer is handled as a failure inside fn (as in Python).
      state.sync();
      fn(state);
      return;
    } catch (const InternalError&) {
      // A peer was lost mid-step: the work since the commit may differ between ranks.
      state.restore();
    } catch (const ShutdownError&) {
      // The same loss seen by a collective submitted after the runtime stopped for it (as
      // Python, where ShutdownError is a HorovodInternalError).
      state.restore();
    } catch (const HostsUpdatedInterrupt&) {
      // Raised at a commit on every rank: the state is the committed one everywhere.
    }
    reset(state);
  }
}

}  // namespace elastic
}  // namespace hvd
