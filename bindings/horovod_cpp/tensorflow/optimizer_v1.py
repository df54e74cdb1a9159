"""The tf.compat.v1 session style: DistributedOptimizer for tf.compat.v1.train optimizers and
BroadcastGlobalVariablesHook for MonitoredTrainingSession."""

import tensorflow as tf

from .._basics import Average, global_process_set
from .compression import Compression
from .functions import broadcast_global_variables
from .gradients import GradientReducer, LocalVariables


class _PassAccumulator:
    """backward_passes_per_step=k for the tf.compat.v1 optimizer: every pass adds its local
    gradients to accumulators (local variables, zero at start); the k-th pass reduces the sums
    across ranks (divided by k first with average_aggregated_gradients) and zeroes the
    accumulators, and only then are the gradients applied. The other passes apply nothing
    but still count in global_step, as in Horovod. Works in graph mode (the pass counter and
    the choice are ops) and eagerly."""

    def __init__(self, passes, average, sparse_as_dense):
        self.passes = int(passes)
        self.average = bool(average)
        self.sparse_as_dense = sparse_as_dense
        self._state = {}  # graph key -> (counter, {variable ref key: accumulator})

    @staticmethod
    def _graph_key():
        return None if tf.executing_eagerly() else id(tf.compat.v1.get_default_graph())

    def _local_variable(self, initial, name):
        # LOCAL_VARIABLES: not broadcast by broadcast_global_variables, not in checkpoints;
        # initialized by local_variables_initializer() (MonitoredTrainingSession runs it).
        return tf.compat.v1.Variable(initial, trainable=False, name=name,
                                     collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])

    def _counter_and_slots(self):
        key = self._graph_key()
        if key not in self._state:
            with tf.init_scope():  # outside any control flow and control dependencies
                counter = self._local_variable(tf.constant(0, tf.int32), "hvd_aggregation_counter")
            self._state[key] = (counter, {})
        return self._state[key]

    def counter(self):
        return self._counter_and_slots()[0]

    def _slot_for(self, slots, var, grad):
        k = var.ref() if hasattr(var, "ref") else id(var)
        if k not in slots:
            with tf.init_scope():  # outside any control flow and control dependencies
                slots[k] = self._local_variable(tf.zeros(grad.shape, grad.dtype),
                                                "hvd_aggregated_grad_" + var.name.split(":")[0])
        return slots[k]

    def aggregate(self, grads, variables, reduce):
        """The gradients to hand to apply_gradients: on the k-th pass the reduced sums of the
        last k passes, otherwise the local sums so far (apply_gradients will not apply them)."""
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            return list(grads)
        counter, slots = self._counter_and_slots()
        accs, adds = [], []
        for i in present:
            g = grads[i]
            if isinstance(g, tf.IndexedSlices):
                if not self.sparse_as_dense:
                    raise ValueError(
                        "horovod_cpp: the gradient of {} is sparse (IndexedSlices); "
                        "backward_passes_per_step > 1 accumulates dense gradients only: pass "
                        "sparse_as_dense=True".format(variables[i].name))
                g = tf.convert_to_tensor(g)
            acc = self._slot_for(slots, variables[i], g)
            accs.append(acc)
            adds.append(acc.assign_add(g))
        with tf.control_dependencies(adds):
            count = counter.assign_add(1)

        def reduce_sums():
            sums = [a.read_value() for a in accs]
            if self.average:
                sums = [t / tf.cast(self.passes, t.dtype) for t in sums]
            full = [None] * len(grads)
            for i, t in zip(present, sums):
                full[i] = t
            reduced = reduce(full, variables)
            out = [tf.identity(reduced[i]) for i in present]
            with tf.control_dependencies(out):
                resets = [a.assign(tf.zeros_like(a)) for a in accs] + [counter.assign(0)]
            with tf.control_dependencies(resets):
                return [tf.identity(t) for t in out]

        def keep_sums():
            return [a.read_value() for a in accs]

        with tf.control_dependencies([count]):
            chosen = tf.cond(count >= self.passes, reduce_sums, keep_sums)
        if not isinstance(chosen, (list, tuple)):
            chosen = [chosen]
        out = list(grads)
        for i, t in zip(present, chosen):
            out[i] = t
        return out

    def apply(self, apply_fn, grads_and_vars, global_step):
        """apply_fn() on the k-th pass (the counter is back at 0), otherwise only
        global_step += 1. Returns a boolean tensor: whether this pass applied."""
        counter = self.counter()
        deps = [g for g, _ in grads_and_vars if g is not None]

        def skip():
            if global_step is None:
                return tf.constant(False)
            with tf.control_dependencies([global_step.assign_add(1)]):
                return tf.identity(tf.constant(False))

        def run():
            with tf.control_dependencies([apply_fn()]):
                return tf.identity(tf.constant(True))

        with tf.control_dependencies(deps):
            return tf.cond(tf.equal(counter.read_value(), 0), run, skip)


class _DistributedOptimizerV1(tf.compat.v1.train.Optimizer):
    """Averages gradients across ranks in compute_gradients(); everything else is the wrapped
    optimizer's. With backward_passes_per_step > 1 (an accumulator given), gradients are
    accumulated locally and reduced and applied every k-th pass."""

    def __init__(self, optimizer, name, use_locking, reducer, scale_local_gradients=True,
                 accumulator=None):
        if name is None:
            name = "Distributed{}".format(type(optimizer).__name__)
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._local = LocalVariables(reducer, scale_local_gradients)
        self._hvd_passes = accumulator

    def register_local_var(self, var):
        """Gradients of `var` stay local (not reduced); divided by the set's size when
        scale_local_gradients is True, as in Horovod."""
        self._local.register(var)

    def compute_gradients(self, *args, **kwargs):
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        if not gradients:
            return gradients
        grads, variables = zip(*gradients)
        if self._hvd_passes is not None:
            reduced = self._hvd_passes.aggregate(list(grads), list(variables),
                                                  self._local.reduce)
        else:
            reduced = self._local.reduce(list(grads), list(variables))
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        if self._hvd_passes is None:
            return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                   name=name)
        grads_and_vars = list(grads_and_vars)
        return self._hvd_passes.apply(
            lambda: self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                    name=name),
            grads_and_vars, global_step)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizerV1(optimizer, name=None, use_locking=False,
                           compression=Compression.none, sparse_as_dense=False,
                           backward_passes_per_step=1, op=Average,
                           gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                           num_groups=0, groups=None, process_set=global_process_set,
                           scale_local_gradients=True):
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    reducer = GradientReducer(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                              gradient_predivide_factor=gradient_predivide_factor,
                              num_groups=num_groups, groups=groups, process_set=process_set)
    accumulator = None
    if backward_passes_per_step > 1:
        accumulator = _PassAccumulator(backward_passes_per_step, average_aggregated_gradients,
                                       sparse_as_dense)
    return _DistributedOptimizerV1(optimizer, name, use_locking, reducer, scale_local_gradients,
                                   accumulator)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Broadcasts every global variable from root_rank once the session is created, so that
    every rank starts from the same weights (or the same restored checkpoint)."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        if not self.bcast_op or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
