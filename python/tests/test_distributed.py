"""Data-parallel training from Python: two MPI ranks of batch B through Trainer and
DataParallel end with the weights one process of batch 2B gets (python/tests/mpi_train.py
runs each side), and the bindings' errors."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tessera as ts

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "mpi_train.py")


def run(args, ranks=None, tmp_path=None):
    env = dict(os.environ)
    # The package the suite tests (conftest put it first on sys.path), for the children too.
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(ts.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    command = [sys.executable, SCRIPT] + [str(a) for a in args]
    if ranks:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
                   OMPI_MCA_rmaps_base_oversubscribe="1")
        command = [shutil.which("mpirun"), "--oversubscribe", "-np", str(ranks)] + command
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.skipif(not ts.mpiBuilt() or shutil.which("mpirun") is None, reason="no MPI in this build")
def test_two_ranks_of_batch_b_match_one_process_of_batch_2b(tmp_path):
    out = str(tmp_path / "w")
    printed = run([out + "-ranked", 16, 12], ranks=2)
    assert "rank 0 of 2: MPI" in printed
    run([out + "-single", 32, 12])
    run([out + "-start", 32, 0])
    r0, r1 = np.load(out + "-ranked.rank0.npz"), np.load(out + "-ranked.rank1.npz")
    single, start = np.load(out + "-single.rank0.npz"), np.load(out + "-start.rank0.npz")
    assert sorted(r0.files) == sorted(single.files) and len(r0.files) > 0
    moved = 0.0
    for name in r0.files:
        np.testing.assert_array_equal(r0[name], r1[name], err_msg=name)  # every rank the same update
        # Same samples, same order, gradients averaged: equal up to float32 summation order
        # (measured: 6e-7 at most, on a Zen 5).
        np.testing.assert_allclose(r0[name], single[name], rtol=1e-4, atol=1e-5, err_msg=name)
        moved = max(moved, float(np.abs(single[name] - start[name]).max()))
    assert moved > 1e-2  # training moved the weights far beyond that tolerance


def test_data_parallel_errors_name_what_is_wrong():
    net = ts.loadZooModel("lenet")
    opt = ts.SGD()
    opt.setupOn(net)  # not in global state

    class NotACommunicator:
        pass
    with pytest.raises(TypeError):
        ts.DataParallel(net, opt, NotACommunicator())
    if ts.ncclBuilt():
        with pytest.raises(ts.BackendError, match="cpu"):
            ts.ncclWorld("cpu")
    else:
        with pytest.raises(ts.BackendError, match="CUDA"):
            ts.ncclWorld("cuda:0")
    loader = ts.Loader(ts.tensorDataset(np.zeros((10, 1, 2, 2), np.float32), np.zeros(10, np.int32)), batchsize=2,
                       shuffle=False, rank=1, ranks=2)
    assert [x.shape[0] for x, _ in loader.epoch(0)] == [2, 2, 1]  # rank 1: its half of each global batch of 4
