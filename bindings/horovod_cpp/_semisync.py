"""The schedule of semi-synchronous training, shared by the Python frontends (framework-free).

What a semi-synchronous optimizer does at each step is decided here; the frontend's glue
(torch/semisync.py) does the tensor work. The semantics are those of the C++ training API
(docs/training.md, "Semi-synchronous training"):

* staleness s: every step submits this step's gradients and applies the averaged gradients of
  the step s steps earlier (none during the first s steps);
* local SGD with period k after n warmup steps: the first n steps are synchronous; afterwards
  each rank steps on its own gradients and the parameters are averaged after every k-th step.
"""

import collections

# The kinds of step (SemiSyncSchedule.next_step()).
STALE, WARMUP, LOCAL = "stale", "warmup", "local"


def _check_count(name, value):
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


class SemiSyncSchedule:
    """Step counting and decisions of one semi-synchronous optimizer (options checked here),
    with the line of delayed gradient reductions of the stale mode."""

    def __init__(self, staleness, local_sgd_period, local_sgd_warmup_steps):
        _check_count("staleness", staleness)
        _check_count("local_sgd_period", local_sgd_period)
        _check_count("local_sgd_warmup_steps", local_sgd_warmup_steps)
        if staleness > 0 and local_sgd_period > 0:
            raise ValueError(f"staleness ({staleness}) and local_sgd_period "
                             f"({local_sgd_period}) cannot both be set; choose one "
                             "semi-synchronous mode")
        self.staleness = staleness
        self.local_sgd_period = local_sgd_period
        self.local_sgd_warmup_steps = local_sgd_warmup_steps
        self.steps = 0
        self._submitted = 0
        self._pending = collections.deque()  # stale mode: submitted reductions, oldest first

    def next_step(self):
        """Counts a step and says what it does: (STALE, tag) submits the gradients under
        `tag` (then apply what due() returns), (WARMUP, "warmup") is a synchronous step,
        (LOCAL, average) a local step followed by a parameter average when `average`."""
        t = self.steps
        self.steps += 1
        if self.staleness > 0:
            # Names cycle through s + 1 tags: at most s + 1 reductions are in flight.
            tag = f"stale{self._submitted % (self.staleness + 1)}"
            self._submitted += 1
            return STALE, tag
        if t < self.local_sgd_warmup_steps:
            return WARMUP, "warmup"
        return LOCAL, (t + 1 - self.local_sgd_warmup_steps) % self.local_sgd_period == 0

    def submitted(self, entry):
        """Records a stale step's submitted reduction; returns those now due to be applied
        (oldest first): the ones more than `staleness` submissions old."""
        self._pending.append(entry)
        due = []
        while len(self._pending) > self.staleness:
            due.append(self._pending.popleft())
        return due

    def drain(self):
        """Every reduction still pending (oldest first); the tags start over."""
        due = list(self._pending)
        self._pending.clear()
        self._submitted = 0
        return due

    @property
    def pending(self):
        """Whether delayed reductions are in flight."""
        return bool(self._pending)
