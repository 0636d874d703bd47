"""PuzzleLib's `Handlers`: Trainer, Validator and Calculator, batch loops over data held on
the device (`train`, `validate`, `calc`) or on the host in macro-batches (`...FromHost`)."""

import numpy as np

from . import Backend


def _size(data):
    while isinstance(data, list):
        data = data[0]
    return data.shape[0]


def _slice(data, i, n):
    if isinstance(data, list):
        return [_slice(d, i, n) for d in data]
    return data[i * n:(i + 1) * n]


class Handler:
    def __init__(self, mod, onBatchFinish=None, batchsize=128):
        self.module, self.onBatchFinish, self.batchsize = mod, onBatchFinish, batchsize
        self.currBatch = self.totalBatches = self.currMacroBatch = self.totalMacroBatches = 0

    def handleFromHost(self, data, state=None, macroBatchSize=10000, onMacroBatchFinish=None, random=True):
        self.totalMacroBatches = (_size(data) + macroBatchSize - 1) // macroBatchSize
        order = np.random.permutation(self.totalMacroBatches) if random else range(self.totalMacroBatches)
        for i, n in enumerate(order):
            self.currMacroBatch = i + 1
            self.handle(_slice(data, n, macroBatchSize), state, random=random)
            if onMacroBatchFinish:
                onMacroBatchFinish(self)

    def handle(self, data, state=None, random=True):
        self.totalBatches = (_size(data) + self.batchsize - 1) // self.batchsize
        order = np.random.permutation(self.totalBatches) if random else range(self.totalBatches)
        for i, n in enumerate(order):
            self.currBatch = i + 1
            self.handleBatch(_slice(data, n, self.batchsize), n, state)
            if self.onBatchFinish:
                self.onBatchFinish(self)

    def handleBatch(self, batch, idx, state):
        raise NotImplementedError()


def _host(x):
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)


class Trainer(Handler):
    def __init__(self, mod, cost, optimizer, onBatchFinish=None, batchsize=128):
        super().__init__(mod, onBatchFinish, batchsize)
        self.cost, self.optimizer = cost, optimizer

    def trainFromHost(self, data, target, macroBatchSize=10000, onMacroBatchFinish=None, random=True):
        self.cost.resetAccumulator()
        self.module.trainMode()
        self.handleFromHost([_host(data), _host(target)], None, macroBatchSize, onMacroBatchFinish, random)

    def train(self, data, target, random=True):
        self.cost.resetAccumulator()
        self.module.trainMode()
        self.handle([_host(data), _host(target)], None, random=random)

    def handleBatch(self, batch, idx, state):
        data, target = batch
        grad = self.cost(self.module(Backend.to_gpu(data)), Backend.to_gpu(target), queryError=False)
        self.optimizer.zeroGradParams()
        self.module.backward(grad, updGrad=False)
        self.optimizer.update()


class Validator(Handler):
    def __init__(self, mod, cost, onBatchFinish=None, batchsize=128):
        super().__init__(mod, onBatchFinish, batchsize)
        self.cost = cost
        self.error = 0.0

    def validateFromHost(self, data, target, macroBatchSize=10000, onMacroBatchFinish=None):
        self.error = 0.0
        self.module.evalMode()
        self.handleFromHost([_host(data), _host(target)], None, macroBatchSize, onMacroBatchFinish, random=False)
        self.error /= _size(data)
        return self.error

    def validate(self, data, target):
        self.error = 0.0
        self.module.evalMode()
        self.handle([_host(data), _host(target)], None, random=False)
        self.error /= _size(data)
        return self.error

    def handleBatch(self, batch, idx, state):
        data, target = batch
        self.error += self.cost.validate(self.module(Backend.to_gpu(data)), Backend.to_gpu(target)) * len(data)


class Calculator(Handler):
    def __init__(self, mod, onBatchFinish=None, batchsize=128):
        super().__init__(mod, onBatchFinish, batchsize)
        self._out = []

    def calcFromHost(self, data, macroBatchSize=10000, onMacroBatchFinish=None):
        self._out = []
        self.module.evalMode()
        self.handleFromHost(_host(data), None, macroBatchSize, onMacroBatchFinish, random=False)
        return np.concatenate(self._out)

    def calc(self, data):
        self._out = []
        self.module.evalMode()
        self.handle(_host(data), None, random=False)
        return Backend.to_gpu(np.concatenate(self._out))

    def handleBatch(self, batch, idx, state):
        self._out.append(self.module(Backend.to_gpu(batch)).get())
