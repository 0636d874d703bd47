#!/usr/bin/python3
"""Writes the PyTorch reference cases of tests/modules/RnnTest.cpp (RNN.MatchesPyTorch):
for LSTM and GRU, one and two directions, 2 layers, a random nn.LSTM / nn.GRU and input,
its output and the gradients of the input and every weight for a random output gradient.

  tests/data/rnn/make_pytorch_cases.py [OUTDIR]     (default: this script's directory)

One directory per case (lstm_uni, lstm_bi, gru_uni, gru_bi) of .npy files: x [T, N, I],
dy and y [T, N, D H], dx, and per parameter its value (`weight_ih_l0.npy`, ...) and its
gradient (`grad_weight_ih_l0.npy`, ...), in PyTorch's names, which are Tessera's.

Two more cases (lstm_packed, gru_packed: 2 layers, two directions) run a padded batch as
a packed sequence (lengths.npy, int32) from initial states h0 (and c0) [layers 2, N, H]:
they add the final states hN (cN), their gradients dhN (dcN) and the gradients dh0 (dc0).
The steps past each sequence's end hold random numbers in x (they must not matter) and
zeros in y.
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
    lengths = torch.tensor([5, 2, 4])
    for mode, cls in (("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU)):
        d = os.path.join(out, f"{mode}_packed")
        os.makedirs(d, exist_ok=True)
        net = cls(I, H, num_layers=LAYERS, bidirectional=True).double()
        x = torch.randn(T, N, I, dtype=torch.float64, requires_grad=True)
        states = [torch.randn(LAYERS * 2, N, H, dtype=torch.float64, requires_grad=True)
                  for _ in range(2 if mode == "lstm" else 1)]
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        out_packed, final = net(packed, tuple(states) if mode == "lstm" else states[0])
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(out_packed, total_length=T)
        final = list(final) if mode == "lstm" else [final]
        dy = torch.randn_like(y)
        dfinal = [torch.randn_like(f) for f in final]
        loss = (y * dy).sum() + sum((f * g).sum() for f, g in zip(final, dfinal))
        loss.backward()
        save = lambda name, t: np.save(os.path.join(d, name + ".npy"), t.detach().numpy().astype(np.float32))
        np.save(os.path.join(d, "lengths.npy"), lengths.numpy().astype(np.int32))
        for name, t in (("x", x), ("y", y), ("dy", dy), ("dx", x.grad)):
            save(name, t)
        for k, (s0, f, g) in enumerate(zip(states, final, dfinal)):
            c = "hc"[k]
            save(c + "0", s0)
            save("d" + c + "0", s0.grad)
            save(c + "N", f)
            save("d" + c + "N", g)
        for name, p in net.named_parameters():
            save(name, p)
            save("grad_" + name, p.grad)
        print("wrote", d)


if __name__ == "__main__":
    main()
