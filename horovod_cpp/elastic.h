// Copyright horovod_cpp authors. Public API: elastic training (issue 37), Horovod's elastic
// model on the Gloo controller.
//
// An elastic job is started by hvdrun's elastic driver (HOROVOD_ELASTIC=1). When a worker is
// lost, the survivors get hvd::InternalError from the collective in flight; they shut down,
// init() again and receive their new places (a new generation) from the driver. When the
// driver finds new hosts, it flags the running generation, and the workers learn it through
// hosts_updated() at a point of their choosing (a commit), then re-init to let them in.
//
// A program keeps what must survive a reset in a State and trains inside run():
//
//   hvd::elastic::TensorState state(params, optimizer);
//   hvd::elastic::run(state, [&](hvd::elastic::State& s) {
//     for (; state.value("epoch") < epochs; ...) { ...; state.commit(); }
//   });
//
// run() syncs the state from rank 0, calls the function, and on InternalError (ShutdownError
// too) restores the last commit and resets (shutdown(), init(), the reset callbacks), on
// HostsUpdatedInterrupt resets keeping the state; then syncs and calls it again. Ranks of a new
// membership are numbered survivors first, so rank 0 always holds the last commit.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "horovod_cpp/training.h"

namespace hvd {
namespace elastic {

/// Whether the elastic driver asked the current membership to change without a failure (new
/// hosts were found). Collective: every rank calls it at the same point of its program, and
/// every rank gets rank 0's answer. False outside elastic mode (still safe to call on every
/// rank). Throws hvd::InternalError when a peer is lost, NotInitializedError before init().
bool hosts_updated();

/// The generation of the current elastic membership (0 for the first, one more for each
/// membership after it); 0 outside elastic mode. Throws NotInitializedError before init().
int64_t generation();

/// Thrown by State::check_host_updates() (so by commit()) on every rank when the membership
/// is to change: run() resets without restoring, the work since the commit is kept.
class HostsUpdatedInterrupt : public std::runtime_error {
 public:
  HostsUpdatedInterrupt() : std::runtime_error("horovod_cpp: the elastic job's hosts changed") {}
};

/// What a training program keeps across resets. Subclasses say how to save, restore and
/// broadcast their contents; commit() and the reset callbacks are common.
class State {
 public:
  virtual ~State();

  /// Saves the state (restore() returns to it), then check_host_updates(). Collective.
  void commit();
  /// Throws HostsUpdatedInterrupt on every rank when hosts_updated(). Collective.
  void check_host_updates();
  /// Keeps a copy of the current contents (local).
  virtual void save() = 0;
  /// Returns to the last saved contents (local).
  virtual void restore() = 0;
  /// Replaces the contents by rank 0's and saves them (collective).
  virtual void sync() = 0;

  /// `callback` runs after every reset (new membership: e.g. rescale the learning rate by the
  /// new size()), in the order registered.
  void register_reset_callbacks(std::function<void()> callback);
  /// Runs the reset callbacks (run() calls it after each reset).
  void on_reset();

 private:
  std::vector<std::function<void()>> reset_callbacks_;
};

/// The state of a program built on horovod_cpp/training.h: parameters, an optional optimizer
/// (its state tensors and hyperparameters) and named integers (epoch, batch, ...). Saved
/// copies live in host memory; sync() broadcasts everything from rank 0 under names starting
/// with "hvd.elastic.".
class TensorState : public State {
 public:
  /// `values` are the integers kept with the tensors, with their first values.
  TensorState(ParameterList params, std::shared_ptr<Optimizer> optimizer = nullptr,
              std::map<std::string, int64_t> values = {});

  /// The integer `name` (InvalidArgumentError if it was not given to the constructor).
  int64_t value(const std::string& name) const;
  void set_value(const std::string& name, int64_t v);

  const ParameterList& parameters() const { return params_; }

  void save() override;
  void restore() override;
  void sync() override;

 private:
  int64_t* slot(const std::string& name);

  ParameterList params_;
  std::shared_ptr<Optimizer> optimizer_;
  std::map<std::string, int64_t> values_;
  // The last save().
  std::vector<std::vector<float>> saved_params_;
  std::vector<std::vector<char>> saved_optimizer_;
  std::vector<double> saved_hyper_;
  std::map<std::string, int64_t> saved_values_;
};

/// Horovod's elastic loop: sync the state, call `fn`; on InternalError (or ShutdownError: a
/// collective submitted after the runtime stopped for a lost peer) restore the last commit, on
/// HostsUpdatedInterrupt keep the state; reset (shutdown(), init(), the state's reset callbacks)
/// and go again. Returns when `fn` returns. A reset that fails (init()'s error, e.g. the driver
/// ended the job) and any other exception propagate. hvd::init() must have been called before.
void run(State& state, const std::function<void(State&)>& fn);

}  // namespace elastic
}  // namespace hvd
