"""GPU misconfigurations that used to hang a job (issue 12): each must end with an error on
every rank, naming the rank and the reason, and the next collective must work.

    mpirun -np 2 python test/gpu/no_hang_cases.py CASE

CASE:
  default-device   every rank puts its tensor on cuda:0 of a host with fewer GPUs than ranks,
                   with the default device choice (local rank) and without
                   NCCL_MULTI_RANK_GPU_ENABLE: the ranks whose local rank has no GPU cannot
                   take part; the collective fails on all of them.
  refused-sharing  every rank uses cuda:0 (HOROVOD_CPP_CUDA_DEVICE=0 given on every rank) but
                   the NCCL loaded is older than 2.30 (or refuses sharing): the set's ranks
                   agree on the refusal before any communicator is made.

Each rank prints "rank R: error: ..." and exits 0 when it got the error and the CPU allreduce
after it worked; 1 otherwise. Run it under `timeout`: a hang is the failure it guards against.
"""

import sys

import torch

import horovod_cpp.torch as hvd


def main():
    case = sys.argv[1]
    hvd.init()
    r = hvd.rank()
    x = torch.ones(4, device="cuda:0")
    try:
        hvd.allreduce(x, op=hvd.Sum, name=f"nohang.{case}")
        print(f"rank {r}: no error (the case '{case}' did not apply here?)", flush=True)
        ok = False
    except Exception as e:  # horovod_cpp's errors (ValueError / RuntimeError subclasses)
        print(f"rank {r}: error: {e}", flush=True)
        ok = True
    # The program goes on: the next collective works.
    s = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, name=f"nohang.{case}.after").item()
    ok = ok and s == hvd.size()
    print(f"rank {r}: next collective {'works' if s == hvd.size() else 'FAILED'}", flush=True)
    hvd.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
