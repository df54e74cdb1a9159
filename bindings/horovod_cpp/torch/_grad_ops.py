"""The torch tensor ops of the gradient engine (.._gradients): asynchronous in-place
allreduces whose handles are waited for in step() / synchronize()."""

from .mpi_ops import (_allreduce, allreduce_async_, grouped_allreduce_async_,
                      sparse_allreduce_async, synchronize, synchronize_all)


class TorchGradOps:
    """Gradients are torch tensors; sparse ones are COO tensors (nn.Embedding's rows)."""

    allreduce = staticmethod(allreduce_async_)
    grouped_allreduce = staticmethod(grouped_allreduce_async_)
    sparse_allreduce = staticmethod(sparse_allreduce_async)
    # Every single allreduce waited for at once, the GIL released once.
    wait = staticmethod(synchronize_all)
    wait_group = staticmethod(synchronize)

    @staticmethod
    def allreduce_plain(t, name, op, prescale, postscale, process_set):
        # The engine's common case: the native entry directly (allreduce_async_ without its
        # keyword handling; no `average`).
        return _allreduce(t, None, name, op, prescale, postscale, process_set, None, True)

    @staticmethod
    def wait_sparse(handle):
        return handle()

    @staticmethod
    def is_sparse(g):
        return g.is_sparse

    @staticmethod
    def densify(g):
        # Reduced dense and handed back sparse in the same layout, as Horovod does.
        return g.to_dense(), g.sparse_dim()

    @staticmethod
    def restore(dense, sparse_dim):
        return dense.to_sparse(sparse_dim)
