"""The elastic API's state objects and run loop under mpirun (MPI controller, 2-3 ranks; the
membership does not change here, re-initialisation does): save / restore / sync of
ObjectState and TorchState, ElasticSampler's sharding and skipping, and the run loop with
exceptions injected by the training function. The loop against a real driver (a killed
worker, hosts added) is test/runner/test_elastic_api.py."""

import numpy as np
import pytest
import torch

import horovod_cpp as hvd
import horovod_cpp.torch as thvd
from horovod_cpp import elastic
from horovod_cpp.torch.elastic import ElasticSampler, TorchState


def gathered(obj):
    return hvd.allgather_object(obj)


# ---- ObjectState ------------------------------------------------------------------------
def test_object_state_sync_gives_every_rank_rank0s_values(rank, size):
    state = elastic.ObjectState(epoch=rank + 3, history=[rank, 10 * rank], name=f"r{rank}")
    state.sync()
    for r, (epoch, history, name) in enumerate(gathered((state.epoch, state.history,
                                                         state.name))):
        assert (epoch, history, name) == (3, [0, 0], "r0"), r
    # sync also saved: a restore returns to the synced values, not this rank's initial ones.
    state.epoch, state.history = 99, [7]
    state.restore()
    assert (state.epoch, state.history, state.name) == (3, [0, 0], "r0")


def test_object_state_restore_undoes_in_place_changes(rank):
    state = elastic.ObjectState(history=[1, 2], counts={"a": rank})
    state.history.append(3)
    state.save()
    state.history.append(4)
    state.counts["a"] = -1
    state.restore()
    assert state.history == [1, 2, 3] and state.counts == {"a": rank}
    state.history.append(5)  # the saved copy is not the live object
    state.restore()
    assert state.history == [1, 2, 3]


def test_commit_outside_an_elastic_job_saves_and_raises_nothing(rank, size):
    state = elastic.ObjectState(step=0)
    for step in range(1, 4):
        state.step = step
        state.commit()  # collective: hosts_updated() is False outside elastic mode
    state.step = 100
    state.restore()
    assert state.step == 3
    assert hvd._C.elastic_generation() == 0


def test_object_state_with_horovods_bcast_object_signature(rank):
    """ObjectState(bcast_object, get_rank, **kwargs), as Horovod's: bcast_object(obj)."""
    calls = []

    def bcast(obj):
        calls.append(obj)
        return hvd.broadcast_object(obj, root_rank=0)

    state = elastic.ObjectState(bcast, hvd.rank, lr=0.1 * (rank + 1))
    state.sync()
    assert state.lr == 0.1 and calls == [{"lr": 0.1 * (rank + 1)}]


def test_reset_callbacks_run_in_order_after_reset():
    seen = []
    state = elastic.ObjectState()
    state.register_reset_callbacks([lambda: seen.append("a")])
    state.register_reset_callbacks(lambda: seen.append("b"))
    with pytest.raises(TypeError):
        state.register_reset_callbacks([1])
    state.on_reset()
    assert seen == ["a", "b"]


# ---- TorchState --------------------------------------------------------------------------
def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3),
                               torch.nn.Linear(3, 2))


def train_step(model, optimizer, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 4, generator=g)
    optimizer.zero_grad()
    model(x).pow(2).sum().backward()
    optimizer.step()


def snapshot(model, optimizer):
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    opt = {pid: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
           for pid, s in optimizer.state_dict()["state"].items()}
    return params, opt


def assert_same(a, b):
    pa, oa = a
    pb, ob = b
    assert pa.keys() == pb.keys()
    for k in pa:
        assert torch.equal(pa[k], pb[k]), k
    assert oa.keys() == ob.keys()
    for pid in oa:
        assert oa[pid].keys() == ob[pid].keys()
        for k in oa[pid]:
            va, vb = oa[pid][k], ob[pid][k]
            assert torch.equal(va, vb) if torch.is_tensor(va) else va == vb, (pid, k)


