"""Run by test_distributed.py, as each rank of `mpirun -np N` or alone: trains LeNet for
a few steps through Trainer, over a DataParallel on MPI_COMM_WORLD when run by mpirun, and
writes the trained weights to OUT.rank<R>.npz.

Usage: mpi_train.py OUT BATCH_PER_RANK STEPS
"""

import sys

import numpy as np

import tessera as ts


def data(n):
    """Random 28x28 images with labels that depend on them (a learnable task)."""
    rng = np.random.RandomState(17)
    images = rng.rand(n, 1, 28, 28).astype(np.float32)
    labels = np.where(images[:, 0, 0, 0] > 0.5, 1, np.where(images[:, 0, 0, 1] > 0.5, 2, 0)).astype(np.int32)
    return ts.tensorDataset(images, labels)


def main(out, batch, steps):
    comm = ts.mpiWorld() if ts.launchedByMpi() else None
    rank, ranks = (comm.rank, comm.size) if comm else (0, 1)
    ts.manualSeed(3 + 100 * rank)  # different starting points: DataParallel copies rank 0's
    net = ts.loadZooModel("lenet")
    opt = ts.MomentumSGD(learnRate=0.05)
    opt.setupOn(net, useGlobalState=True)
    trainer = ts.Trainer(net, ts.CrossEntropy(), opt, progress=False)
    parallel = None
    if comm:
        parallel = ts.DataParallel(net, opt, comm, bucketBytes=1 << 20)
        assert (parallel.rank, parallel.ranks) == (rank, ranks) and len(parallel.buckets) > 1
        trainer.setDataParallel(parallel)
    loader = ts.Loader(data(640), batchsize=batch, seed=5, workers=1, rank=rank, ranks=ranks)
    done = [0]

    def batch_done(info):
        done[0] += 1
        if done[0] == steps:
            trainer.requestStop()
    trainer.onBatchFinish = batch_done
    while done[0] < steps:
        trainer.clearStop()
        trainer.train(loader)
    weights = {name: var.data.numpy(copy=True) for name, var in net.namedParams().items()}
    np.savez(f"{out}.rank{rank}.npz", **weights)
    if comm:
        assert comm.allGather(rank) == list(range(ranks))
        print(f"rank {rank} of {ranks}: {comm.describe()}, {len(parallel.buckets)} buckets")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
