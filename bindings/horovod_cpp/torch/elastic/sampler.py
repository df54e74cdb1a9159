"""ElasticSampler: a distributed sampler that shards over the current size and, after a reset
in the middle of an epoch, skips the samples already trained on."""

import math

import torch

from ..._basics import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Shards `dataset`'s indices over the ranks of the current membership, as Horovod's.

    Within an epoch every rank records the batches it finished (record_batch(batch_idx,
    batch_size) after each step, or record_indices()); once those records are committed with
    the state, a reset re-shards only the indices not yet processed this epoch over the new
    number of ranks. set_epoch(e) starts a new epoch (nothing processed) with its own shuffle.

    The order of an epoch depends only on (seed, epoch, the processed set), never on the rank,
    so every rank knows every rank's shard: record_batch records the batch of every rank, so a
    batch committed is skipped after a reset even if the worker that trained on it died.
    Shards are padded (wrapping around) to equal length, as DistributedSampler does."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self.processed_indices = set()
        self.reset()

    def reset(self):
        """Re-shards the unprocessed indices over the current size (after init())."""
        self.num_replicas = size()
        self.rank = rank()
        remaining = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        if self.shuffle and remaining:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            remaining = [remaining[j] for j in torch.randperm(len(remaining), generator=g)]
        self.remaining_indices = remaining
        self.num_samples = int(math.ceil(len(remaining) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        order = list(remaining)
        while len(order) < self.total_size:  # pad by wrapping around (several times if tiny)
            order += remaining[:self.total_size - len(order)]
        self._order = order
        self.indices = order[self.rank:self.total_size:self.num_replicas]

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: nothing processed yet, the order shuffled by seed + epoch."""
        self.epoch = int(epoch)
        self.processed_indices = set()
        self.reset()

    def get_indices(self, batch_idx, batch_size):
        """This rank's indices in its batch `batch_idx` (batches of `batch_size`) of the current
        iteration."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def record_batch(self, batch_idx, batch_size):
        """Marks batch `batch_idx` of the current iteration as processed, on every rank (all
        ranks step together, so each rank's batch `batch_idx` is done)."""
        start = batch_idx * batch_size
        end = min(start + batch_size, self.num_samples)
        for r in range(self.num_replicas):
            shard = self._order[r:self.total_size:self.num_replicas]
            self.processed_indices.update(shard[start:end])

    def record_indices(self, indices):
        """Marks `indices` (dataset indices) as processed."""
        self.processed_indices.update(int(i) for i in indices)

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state_dict):
        """Takes an epoch and a processed set (from state_dict()), then re-shards."""
        self.epoch = int(state_dict["epoch"])
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
