#!/usr/bin/python3
"""Writes the PyTorch reference cases of tests/modules/RnnTest.cpp (RNN.MatchesPyTorch):
for LSTM and GRU, one and two directions, 2 layers, a random nn.LSTM / nn.GRU and input,
its output and the gradients of the input and every weight for a random output gradient.

  tests/data/rnn/make_pytorch_cases.py [OUTDIR]     (default: this script's directory)

One directory per case (lstm_uni, lstm_bi, gru_uni, gru_bi) of .npy files: x [T, N, I],
dy and y [T, N, D H], dx, and per parameter its value (`weight_ih_l0.npy`, ...) and its
gradient (`grad_weight_ih_l0.npy`, ...), in PyTorch's names, which are Tessera's.
Needs Debian's python3-torch. The files are committed; rerun after changing a case.
"""
import os
import sys

import numpy as np
import torch

T, N, I, H, LAYERS = 5, 3, 4, 6, 2


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(0)
    for mode, cls in (("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU)):
        for bi in (False, True):
            d = os.path.join(out, f"{mode}_{'bi' if bi else 'uni'}")
            os.makedirs(d, exist_ok=True)
            net = cls(I, H, num_layers=LAYERS, bidirectional=bi).double()
            x = torch.randn(T, N, I, dtype=torch.float64, requires_grad=True)
            y, _ = net(x)
            dy = torch.randn_like(y)
            y.backward(dy)
            save = lambda name, t: np.save(os.path.join(d, name + ".npy"), t.detach().numpy().astype(np.float32))
            save("x", x)
            save("y", y)
            save("dy", dy)
            save("dx", x.grad)
            for name, p in net.named_parameters():
                save(name, p)
                save("grad_" + name, p.grad)
            print("wrote", d)


if __name__ == "__main__":
    main()
