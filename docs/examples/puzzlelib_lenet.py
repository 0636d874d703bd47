"""LeNet on Fashion-MNIST written the PuzzleLib way, run through tessera.puzzlelib.

Only the imports differ from a PuzzleLib script (PuzzleLib.X becomes tessera.puzzlelib.X,
and the images come from Tessera's loader). The suite runs it:

    /usr/bin/python3 docs/examples/puzzlelib_lenet.py --epochs 8
"""

import argparse
import sys

import numpy as np

import tessera
from tessera.puzzlelib.Containers import Sequential
from tessera.puzzlelib.Cost import CrossEntropy
from tessera.puzzlelib.Handlers import Trainer, Validator
from tessera.puzzlelib.Modules import Activation, BatchNorm2D, Conv2D, Dropout, Flatten, Linear, MaxPool2D, relu
from tessera.puzzlelib.Optimizers import MomentumSGD


def buildNet():
    seq = Sequential(name="lenet")

    seq.append(Conv2D(1, 16, 5, initscheme="he"))
    seq.append(BatchNorm2D(16))
    seq.append(MaxPool2D())
    seq.append(Activation(relu))

    seq.append(Conv2D(16, 32, 5, initscheme="he"))
    seq.append(BatchNorm2D(32))
    seq.append(MaxPool2D())
    seq.append(Activation(relu))

    seq.append(Flatten())
    seq.append(Linear(32 * 4 * 4, 256, initscheme="he"))
    seq.append(Activation(relu))
    seq.append(Dropout(p=0.3))
    seq.append(Linear(256, 10))
    return seq


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    np.random.seed(args.seed)
    tessera.manualSeed(args.seed)
    (images, labels), (timages, tlabels) = tessera.loadMnist(split="train"), tessera.loadMnist(split="t10k")
    data, target = images.numpy(), labels.numpy().astype(np.int32)
    tdata, ttarget = timages.numpy(), tlabels.numpy().astype(np.int32)

    net = buildNet()
    cost = CrossEntropy()
    optimizer = MomentumSGD(learnRate=0.02, momRate=0.9)
    optimizer.setupOn(net, useGlobalState=True)

    trainer = Trainer(net, cost, optimizer, batchsize=64)
    validator = Validator(net, cost, batchsize=1000)

    accuracy = 0.0
    for epoch in range(args.epochs):
        trainer.trainFromHost(data, target, macroBatchSize=60000)
        accuracy = 1.0 - validator.validateFromHost(tdata, ttarget, macroBatchSize=10000)
        optimizer.learnRate *= 0.75
        print(f"Epoch {epoch + 1}: train error {cost.getMeanError():.4f}, test accuracy {100 * accuracy:.2f}%",
              flush=True)
    return accuracy


if __name__ == "__main__":
    sys.exit(0 if main() >= 0.9 else 1)
