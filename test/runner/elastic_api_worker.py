"""A PyTorch worker of the elastic API test (test_elastic_api.py): a small model trained with
horovod_cpp.torch.elastic.run and a TorchState, on a membership the harness changes.

Each step averages the gradients of the ranks' own seeded batches (allreduce), so the
parameters after a run depend only on the sizes the steps ran at; simulate() replays such a
schedule in one process for the harness to compare with. Lines it prints (flushed):
    TRAIN worker=W step=S rank=R size=N     each time the run loop calls train() (after sync)
    COMMIT worker=W step=S rank=R size=N    after each commit
    RESET worker=W step=S rank=R size=N     after each reset (restored or kept step)
    DONE worker=W step=S rank=R size=N params=<hex of the float32 parameters>
"""

import argparse
import os
import signal
import sys
import time

import torch

import horovod_cpp.torch as hvd

STEPS = 60
COMMIT_EVERY = 4


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def local_gradients(model, step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 6, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.5
    model.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def simulate(seed, sizes):
    """The parameters after len(sizes) steps, step s averaging the gradients of ranks
    0..sizes[s]-1 (what the job computes, summed here in one process)."""
    model = make_model(seed)
    opt = make_optimizer(model)
    for step, n in enumerate(sizes):
        grads = [local_gradients(model, step, r) for r in range(n)]
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads) / n
        opt.step()
    return flat(model)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--worker", required=True)
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--die-at-step", type=int, default=-1,
                   help="SIGKILL this process when it is about to run this step (first "
                        "generation): a loss in the middle of a commit interval, every time")
    a = p.parse_args()
    hvd.init()
    model = make_model(a.seed)  # every worker its own: the first sync makes them equal
    state = hvd.elastic.TorchState(model, make_optimizer(model), step=0)

    def say(what, extra=""):
        print(f"{what} worker={a.worker} step={state.step} rank={hvd.rank()} "
              f"size={hvd.size()}{extra}", flush=True)

    state.register_reset_callbacks([lambda: say("RESET")])

    @hvd.elastic.run
    def train(state):
        say("TRAIN")
        while state.step < STEPS:
            if state.step == a.die_at_step:
                os.kill(os.getpid(), signal.SIGKILL)
            grads = local_gradients(state.model, state.step, hvd.rank())
            for i, (param, g) in enumerate(zip(state.model.parameters(), grads)):
                param.grad = hvd.allreduce(g, op=hvd.Average, name=f"grad.{i}")
            state.optimizer.step()
            state.step += 1
            if state.step % COMMIT_EVERY == 0:
                state.commit()
                say("COMMIT")
            time.sleep(a.step_seconds)

    train(state)
    say("DONE", " params=" + flat(state.model).numpy().tobytes().hex())
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
