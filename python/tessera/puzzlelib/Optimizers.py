"""PuzzleLib's `Optimizers`: its class names, argument names and defaults over Tessera's
optimizers (which do every update). Set one up on a module of this namespace:

    opt = MomentumSGD(learnRate=0.01)
    opt.setupOn(net, useGlobalState=True)
    opt.zeroGradParams(); net.backward(grad); opt.update()
"""

import tessera as ts


class Optimizer:
    def __init__(self, topt):
        self._o = topt
        self.module = None

    def setupOn(self, mod, useGlobalState=False):
        self.module = mod
        self._o.setupOn(mod.module, useGlobalState)

    def zeroGradParams(self):
        self._o.zeroGradParams()

    def update(self, useStreams=False, sync=True):
        self._o.update()

    @property
    def learnRate(self):
        return self._o.learnRate

    @learnRate.setter
    def learnRate(self, value):
        self._o.learnRate = value

    @property
    def t(self):
        """The updates made so far."""
        return self._o.steps

    @property
    def optimizer(self):
        """Tessera's optimizer underneath."""
        return self._o

    def __repr__(self):
        return f"tessera.puzzlelib.{type(self).__name__}(learnRate={self.learnRate})"


class SGD(Optimizer):
    def __init__(self, learnRate=1e-3, nodeinfo=None):
        super().__init__(ts.SGD(learnRate))


class MomentumSGD(Optimizer):
    def __init__(self, learnRate=1e-3, momRate=0.9, nodeinfo=None):
        super().__init__(ts.MomentumSGD(learnRate, momRate))


class NesterovSGD(Optimizer):
    def __init__(self, learnRate=1e-3, momRate=0.9, nodeinfo=None):
        super().__init__(ts.NesterovSGD(learnRate, momRate))


class Adam(Optimizer):
    def __init__(self, alpha=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8, nodeinfo=None):
        super().__init__(ts.Adam(alpha, beta1, beta2, epsilon))


class AdaGrad(Optimizer):
    def __init__(self, learnRate=1e-3, epsilon=1e-8, nodeinfo=None):
        super().__init__(ts.AdaGrad(learnRate, epsilon))


class AdaDelta(Optimizer):
    def __init__(self, rho=0.95, epsilon=1e-6, nodeinfo=None):
        super().__init__(ts.AdaDelta(rho, epsilon))


class RMSProp(Optimizer):
    def __init__(self, learnRate=1e-3, factor=0.9, epsilon=1e-5, nodeinfo=None):
        super().__init__(ts.RMSProp(learnRate, factor, epsilon))


class RMSPropGraves(Optimizer):
    def __init__(self, learnRate=1e-4, alpha=0.95, momRate=0.9, epsilon=1e-4, nodeinfo=None):
        super().__init__(ts.RMSPropGraves(learnRate, alpha, momRate, epsilon))


class SMORMS3(Optimizer):
    def __init__(self, learnRate=1e-3, epsilon=1e-16, nodeinfo=None):
        super().__init__(ts.SMORMS3(learnRate, epsilon))