def test_torch_state_sync_then_save_restore(rank, size):
    model = make_model(seed=100 + rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1), momentum=0.9)
    train_step(model, optimizer, seed=rank)  # rank-specific momentum buffers and BN stats
    state = TorchState(model, optimizer, epoch=rank, batch=2 * rank)
    state.sync()

    # Every rank now holds rank 0's model, optimizer state and options, and attributes.
    model0 = make_model(seed=100)
    opt0 = torch.optim.SGD(model0.parameters(), lr=0.1, momentum=0.9)
    train_step(model0, opt0, seed=0)
    assert_same(snapshot(model, optimizer), snapshot(model0, opt0))
    assert optimizer.param_groups[0]["lr"] == 0.1
    assert (state.epoch, state.batch) == (0, 0)

    # commit point, then diverge, then restore.
    train_step(model, optimizer, seed=50)
    state.batch = 1
    state.save()
    saved = snapshot(model, optimizer)
    train_step(model, optimizer, seed=51)
    optimizer.param_groups[0]["lr"] = 5.0
    state.batch = 2
    state.restore()
    assert_same(snapshot(model, optimizer), saved)
    assert optimizer.param_groups[0]["lr"] == 0.1 and state.batch == 1
    # A second restore of the same commit gives the same values again.
    train_step(model, optimizer, seed=52)
    state.restore()
    assert_same(snapshot(model, optimizer), saved)


def test_torch_state_keeps_a_scheduler_of_a_distributed_optimizer(rank, size):
    # Horovod's elastic examples pass scheduler= beside a DistributedOptimizer: the scheduler
    # holds that optimizer (a class made at run time, which pickle cannot name), so it must be
    # kept by its state_dict(), not pickled as a plain attribute.
    model = make_model(seed=3)
    optimizer = thvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                         named_parameters=model.named_parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    for _ in range(rank):  # rank r is r epochs into its schedule
        scheduler.step()
    state = TorchState(model, optimizer, scheduler=scheduler, epoch=0)
    state.sync()
    assert scheduler.last_epoch == 0 and scheduler.get_last_lr() == [0.5]
    assert optimizer.param_groups[0]["lr"] == 0.5
    for _ in range(3):
        scheduler.step()
    state.commit()
    assert scheduler.last_epoch == 3 and scheduler.get_last_lr() == [0.25]
    for _ in range(2):
        scheduler.step()
    scheduler.base_lrs = [9.0]  # a reset callback's kind of change, undone by restore
    state.restore()
    assert scheduler.last_epoch == 3 and scheduler.get_last_lr() == [0.25]
    assert scheduler.base_lrs == [0.5]
    scheduler.step()
    state.restore()  # the saved copy was not changed by the first restore's use
    assert scheduler.last_epoch == 3 and scheduler.base_lrs == [0.5]


