#!/usr/bin/python3
"""Writes the PyTorch reference case of tests/training/CtcTest.cpp (CTC.MatchesPyTorch):
random scores [T, N, V], padded labels [N, S] with their lengths (a repeat, an empty
target, a target that fills its input), input lengths, PyTorch's per-sample
F.ctc_loss (blank 0, float64) and the gradient of their mean with respect to the scores.

  tests/data/ctc/make_pytorch_case.py [OUTDIR]     (default: this script's directory)

Files: scores.npy, labels.npy, label_lengths.npy, input_lengths.npy (int32), losses.npy
[N] and grad.npy [T, N, V] (float32). Needs Debian's python3-torch.
"""
import os
import sys

import numpy as np
import torch

T, N, V, S = 12, 5, 6, 5


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(0)
    # rounded to float32 first: the case is exact for the float32 scores the suite reads
    scores = (2 * torch.randn(T, N, V)).double().requires_grad_()
    labels = torch.tensor([[1, 2, 2, 3, 5],   # a repeat: 6 steps at least
                           [4, 1, 0, 0, 0],
                           [0, 0, 0, 0, 0],   # empty: only blanks
                           [5, 4, 3, 2, 1],
                           [3, 3, 3, 0, 0]], dtype=torch.int64)
    label_lengths = torch.tensor([5, 2, 0, 5, 3])
    input_lengths = torch.tensor([12, 7, 4, 5, 9])  # sample 3: 5 labels in 5 steps
    logp = torch.nn.functional.log_softmax(scores, dim=2)
    losses = torch.nn.functional.ctc_loss(logp, labels, input_lengths, label_lengths, blank=0, reduction="none")
    losses.mean().backward()
    save = lambda name, a: np.save(os.path.join(out, name + ".npy"), a)
    save("scores", scores.detach().numpy().astype(np.float32))
    save("labels", labels.numpy().astype(np.int32))
    save("label_lengths", label_lengths.numpy().astype(np.int32))
    save("input_lengths", input_lengths.numpy().astype(np.int32))
    save("losses", losses.detach().numpy().astype(np.float32))
    save("grad", scores.grad.numpy().astype(np.float32))
    print("wrote", out, "losses", losses.detach().numpy())


if __name__ == "__main__":
    main()
