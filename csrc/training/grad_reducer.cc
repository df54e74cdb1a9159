// Copyright horovod_cpp authors. The option rules of the gradient engine
// (training/grad_reducer.h), shared by both DistributedOptimizers.
#include "training/grad_reducer.h"

namespace hvd {
namespace detail {

void validate_distributed_options(const DistributedOptions& opts, const std::string& who) {
  if (opts.backward_passes_per_step < 1) {
    throw InvalidArgumentError(who + "backward_passes_per_step must be >= 1, got " +
                               std::to_string(opts.backward_passes_per_step));
  }
  if (!(opts.gradient_predivide_factor > 0)) {
    throw InvalidArgumentError(who + "gradient_predivide_factor must be > 0, got " +
                               std::to_string(opts.gradient_predivide_factor));
  }
  if (opts.gradient_predivide_factor != 1.0 && opts.op != ReduceOp::kAverage) {
    throw InvalidArgumentError(who + "gradient_predivide_factor needs op average, not " + reduce_op_name(opts.op));
  }
}

AllreduceOptions gradient_allreduce_options(const DistributedOptions& opts) {
  AllreduceOptions ao;
  ao.op = opts.op;
  if (opts.op == ReduceOp::kAverage) {
    ao.prescale_factor = 1.0 / opts.gradient_predivide_factor;
    ao.postscale_factor = opts.gradient_predivide_factor;
  }
  return ao;
}

double aggregated_pass_scale(const DistributedOptions& opts) {
  return opts.average_aggregated_gradients ? 1.0 / static_cast<double>(opts.backward_passes_per_step) : 1.0;
}

}  // namespace detail
}  // namespace hvd