def test_torch_state_restore_before_any_step_empties_the_optimizer(rank):
    model = make_model(seed=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    state = TorchState(model=model, optimizer=optimizer)
    before = snapshot(model, optimizer)
    train_step(model, optimizer, seed=rank)
    assert optimizer.state_dict()["state"]
    state.restore()
    assert_same(snapshot(model, optimizer), before)
    assert not optimizer.state_dict()["state"]


def test_torch_state_follows_a_replaced_model(rank):
    state = TorchState(make_model(seed=1), None, step=0)
    assert state.optimizer is None
    replacement = make_model(seed=2)
    state.model = replacement
    state.save()
    with torch.no_grad():
        for p in replacement.parameters():
            p.add_(1.0)
    state.restore()
    fresh = make_model(seed=2).state_dict()
    for k, v in replacement.state_dict().items():
        assert torch.equal(v, fresh[k]), k
    with pytest.raises(TypeError):
        state.model = "not a module"


# ---- ElasticSampler ---------------------------------------------------------------------
def all_shards(sampler):
    return gathered(list(sampler))


@pytest.mark.parametrize("n, shuffle", [(23, False), (23, True), (2, True)])
def test_sampler_shards_cover_the_dataset_evenly(rank, size, n, shuffle):
    sampler = ElasticSampler(list(range(n)), shuffle=shuffle, seed=5)
    shards = all_shards(sampler)
    per_rank = -(-n // size)
    assert len(sampler) == per_rank and all(len(s) == per_rank for s in shards)
    flat = [i for s in shards for i in s]
    assert set(flat) == set(range(n))  # every sample; padding repeats some
    assert len(flat) - len(set(flat)) == per_rank * size - n
    if not shuffle:
        assert shards[rank] == [i % n for i in range(rank, per_rank * size, size)]
    sampler.set_epoch(1)
    if shuffle and n > 2:
        assert all_shards(sampler) != shards  # another epoch, another order


def test_sampler_skips_recorded_batches_after_a_reset(rank, size):
    n, batch = 40, 3
    sampler = ElasticSampler(list(range(n)), shuffle=True, seed=1)
    state = TorchState(sampler=sampler, epoch=0)
    shards = all_shards(sampler)
    sampler.record_batch(0, batch)
    sampler.record_batch(1, batch)
    expected = {i for s in shards for i in s[:2 * batch]}
    assert sampler.processed_indices == expected  # every rank's two batches, on every rank
    assert sampler.get_indices(1, batch) == shards[rank][batch:2 * batch]
    state.save()
    sampler.record_batch(2, batch)  # not committed: trained again after the restore
    state.restore()
    assert sampler.processed_indices == expected
    rest = [i for s in all_shards(sampler) for i in s]
    assert set(rest) == set(range(n)) - expected
    assert len(sampler) == -(-(n - len(expected)) // size)
    sampler.set_epoch(1)
    assert sampler.processed_indices == set() and len(sampler) == -(-n // size)


def test_sampler_sync_takes_the_union_of_every_ranks_record(rank, size):
    sampler = ElasticSampler(list(range(30)), shuffle=False)
    sampler.set_epoch(rank + 4)  # rank 0's epoch wins
    sampler.record_indices([rank, 10 + rank])
    state = TorchState(sampler=sampler)
    state.sync()
    union = {i for r in range(size) for i in (r, 10 + r)}
    assert sampler.epoch == 4 and sampler.processed_indices == union
    assert set(i for s in all_shards(sampler) for i in s) == set(range(30)) - union
    state.restore()  # sync saved the union
    assert sampler.processed_indices == union


# ---- the run loop ------------------------------------------------------------------------
class CountingReset:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        elastic.reset()  # the real one: shutdown() + init()


class Recorder(elastic.ObjectState):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.log = []

    def sync(self):
        self.log.append("sync")
        super().sync()

    def restore(self):
        self.log.append("restore")
        super().restore()

    def reset(self):
        self.log.append("reset")


def test_run_restores_and_resets_after_an_internal_error(rank, size):
    reset = CountingReset()
    state = Recorder(step=0)
    calls = []

    def train(state, limit):
        calls.append(state.step)
        while state.step < limit:
            state.step += 1
            if state.step == 3:
                state.save()
            if state.step == 5 and len(calls) == 1:
                raise hvd.HorovodInternalError("injected: a peer was lost")
        # the collectives work after the reset
        total = hvd.allreduce(np.array([float(state.step)]), op=hvd.Sum)
        return float(total[0])

    got = elastic.run_fn(train, reset)(state, 7)
    assert got == 7.0 * size
    assert reset.calls == 1 and hvd.is_initialized() and hvd.size() == size
    assert calls == [0, 3]  # the second call started from the commit
    assert state.log == ["sync", "restore", "reset", "sync"]


def test_run_keeps_the_state_after_hosts_updated(rank):
    reset = CountingReset()
    state = Recorder(step=0)

    def train(state):
        state.step += 1
        if state.step == 1:
            raise elastic.HostsUpdatedInterrupt()
        return state.step

    assert elastic.run_fn(train, reset)(state) == 2
    assert reset.calls == 1 and state.log == ["sync", "reset", "sync"]

    state.log.clear()
    skipped = Recorder(step=0)

    def train_skip(state):
        state.step += 1
        if state.step == 1:
            raise elastic.HostsUpdatedInterrupt(skip_sync=True)
        return state.step

    assert elastic.run_fn(train_skip, reset)(skipped) == 2
    assert reset.calls == 2 and skipped.log == ["sync", "reset"]


@pytest.mark.parametrize("error", [hvd.MismatchError("injected mismatch"),
                                   ValueError("injected bug")], ids=["mismatch", "value_error"])
def test_run_lets_other_errors_out(error):
    reset = CountingReset()
    state = Recorder(step=0)

    def train(state):
        raise error

    with pytest.raises(type(error), match="injected"):
        elastic.run_fn(train, reset)(state)
    assert reset.calls == 0 and state.log == ["sync"]


def test_frontends_export_one_exception_and_the_loop():
    import horovod_cpp.torch.elastic as te
    assert te.HostsUpdatedInterrupt is elastic.HostsUpdatedInterrupt is hvd.HostsUpdatedInterrupt
    assert thvd.HostsUpdatedInterrupt is elastic.HostsUpdatedInterrupt
    assert te.HorovodInternalError is hvd.HorovodInternalError is thvd.HorovodInternalError
    assert thvd.elastic.run is elastic.run and thvd.elastic.TorchState is TorchState
