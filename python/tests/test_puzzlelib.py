"""tessera.puzzlelib against PuzzleLib's documented behaviour: NumPy references written from
PuzzleLib's formulas (its gradients are -dL/dx, its pointwise costs average every element,
its pools stride 2, its biases are (1, C, 1, 1)), and a LeNet script in PuzzleLib's style
that trains to 90% on Fashion-MNIST."""

import os
import subprocess
import sys

import numpy as np
import pytest

import tessera as ts
from tessera.puzzlelib import Containers, Cost, Handlers, Modules, Optimizers
from tessera.puzzlelib.Backend import gpuarray

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


@pytest.fixture(autouse=True)
def seeded():
    np.random.seed(3)
    ts.manualSeed(3)


def randn(*shape):
    return np.random.randn(*shape).astype(np.float32)


def close(a, b, atol=1e-5):
    a = a.get() if hasattr(a, "get") else np.asarray(a)
    assert a.shape == np.asarray(b).shape, (a.shape, np.asarray(b).shape)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=atol)


def forward_backward(mod, x, g=None):
    """Runs mod on x and back with g (random when None); returns (out, g)."""
    y = mod(gpuarray.to_gpu(x))
    if g is None:
        g = randn(*y.shape)
    mod.backward(gpuarray.to_gpu(g))
    return y, g


# ---- modules -----------------------------------------------------------------------------------

def test_linear_computes_puzzlelib_forward_and_descent_sign_gradients():
    x = randn(5, 4)
    lin = Modules.Linear(4, 3)
    y, g = forward_backward(lin, x)
    W, b = lin.W.get(), lin.b.get()
    close(y, x @ W + b)
    close(lin.grad, g @ W.T)                       # PuzzleLib's hostInGrad
    close(lin.vars["W"].grad, x.T @ g)             # its hostWGrad
    close(lin.vars["b"].grad, g.sum(axis=0))
    assert W.shape == (4, 3) and b.shape == (3,)


def test_linear_default_init_is_puzzlelibs_uniform_within_sqrt_3_over_fan_in():
    W = Modules.Linear(300, 200).W.get()
    bound = np.sqrt(3.0 / 300)
    assert np.abs(W).max() <= bound and np.abs(W).max() > 0.95 * bound
    assert abs(W.std() - bound / np.sqrt(3)) < 0.01 * bound


def test_linear_trains_with_puzzlelibs_learning_rate():
    """PuzzleLib's own Linear training check (lr 0.1, MSE, 100 steps of updateParams)
    converges here: the costs average every element, as PuzzleLib's do."""
    x, t = randn(32, 50), randn(32, 10)
    lin = Modules.Linear(50, 10)
    mse = Cost.MSE()
    errors = []
    for _ in range(100):
        error, grad = mse(lin(x), t)
        lin.backward(grad)
        lin.updateParams(1e-1)
        errors.append(error)
    assert np.isfinite(errors).all() and errors[-1] < 0.6 * errors[0]


def conv2d_ref(x, W, b, stride=1, pad=0):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, w = x.shape
    o, _, kh, kw = W.shape
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    y = np.zeros((n, o, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            y[:, :, i, j] = np.tensordot(patch, W, axes=([1, 2, 3], [1, 2, 3]))
    return y + b


def test_conv2d_bias_layout_and_values():
    x = randn(2, 3, 6, 6)
    conv = Modules.Conv2D(3, 4, 3, stride=1, pad=1)
    conv.setVar("b", randn(1, 4, 1, 1))
    y, g = forward_backward(conv, x)
    assert conv.b.shape == (1, 4, 1, 1) and conv.W.shape == (4, 3, 3, 3)
    close(y, conv2d_ref(x, conv.W.get(), conv.b.get(), pad=1), atol=1e-4)
    close(conv.vars["b"].grad, g.sum(axis=(0, 2, 3)).reshape(1, 4, 1, 1), atol=1e-4)
    # the input gradient is the transpose of the forward map: <conv(x), g> = <x, grad>
    assert np.isclose((conv2d_ref(x, conv.W.get(), 0, pad=1) * g).sum(), (x * conv.grad.get()).sum(), rtol=1e-4)


def test_conv1d_keeps_puzzlelibs_four_d_weights():
    conv = Modules.Conv1D(2, 3, 5)
    assert conv.W.shape == (3, 2, 1, 5) and conv.b.shape == (1, 3, 1, 1)
    x = randn(2, 2, 9)
    y = conv(x).get()
    ref = conv2d_ref(x[:, :, None, :], conv.W.get(), conv.b.get())[:, :, 0, :]
    close(y, ref, atol=1e-4)


def test_pools_stride_two_by_default():
    x = randn(1, 2, 6, 6)
    mp, ap = Modules.MaxPool2D(size=3), Modules.AvgPool2D(size=3)
    ref = np.array([[[[x[0, c, i:i + 3, j:j + 3].max() for j in (0, 2)] for i in (0, 2)] for c in (0, 1)]])
    close(mp(x), ref)
    ref = np.array([[[[x[0, c, i:i + 3, j:j + 3].mean() for j in (0, 2)] for i in (0, 2)] for c in (0, 1)]])
    close(ap(x), ref)
    assert mp.dataShapeFrom((1, 2, 6, 6)) == (1, 2, 2, 2)


def test_maxpool_gradient_goes_to_the_maximum():
    x = randn(1, 1, 4, 4)
    mp = Modules.MaxPool2D()
    y, g = forward_backward(mp, x)
    ref = np.zeros_like(x)
    for i in range(2):
        for j in range(2):
            win = x[0, 0, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
            a, b = np.unravel_index(win.argmax(), win.shape)
            ref[0, 0, 2 * i + a, 2 * j + b] = g[0, 0, i, j]
    close(mp.grad, ref)


@pytest.mark.parametrize("nd, size, stride, pad", [(2, 2, 2, 0), (2, 3, 2, 1), (1, 3, 1, 1), (3, 2, 2, 0)])
def test_maxpool_mask_indexes_each_maximum_within_its_map(nd, size, stride, pad):
    x = randn(2, 3, *(7, 8, 6)[:nd])
    mp = getattr(Modules, f"MaxPool{nd}D")(size, stride, pad, useMask=True)
    y = mp(x).get()
    mask = mp.mask.get()
    assert mask.dtype == np.int32 and mask.shape == y.shape
    flat = x.reshape(2, 3, -1)
    # each output is the input at its index, and the largest of its window
    close(np.take_along_axis(flat, mask.reshape(2, 3, -1), axis=2).reshape(y.shape), y)
    window = (size,) * nd
    for n, c, *o in zip(*[a.ravel() for a in np.indices(y.shape)]):
        lo = [max(0, oi * stride - pad) for oi in o]
        hi = [min(x.shape[2 + d], o[d] * stride - pad + window[d]) for d in range(nd)]
        assert y[(n, c, *o)] == x[(n, c) + tuple(slice(a, b) for a, b in zip(lo, hi))].max()
    assert getattr(Modules, f"MaxPool{nd}D")(size, stride, pad).mask is None  # without useMask


ACTIVATIONS = {  # PuzzleLib's forward and its derivative written through the output
    Modules.sigmoid: (lambda x: 1 / (1 + np.exp(-x)), lambda g, y: g * y * (1 - y)),
    Modules.tanh: (np.tanh, lambda g, y: g * (1 - y ** 2)),
    Modules.relu: (lambda x: (x > 0) * x, lambda g, y: (y > 0) * g),
    Modules.leakyRelu: (lambda x: x * ((x > 0) + (x <= 0) * 0.01), lambda g, y: g * ((y > 0) + (y <= 0) * 0.01)),
    Modules.elu: (lambda x: (x > 0) * x + (x <= 0) * (np.exp(x) - 1), lambda g, y: g * ((y > 0) + (y <= 0) * (y + 1))),
    Modules.softPlus: (lambda x: np.log1p(np.exp(x)), lambda g, y: g * (1 - np.exp(-y))),
    Modules.clip: (lambda x: np.clip(x, 0, 6), lambda g, y: g * ((0 < y) & (y < 6))),
}


@pytest.mark.parametrize("kind", list(ACTIVATIONS))
def test_activation(kind):
    x = randn(11, 51) * 3
    act = Modules.Activation(kind)
    y, g = forward_backward(act, x)
    fwd, bwd = ACTIVATIONS[kind]
    close(y, fwd(x), atol=1e-5)
    close(act.grad, bwd(g, fwd(x)), atol=1e-4)


def test_batchnorm_per_activation_matches_puzzlelibs_formulas():
    n, size = 16, 10
    x = randn(n, size)
    bn = Modules.BatchNorm(size)
    assert bn.scale.shape == (1, size, 1, 1) and bn.mean.shape == (1, size, 1, 1)
    scale = bn.scale.get().ravel()
    assert 0.9 < scale.mean() < 1.1 and scale.std() > 0  # drawn around one (sscale 0.01)
    y, g = forward_backward(bn, x)
    mean = x.mean(0)
    invvar = 1 / np.sqrt(((x - mean) ** 2).sum(0) / n + 1e-5)
    norm = (x - mean) * invvar
    close(y, norm * scale, atol=1e-4)
    close(bn.vars["bias"].grad, g.sum(0).reshape(1, size, 1, 1), atol=1e-4)
    close(bn.vars["scale"].grad, (g * norm).sum(0).reshape(1, size, 1, 1), atol=1e-4)
    meangrad = g.sum(0) * scale * -invvar
    vargrad = (g * (x - mean)).sum(0) * scale * -0.5 * invvar ** 3
    ingrad = g * scale * invvar + vargrad * 2 / n * (x - mean) + meangrad / n
    close(bn.grad, ingrad, atol=1e-4)


def test_batchnorm2d_takes_numofmaps_and_keeps_running_statistics():
    bn = Modules.BatchNorm2D(numOfMaps=3)
    x = randn(4, 3, 5, 5) * 2 + 1
    bn(x)
    # PuzzleLib's first update (factor initFactor / 1 = 1) takes the batch's statistics
    close(bn.mean, x.mean(axis=(0, 2, 3)).reshape(1, 3, 1, 1), atol=1e-4)
    bn.evalMode()
    y = bn(x).get()
    var = bn.var.get().ravel()
    ref = (x - x.mean(axis=(0, 2, 3)).reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    close(y, ref * bn.scale.get(), atol=1e-3)


def test_dropout_scales_kept_values_and_is_the_identity_in_eval_mode():
    x = randn(100, 50)
    drop = Modules.Dropout(p=0.5)
    y = drop(x).get()
    kept = y != 0
    close(y[kept], 2 * x[kept])
    assert 0.4 < kept.mean() < 0.6
    drop.evalMode()
    close(drop(x), x)


def test_rnn_defaults_to_relu_cells_and_bidirectional_pairs_are_final_states():
    T, N, insize, hsize = 5, 3, 4, 6
    x = randn(T, N, insize)
    uni = Modules.RNN(insize, hsize, getSequences=True)
    seq = uni(x).get()
    assert seq.shape == (T, N, hsize) and (seq >= 0).all()  # relu cells
    bi = Modules.RNN(insize, hsize, direction="bi")
    fwd, bwd = bi(x)
    full = bi.module.data.get()  # Tessera's sequences underneath
    close(fwd, full[-1, :, :hsize])
    close(bwd, full[0, :, hsize:])  # PuzzleLib reads the backward direction's final state at t = 0
    assert bi.dataShapeFrom((T, N, insize)) == [(N, hsize), (N, hsize)]
    gf, gb = randn(N, hsize), randn(N, hsize)
    bi.backward([gf, gb])
    assert bi.grad.shape == (T, N, insize)


SAME = [  # (module, inputs, NumPy reference of the output)
    (lambda: Modules.SoftMax(), [randn(3, 5)], lambda x: np.exp(x) / np.exp(x).sum(1, keepdims=True)),
    (lambda: Modules.Flatten(), [randn(2, 3, 4)], lambda x: x.reshape(2, 12)),
    (lambda: Modules.Reshape((2, 6, 2)), [randn(2, 3, 4)], lambda x: x.reshape(2, 6, 2)),
    (lambda: Modules.Identity(), [randn(2, 3)], lambda x: x),
    (lambda: Modules.Transpose((0, 2, 1)), [randn(2, 3, 4)], lambda x: x.transpose(0, 2, 1)),
    (lambda: Modules.SwapAxes(1, 2), [randn(2, 3, 4)], lambda x: x.swapaxes(1, 2)),
    (lambda: Modules.MoveAxis(1, 3), [randn(2, 3, 4, 5)], lambda x: np.moveaxis(x, 1, 3)),
    (lambda: Modules.MulAddConst(a=2.0, b=1.0), [randn(2, 3)], lambda x: 2 * x + 1),
    (lambda: Modules.Tile(axis=1, times=3), [randn(2, 3)], lambda x: np.tile(x, (1, 3))),
    (lambda: Modules.Upsample2D(scale=2), [randn(1, 2, 3, 3)], lambda x: x.repeat(2, 2).repeat(2, 3)),
    (lambda: Modules.Pad1D(pad=(1, 2)), [randn(2, 3, 4)], lambda x: np.pad(x, ((0, 0), (0, 0), (1, 2)))),
    (lambda: Modules.Concat(axis=1), [randn(2, 3), randn(2, 4)], lambda a, b: np.concatenate([a, b], 1)),
    (lambda: Modules.Add(), [randn(2, 3), randn(2, 3)], lambda a, b: a + b),
    (lambda: Modules.Mul(), [randn(2, 3), randn(2, 3)], lambda a, b: a * b),
    (lambda: Modules.Gelu(), [randn(4, 5)],
     lambda x: 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))),
]


@pytest.mark.parametrize("make,xs,ref", SAME, ids=[f"same{i}" for i in range(len(SAME))])
def test_modules_with_the_same_arguments(make, xs, ref):
    mod = make()
    y = mod(xs if len(xs) > 1 else xs[0])
    close(y, ref(*xs), atol=1e-5)


def test_split_and_replicate_return_lists():
    x = randn(2, 6)
    parts = Modules.Split(axis=1, sections=(2, 4))(x)
    close(parts[0], x[:, :2])
    close(parts[1], x[:, 2:])
    reps = Modules.Replicate(times=3)(x)
    assert len(reps) == 3
    close(reps[2], x)


def test_unsupported_arguments_say_so():
    with pytest.raises(ts.ModuleError, match="postpad 2 of spatial dim 0 must be less than its stride 2"):
        Modules.Deconv2D(2, 3, 3, stride=2, postpad=2)
    with pytest.raises(Modules.ModuleError, match="transpose"):
        Modules.Linear(2, 3, transpose=True)
    with pytest.raises(Modules.ModuleError, match="affine"):
        Modules.BatchNorm2D(3, affine=False)
    with pytest.raises(Modules.ModuleError, match="direction"):
        Modules.RNN(2, 3, direction="both")


def test_bad_shapes_are_tessera_shape_errors_naming_the_layer():
    with pytest.raises(ts.ShapeError, match="Linear"):
        Modules.Linear(4, 3)(randn(2, 5))


# ---- containers -------------------------------------------------------------------------------

def small_net():
    seq = Containers.Sequential()
    seq.append(Modules.Linear(6, 5, name="fc1"))
    seq.append(Modules.Activation(Modules.relu))
    inner = Containers.Sequential(name="head")
    inner.append(Modules.Linear(5, 2, name="fc2"))
    seq.append(inner)
    return seq


def test_sequential_names_slices_and_recursive_lookup():
    seq = small_net()
    assert list(seq.modules) == ["fc1", "1", "head"]
    assert seq.getByName("fc2") is seq["head"]["fc2"]  # found in the container below
    assert seq.getByName("nothing") is None
    part = seq[:2]
    assert isinstance(part, Containers.Sequential) and len(part) == 2
    x = randn(3, 6)
    full = seq(x).get()
    h = part(x).get()  # the same modules, shared
    close(h, np.maximum(x @ seq["fc1"].W.get() + seq["fc1"].b.get(), 0))
    close(full, h @ seq.getByName("fc2").W.get() + seq.getByName("fc2").b.get())
    assert seq[0] is seq["fc1"] and seq[-1] is seq["head"]
    with pytest.raises(Containers.ContainerError, match="no child named 'nope'"):
        seq["nope"]
    assert seq.getVar("head.fc2.W").data.shape == (5, 2)


def test_container_backward_takes_and_gives_descent_sign_gradients():
    seq = small_net()
    x = randn(3, 6)
    y, g = forward_backward(seq, x)
    W1, b1, W2 = seq["fc1"].W.get(), seq["fc1"].b.get(), seq.getByName("fc2").W.get()
    pre = x @ W1 + b1
    ref = ((g @ W2.T) * (pre > 0)) @ W1.T
    close(seq.grad, ref, atol=1e-5)


def test_graph_of_nodes():
    from tessera.puzzlelib.Containers import Graph
    a = Modules.Linear(4, 3, name="a").node()
    b = Modules.Linear(4, 3, name="b").node()
    # two inputs: a graph of two nodes summed
    s = Modules.Add(name="sum").node(a, b)
    g = Graph(inputs=[a, b], outputs=s)
    x1, x2 = randn(2, 4), randn(2, 4)
    y = g([x1, x2]).get()
    ref = x1 @ g["a"].W.get() + g["a"].b.get() + x2 @ g["b"].W.get() + g["b"].b.get()
    close(y, ref)
    assert sorted(g.modules) == ["a", "b", "sum"]


# ---- costs --------------------------------------------------------------------------------------

def test_mse_averages_every_element():
    p, t = randn(10, 10), randn(10, 10)
    mse = Cost.MSE()
    error, grad = mse(p, t)
    assert np.isclose(error, np.linalg.norm(t - p) ** 2 / (2 * p.size), rtol=1e-5)
    close(grad, (t - p) / p.size)
    assert np.isclose(mse.validate(p, t), error, rtol=1e-5)


def test_abs_and_smoothl1_average_every_element():
    p, t = randn(10, 10), randn(10, 10)
    error, grad = Cost.Abs()(p, t)
    assert np.isclose(error, np.abs(t - p).sum() / p.size, rtol=1e-5)
    close(grad, np.sign(t - p) / p.size)
    d = p - t
    error, grad = Cost.SmoothL1()(p, t)
    ref = np.mean((np.abs(d) >= 1) * (np.abs(d) - 0.5) + (np.abs(d) < 1) * d ** 2 / 2)
    assert np.isclose(error, ref, rtol=1e-5)
    close(grad, -((np.abs(d) >= 1) * np.sign(d) + (np.abs(d) < 1) * d) / p.size)


def test_bce_takes_int_labels_and_validates_to_the_error_rate():
    scores = randn(20, 1, 4, 4)
    labels = np.random.randint(0, 2, (20, 4, 4)).astype(np.int32)
    bce = Cost.BCE()
    error, grad = bce(scores, labels)
    sig = 1 / (1 + np.exp(-scores))
    close(grad, (labels.reshape(scores.shape) - sig) / scores.size)
    ref = -np.sum(labels.ravel() * np.log(sig).ravel() + (1 - labels.ravel()) * np.log(1 - sig).ravel()) / scores.size
    assert np.isclose(error, ref, rtol=1e-4)
    s = np.array([[-1.0]] * 500 + [[1.0]] * 500, np.float32)
    lab = np.array([0] * 490 + [1] * 510, np.int32)
    assert np.isclose(bce.validate(s, lab), 10 / 1000)
    with pytest.raises(Cost.CostError, match="0 or 1"):
        bce(randn(4, 1), np.array([0, 1, 2, 0], np.int32))


def test_hinge_averages_every_element():
    scores = randn(20, 4)
    labels = (np.random.randint(0, 2, (20, 4)) * 2 - 1).astype(np.int32)
    error, grad = Cost.Hinge()(scores, labels)
    val = labels * scores
    close(grad, np.where(val < 1, labels / scores.size, 0))
    assert np.isclose(error, np.maximum(0, 1 - val).sum() / scores.size, rtol=1e-5)


def softmax(x, axis=1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def test_l1_hinge_hinges_each_element_and_validates_to_the_error_rate():
    n, d = 20, 4
    x1, x2 = randn(n, d), randn(n, d)
    labels = np.random.default_rng(5).integers(0, 2, n).astype(np.int32)
    cost = Cost.L1Hinge()
    error, (g1, g2) = cost([gpuarray.to_gpu(x1), gpuarray.to_gpu(x2)], gpuarray.to_gpu(labels))
    # PuzzleLib's formulas, element by element
    diff = x1 - x2
    similar = (labels == 1)[:, None]
    ref_error = np.where(similar, np.abs(diff), np.maximum(0.0, 1.0 - np.abs(diff))).sum() / (n * d)
    slope = np.where(similar, np.sign(diff), -np.sign(diff) * (np.abs(diff) < 1.0)) / (n * d)  # dE/dx1
    assert np.isclose(error, ref_error, rtol=1e-5)
    close(g1.get(), -slope)  # the descent sign, as every cost of the namespace gives it
    close(g2.get(), slope)
    dist = np.abs(diff).mean(axis=1)
    assert cost.validate([x1, x2], labels) == pytest.approx(np.mean((dist <= 1.0) != (labels == 1)))
    with pytest.raises(Cost.CostError, match="labels must be 0 or 1"):
        cost([x1, x2], np.full(n, 2, np.int32))
    with pytest.raises(Cost.CostError, match="two \\[N, D\\] embeddings"):
        cost([x1, x2[:, :3]], labels)


def test_cross_entropy_gradient_error_rate_and_most_prob():
    scores = randn(20, 10)
    labels = np.random.randint(0, 10, 20).astype(np.int32)
    entr = Cost.CrossEntropy()
    error, grad = entr(scores, labels)
    sm = softmax(scores)
    assert np.isclose(error, -np.log(sm[np.arange(20), labels]).mean(), rtol=1e-5)
    close(grad, (np.eye(10)[labels] - sm) / 20)
    rate = entr.validate(scores, labels)
    close(entr.mostProb, scores.argmax(1).astype(np.int32))
    assert np.isclose(rate, (scores.argmax(1) != labels).mean())


def test_weighted_cross_entropy():
    scores = randn(20, 10)
    labels = np.random.randint(0, 10, 20).astype(np.int32)
    w = np.random.random_sample(10).astype(np.float32)
    w /= w.sum()
    error, grad = Cost.CrossEntropy(weights=w)(scores, labels)
    sm = softmax(scores)
    close(grad, w[None, :] * 0 + (w[labels][:, None] * (np.eye(10)[labels] - sm)) / 20)
    assert np.isclose(error, -(w[labels] * np.log(sm[np.arange(20), labels])).sum() / 20, rtol=1e-4)


def test_kl_divergence_with_normalised_targets():
    p, t = randn(10, 10), randn(10, 10)
    div = Cost.KLDivergence(normTarget=True)
    error, grad = div(p, t)
    sp, st = softmax(p), softmax(t)
    close(grad, (st - sp) / 10)
    assert np.isclose(error, np.sum(st * (np.log(st) - np.log(sp))) / 10, rtol=1e-4)


def test_mean_error_accumulates_over_samples():
    mse = Cost.MSE()
    e1, _ = mse(randn(4, 3), randn(4, 3))
    e2, _ = mse(randn(2, 3), randn(2, 3))
    assert np.isclose(mse.getMeanError(), (4 * e1 + 2 * e2) / 6)
    mse.resetAccumulator()
    assert mse.getMeanError() == 0.0


# ---- optimizers -------------------------------------------------------------------------------

def one_step(opt, steps=1):
    """A Linear, one cost gradient, `steps` updates; returns (W before, descent grad, W after)."""
    lin = Modules.Linear(4, 3)
    x, t = randn(8, 4), randn(8, 3)
    opt.setupOn(lin, useGlobalState=True)
    W0 = lin.W.get()
    mse = Cost.MSE()
    _, grad = mse(lin(x), t)
    opt.zeroGradParams()
    lin.backward(grad)
    g = lin.vars["W"].grad.get()
    for _ in range(steps):
        opt.update()
    return W0, g, lin.W.get()


def test_sgd_adds_the_descent_gradient():
    W0, g, W1 = one_step(Optimizers.SGD(learnRate=0.1))
    close(W1, W0 + 0.1 * g)
    assert Optimizers.SGD().learnRate == pytest.approx(1e-3)  # PuzzleLib's default


def test_momentum_sgd():
    W0, g, W2 = one_step(Optimizers.MomentumSGD(learnRate=0.1, momRate=0.9), steps=2)
    mg = 0.1 * g
    mg = 0.9 * mg + 0.1 * g
    close(W2, W0 + 0.1 * g + mg, atol=1e-5)


def test_adam_first_step_moves_each_weight_by_alpha():
    W0, g, W1 = one_step(Optimizers.Adam(alpha=0.01))
    close(W1, W0 + 0.01 * np.sign(g), atol=1e-4)


def test_rmsprop_takes_puzzlelibs_factor_name():
    W0, g, W1 = one_step(Optimizers.RMSProp(learnRate=0.01, factor=0.9, epsilon=1e-5))
    ms = 0.1 * g ** 2
    close(W1, W0 + 0.01 * g / (np.sqrt(ms) + 1e-5), atol=2e-4)


@pytest.mark.parametrize("make", [
    lambda: Optimizers.SGD(learnRate=0.1), lambda: Optimizers.MomentumSGD(learnRate=0.05),
    lambda: Optimizers.NesterovSGD(learnRate=0.05), lambda: Optimizers.Adam(),
    lambda: Optimizers.AdaGrad(learnRate=0.01), lambda: Optimizers.AdaDelta(),
    lambda: Optimizers.RMSProp(learnRate=1e-3), lambda: Optimizers.RMSPropGraves(learnRate=1e-3),
    lambda: Optimizers.SMORMS3(learnRate=1e-3)], ids=lambda f: "opt")
def test_every_optimizer_trains_puzzlelibs_simple_net(make):
    """PuzzleLib's trainSimpleTest: Linear 128-64-32-16 with relus against random targets."""
    seq = Containers.Sequential()
    for i, (a, b) in enumerate(((128, 64), (64, 32), (32, 16))):
        seq.append(Modules.Linear(a, b, useBias=(i == 2)))
        if i < 2:
            seq.append(Modules.Activation(Modules.relu))
    opt = make()
    opt.setupOn(seq, useGlobalState=True)
    mse = Cost.MSE()
    x, t = randn(16, 128), randn(16, 16)
    errors = []
    for _ in range(100):
        error, grad = mse(seq(x), t)
        opt.zeroGradParams()
        seq.backward(grad)
        opt.update()
        errors.append(error)
    assert errors[-1] < 0.9 * errors[0], (type(opt).__name__, errors[0], errors[-1])


# ---- tensors and handlers ---------------------------------------------------------------------

def test_gpuarray_methods():
    a = gpuarray.to_gpu(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert isinstance(a, gpuarray.GPUArray) and a.nbytes == 24
    close(a.get(), np.arange(6).reshape(2, 3))
    a.fill(2.0)
    close(a, np.full((2, 3), 2.0))
    a.set(np.ones((2, 3), np.float32))
    close(a, np.ones((2, 3)))
    with pytest.raises(ts.ShapeError, match=r"\(3,\).*\(2, 3\)"):
        a.set(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="float64"):
        gpuarray.to_gpu(np.ones(3))
    z = gpuarray.zeros((2, 2), dtype=np.int32)
    assert z.dtype == "int32" and z.nbytes == 16


def test_handlers_train_validate_and_calc():
    rng = np.random.RandomState(0)
    centers = rng.randn(3, 8).astype(np.float32) * 3
    labels = rng.randint(0, 3, 600).astype(np.int32)
    data = (centers[labels] + rng.randn(600, 8)).astype(np.float32)
    seq = Containers.Sequential()
    seq.append(Modules.Linear(8, 3))
    cost = Cost.CrossEntropy()
    opt = Optimizers.MomentumSGD(learnRate=0.1)
    opt.setupOn(seq, useGlobalState=True)
    seen = []
    trainer = Handlers.Trainer(seq, cost, opt, onBatchFinish=lambda t: seen.append(t.currBatch), batchsize=50)
    for _ in range(5):
        trainer.trainFromHost(data, labels, macroBatchSize=300)
    assert seen[:12] == list(range(1, 7)) * 2
    error = Handlers.Validator(seq, cost, batchsize=100).validateFromHost(data, labels)
    assert error < 0.05, error
    scores = Handlers.Calculator(seq, batchsize=128).calcFromHost(data)
    assert scores.shape == (600, 3) and np.isclose((scores.argmax(1) != labels).mean(), error)


def test_lenet_in_puzzlelibs_style_trains_to_90_percent():
    try:
        ts.loadMnist(split="t10k")
    except ts.IoError as e:
        pytest.skip(f"Fashion-MNIST is not installed (tools/setup.sh installs it): {e}")
    script = os.path.join(ROOT, "docs", "examples", "puzzlelib_lenet.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=900)
    print(out.stdout, out.stderr)
    last = [line for line in out.stdout.splitlines() if "test accuracy" in line][-1]
    accuracy = float(last.rsplit(" ", 1)[1].rstrip("%"))
    first = float(out.stdout.splitlines()[0].split("train error ")[1].split(",")[0])
    final = float(last.split("train error ")[1].split(",")[0])
    assert final < 0.6 * first, out.stdout
    assert accuracy >= 90.0, out.stdout
    assert out.returncode == 0


def test_batchnorm_exposes_puzzlelibs_saved_statistics():
    n, size = 16, 5
    x = randn(n, size) * 2 + 1
    bn = Modules.BatchNorm(size)
    assert bn.savemean is None and bn.saveinvvar is None
    bn(x)
    close(bn.savemean, x.mean(0).reshape(1, size, 1, 1), atol=1e-5)
    close(bn.saveinvvar, (1 / np.sqrt(x.var(0) + 1e-5)).reshape(1, size, 1, 1), atol=1e-4)
    bn.evalMode()
    bn(x)
    assert bn.savemean is None


def test_dropout_rands_and_lcn_means():
    x = randn(20, 30)
    drop = Modules.Dropout(p=0.25)
    y = drop(x).get()
    mask = drop.rands.get()
    assert set(np.unique(mask)) <= {0.0, np.float32(1 / 0.75)}
    close(y, x * mask)
    lcn = Modules.LCN(N=3)
    img = randn(1, 1, 5, 5)
    lcn(img)
    padded = np.pad(img[0, 0], 1)
    ref = np.array([[padded[i:i + 3, j:j + 3].mean() for j in range(5)] for i in range(5)])
    close(lcn.means.get()[0, 0], ref, atol=1e-5)  # includePad: the window's mean over nine places


def test_multi_gives_per_cost_errors():
    p, t = randn(10, 10), randn(10, 10)
    multi = Cost.Multi().append(Cost.MSE()).append(Cost.Abs())
    errors, grads = multi([p, p], [t, t])
    assert np.isclose(errors[0], np.linalg.norm(t - p) ** 2 / (2 * p.size), rtol=1e-5)
    assert np.isclose(errors[1], np.abs(t - p).sum() / p.size, rtol=1e-5)
    close(grads[0], (t - p) / p.size)
    val = multi.validate([p, p], [t, t])
    assert np.allclose(val, errors, rtol=1e-5)
    assert np.allclose(multi.getMeanError(), errors, rtol=1e-5)


def test_sum_over_an_axis_with_and_without_weights():
    """PuzzleLib's own Sum checks: a group axis, with weights and without, and the axis
    before the last."""
    data, grad = randn(5, 3, 4), randn(5, 4)
    plain = Modules.Sum(axis=1, useWeights=False)
    y, _ = forward_backward(plain, data, grad)
    close(y, data.sum(1))
    close(plain.grad, np.repeat(grad.reshape(5, 1, 4), 3, axis=1))
    weights = randn(5, 3)
    weighted = Modules.Sum(axis=1, useWeights=True)
    y = weighted([gpuarray.to_gpu(data), gpuarray.to_gpu(weights)])
    close(y, (data * weights[:, :, None]).sum(1))
    weighted.backward(gpuarray.to_gpu(grad))
    close(weighted.grad[0], np.repeat(grad.reshape(5, 1, 4), 3, axis=1) * weights[:, :, None])
    close(weighted.grad[1], (data * grad.reshape(5, 1, 4)).sum(2))
    data = randn(5, 3, 2, 6)
    y, g = forward_backward(Modules.Sum(axis=2, useWeights=False), data)
    close(y, data.sum(2))


def test_svm_is_one_vs_all():
    scores = randn(20, 4)
    labels = np.random.randint(0, 4, 20).astype(np.int32)
    svm = Cost.SVM(mode="l1")
    error, grad = svm(scores, labels)
    cls = 2 * (np.arange(4)[None, :] == labels[:, None]) - 1
    val = scores * cls
    close(grad, np.where(val < 1, cls / scores.size, 0))
    assert np.isclose(error, np.maximum(0, 1 - val).sum() / scores.size, rtol=1e-5)
    rate = svm.validate(scores, labels)
    close(svm.mostProb, scores.argmax(1).astype(np.int32))
    assert np.isclose(rate, (scores.argmax(1) != labels).mean())
    with pytest.raises(Cost.CostError, match="l2"):
        Cost.SVM(mode="l2")
    with pytest.raises(Cost.CostError, match="0..3"):
        svm(scores, np.full(20, 4, np.int32))


# ---- PuzzleLib's model files ------------------------------------------------------------------

def conv_bn_net(name="net"):
    seq = Containers.Sequential(name=name)
    seq.append(Modules.Conv2D(2, 3, 3, pad=1, name="conv"))
    seq.append(Modules.BatchNorm2D(3, name="bn"))
    seq.append(Modules.Activation(Modules.relu))
    seq.append(Modules.Flatten())
    seq.append(Modules.Linear(3 * 4 * 4, 2, name="fc"))
    return seq


def test_files_in_puzzlelibs_layout_load_and_save(tmp_path):
    h5py = pytest.importorskip("h5py")
    # a file as PuzzleLib's Module.save writes it: params/<i>, links/<root>.<child>.<param>,
    # attrs/<root>.<child>.<attr>, biases and batch-norm tensors (1, C, 1, 1)
    values = {"net.conv.W": randn(3, 2, 3, 3), "net.conv.b": randn(1, 3, 1, 1),
              "net.bn.scale": randn(1, 3, 1, 1), "net.bn.bias": randn(1, 3, 1, 1),
              "net.fc.W": randn(48, 2), "net.fc.b": randn(2)}
    attrs = {"net.bn.mean": randn(1, 3, 1, 1), "net.bn.var": np.abs(randn(1, 3, 1, 1)) + 0.5}
    path = str(tmp_path / "puzzlelib.hdf")
    with h5py.File(path, "w") as f:
        for i, (key, v) in enumerate(values.items()):
            f.create_dataset(f"params/{i}", data=v, compression="gzip")
            f[f"links/{key}"] = i
        for key, v in attrs.items():
            f.create_dataset(f"attrs/{key}", data=v)
    net = conv_bn_net()
    net.load(path)
    close(net["conv"].W, values["net.conv.W"])
    close(net["bn"].var, attrs["net.bn.var"])
    net.evalMode()
    x = randn(2, 2, 4, 4)
    conv = conv2d_ref(x, values["net.conv.W"], values["net.conv.b"], pad=1)
    bn = (conv - attrs["net.bn.mean"]) / np.sqrt(attrs["net.bn.var"] + 1e-5) * values["net.bn.scale"] \
        + values["net.bn.bias"]
    ref = np.maximum(bn, 0).reshape(2, 48) @ values["net.fc.W"] + values["net.fc.b"]
    close(net(x), ref, atol=1e-4)
    # and back: the same layout, read by h5py as PuzzleLib would
    out = str(tmp_path / "back.hdf")
    net.save(out)
    with h5py.File(out, "r") as f:
        for key, v in values.items():
            np.testing.assert_allclose(np.array(f["params"][str(f["links"][key][()])]), v, rtol=1e-6)
        np.testing.assert_allclose(np.array(f["attrs"]["net.bn.mean"]), attrs["net.bn.mean"], rtol=1e-6)
    again = conv_bn_net()
    again.load(out)
    again.evalMode()
    close(again(x), ref, atol=1e-4)
    assert isinstance(net.save(), bytes)  # PuzzleLib's in-memory form
    assert len(Modules.Linear(2, 3).save()) > 0


def test_loading_a_file_that_does_not_fit_names_what_is_missing(tmp_path):
    pytest.importorskip("h5py")
    path = str(tmp_path / "m.hdf")
    conv_bn_net().save(path)
    with pytest.raises(Modules.ModuleError, match="no parameter 'other.conv.W'"):
        conv_bn_net("other").load(path)
    wide = Containers.Sequential(name="net")
    wide.append(Modules.Conv2D(2, 5, 3, name="conv"))
    with pytest.raises(Modules.ModuleError, match=r"'net.conv.W' has shape \(3, 2, 3, 3\) in the file, the module "
                                                  r"\(5, 2, 3, 3\)"):
        wide.load(path)
    with pytest.raises(Modules.ModuleError, match="cuDNN blob"):
        Modules.RNN(2, 3).save(str(tmp_path / "rnn.hdf"))


# ---- more of the catalogue ----------------------------------------------------------------------

def test_deconv2d_is_the_adjoint_of_conv2d_with_puzzlelibs_bias_layout():
    x = randn(2, 3, 4, 4)
    deconv = Modules.Deconv2D(3, 2, 3, stride=2, pad=1)
    assert deconv.W.shape == (3, 2, 3, 3) and deconv.b.shape == (1, 2, 1, 1)
    deconv.setVar("b", np.zeros((1, 2, 1, 1), np.float32))
    y = deconv(x).get()
    assert y.shape == (2, 2, 7, 7) and deconv.dataShapeFrom((2, 3, 4, 4)) == (2, 2, 7, 7)
    z = randn(*y.shape)
    # <deconv(x), z> = <x, conv(z)> with the same weights read as a convolution's
    assert np.isclose((y * z).sum(), (x * conv2d_ref(z, deconv.W.get(), 0, stride=2, pad=1)).sum(), rtol=1e-4)


def test_deconv_postpad_adds_the_outputs_the_padding_would_crop():
    x = randn(2, 3, 4, 5)
    full = Modules.Deconv2D(3, 2, 3, stride=2)  # pad 0: every output, (4 - 1) 2 + 3 = 9 rows
    full.setVar("b", np.zeros((1, 2, 1, 1), np.float32))
    up = Modules.Deconv2D(3, 2, 3, stride=2, pad=1, postpad=1)
    up.setVar("W", full.W.get())
    up.setVar("b", np.zeros((1, 2, 1, 1), np.float32))
    y, ref = up(x).get(), full(x).get()
    assert y.shape == (2, 2, 8, 10) and up.dataShapeFrom((2, 3, 4, 5)) == (2, 2, 8, 10)
    close(y, ref[:, :, 1:9, 1:11])  # pad 1 crops one row each side; postpad 1 gives the last back
    g = randn(*y.shape)
    up.backward(g)
    full.backward(np.pad(g, ((0, 0), (0, 0), (1, 0), (1, 0))))
    close(up.grad, full.grad)
    close(up.vars["W"].grad, full.vars["W"].grad)


def test_to_list_flattens_nested_lists_and_nests_the_gradient():
    d1, d2, d3 = randn(10, 10), randn(5, 5), randn(3, 6)
    tolist = Modules.ToList()
    out = tolist([[d1, d2], d3])
    assert len(out) == 3
    for o, d in zip(out, (d1, d2, d3)):
        close(o, d)
    assert tolist.dataShapeFrom([d1.shape, [d2.shape, d3.shape]]) == [d1.shape, d2.shape, d3.shape]
    g1, g2, g3 = randn(10, 10), randn(5, 5), randn(3, 6)
    tolist.backward([g1, g2, g3])
    (i1, i2), i3 = tolist.grad
    close(i1, g1)
    close(i2, g2)
    close(i3, g3)
    assert tolist.gradShapeFrom([g1.shape, g2.shape, g3.shape]) == [[g1.shape, g2.shape], g3.shape]
    # in a graph: one output per parent
    inp = Containers.Node(Modules.Identity(), name="in")
    a = Containers.Node(Modules.Activation("relu"), inp)
    b = Containers.Node(Modules.Activation("sigmoid"), inp)
    both = Containers.Node(Modules.ToList(), [a, b])
    y = Containers.Graph(inputs=inp, outputs=both)(d1)
    close(y[0], np.maximum(d1, 0))
    close(y[1], 1 / (1 + np.exp(-d1)))


def test_kmaxpool_sorts_ascending_and_routes_gradients_back():
    x = randn(4, 3, 10)
    pool = Modules.KMaxPool(topk=5, axis=2)
    y, g = forward_backward(pool, x)
    ref = np.sort(np.partition(x, -5, axis=2)[:, :, -5:], axis=2)
    close(y, ref)
    idx = np.argsort(x, axis=2)[:, :, -5:]  # the top five's places, ascending by value
    ingrad = np.zeros_like(x)
    np.put_along_axis(ingrad, idx, g, axis=2)
    close(pool.grad, ingrad)


def test_embedder_and_its_descent_sign_parameter_gradient():
    emb = Modules.Embedder(10, 4, 3)
    ids = np.random.randint(0, 10, (2, 4)).astype(np.int32)
    y = emb(ids)
    W = emb.W.get()
    close(y, W[ids])
    g = randn(2, 4, 3)
    emb.backward(g, updGrad=False)
    ref = np.zeros_like(W)
    np.add.at(ref, ids.ravel(), g.reshape(-1, 3))
    close(emb.vars["W"].grad, ref)
    emb.updateParams(0.1)  # PuzzleLib's W += lr * grad
    close(emb.W, W + 0.1 * ref)


def test_group_linear_prelu_and_pads():
    gl = Modules.GroupLinear(groups=3, insize=4, outsize=2)
    x = randn(5, 3, 4)
    W, b = gl.W.get(), gl.b.get()
    close(gl(x), np.einsum("ngi,gio->ngo", x, W) + b, atol=1e-5)
    pr = Modules.PRelu(3)
    x = randn(2, 3, 4, 4)
    close(pr(x), np.where(x > 0, x, 0.25 * x))
    assert pr.slopes.shape == (3,)
    x = randn(1, 2, 3, 3)
    close(Modules.Pad2D(pad=(1, 0, 2, 0))(x), np.pad(x, ((0, 0), (0, 0), (1, 0), (2, 0))))
    close(Modules.Pad2D(pad=(1, 1, 1, 1), mode="reflect")(x), np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), "reflect"))


def test_slice_takes_puzzlelibs_indexing():
    x = randn(2, 3, 5, 6)
    sl = Modules.Slice()[:, :, 1:-1, 2:]
    y, g = forward_backward(sl, x)
    close(y, x[:, :, 1:-1, 2:])
    ref = np.zeros_like(x)
    ref[:, :, 1:-1, 2:] = g
    close(sl.grad, ref)
    sl = Modules.Slice()[:, ::2, 1::3]
    y, g = forward_backward(sl, x)
    close(y, x[:, ::2, 1::3])
    ref = np.zeros_like(x)
    ref[:, ::2, 1::3] = g
    close(sl.grad, ref)
    sl = Modules.Slice()[:, ::-1, 4:1:-2]  # backwards too
    y, g = forward_backward(sl, x)
    close(y, x[:, ::-1, 4:1:-2])
    ref = np.zeros_like(x)
    ref[:, ::-1, 4:1:-2] = g
    close(sl.grad, ref)
    with pytest.raises(Modules.ModuleError, match="stopping before index 0 needs the dim's size"):
        Modules.Slice()[:, 2:0:-1]
    with pytest.raises(Modules.ModuleError, match="step 0"):
        Modules.Slice()[:, ::0]


def test_pools_and_norms_of_other_ranks():
    x = randn(2, 3, 8)
    close(Modules.MaxPool1D()(x), x.reshape(2, 3, 4, 2).max(3))
    close(Modules.AvgPool1D()(x), x.reshape(2, 3, 4, 2).mean(3))
    x = randn(1, 2, 4, 4, 4)
    close(Modules.MaxPool3D()(x), x.reshape(1, 2, 2, 2, 2, 2, 2, 2).max(axis=(3, 5, 7)))
    bn = Modules.BatchNorm1D(3)
    x = randn(4, 3, 5)
    y = bn(x).get()
    norm = (x - x.mean((0, 2), keepdims=True)) / np.sqrt(x.var((0, 2), keepdims=True) + 1e-5)
    close(y, norm * bn.scale.get().reshape(1, 3, 1), atol=1e-4)
    assert bn.scale.shape == (1, 3, 1)
    inorm = Modules.InstanceNorm2D(3)
    x = randn(2, 3, 4, 4)
    assert inorm.scale.shape == (1, 3, 1, 1)
    ref = (x - x.mean((2, 3), keepdims=True)) / np.sqrt(x.var((2, 3), keepdims=True) + 1e-5)
    close(inorm(x), ref, atol=1e-4)
    conv = Modules.Conv3D(2, 3, 3, pad=1)
    assert conv.b.shape == (1, 3, 1, 1, 1) and conv(randn(1, 2, 4, 4, 4)).shape == (1, 3, 4, 4, 4)


def test_dropout2d_drops_whole_maps_and_upsample3d_repeats():
    x = randn(4, 8, 3, 3) + 5
    y = Modules.Dropout2D(p=0.5)(x).get()
    per_map = (y == 0).reshape(4, 8, 9)
    assert ((per_map.all(2)) | (~per_map.any(2))).all()  # a map is dropped whole or kept whole
    x = randn(1, 2, 2, 2, 2)
    close(Modules.Upsample3D(scale=2)(x), x.repeat(2, 2).repeat(2, 3).repeat(2, 4))


def test_penalty_adds_to_the_descent_sign_gradient():
    x = randn(3, 4)
    pen = Modules.Penalty(mode="l1", weight=0.1)
    y, g = forward_backward(pen, x)
    close(y, x)
    close(pen.grad, g - 0.1 * np.sign(x) / 3)  # PuzzleLib's: weight / batch * sign(x), descent sign


def test_maxunpool_inverts_the_maxpool():
    x = randn(1, 1, 4, 4)
    pool = Modules.MaxPool2D()
    unpool = Modules.MaxUnpool2D(pool)
    y = unpool(pool(x)).get()
    ref = np.zeros_like(x)
    for i in range(2):
        for j in range(2):
            win = x[0, 0, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
            a, b = np.unravel_index(win.argmax(), win.shape)
            ref[0, 0, 2 * i + a, 2 * j + b] = win.max()
    close(y, ref)


@pytest.mark.parametrize("inmode,wmode", [("full", "full"), ("one", "full"), ("full", "one"), ("one", "one")])
def test_group_linear_modes(inmode, wmode):
    """PuzzleLib's own GroupLinear checks: one weight per group or one for all, one data
    group for every weight or one per group."""
    n, groups, insize, outsize = 4, 3, 5, 2
    gl = Modules.GroupLinear(groups if wmode == "full" or inmode == "one" else None, insize, outsize,
                             inmode=inmode, wmode=wmode)
    W = gl.W.get()
    assert W.shape == ((groups if wmode == "full" else 1), insize, outsize)
    gl.setVar("b", np.random.randn(*gl.b.shape).astype(np.float32))
    b = gl.b.get()
    x = randn(n, 1 if inmode == "one" else groups, insize)
    y, g = forward_backward(gl, x, randn(n, groups, outsize))
    Wg = [W[i if wmode == "full" else 0] for i in range(groups)]
    xg = [x[:, 0 if inmode == "one" else i] for i in range(groups)]
    close(y, np.stack([xg[i] @ Wg[i] for i in range(groups)], 1) + (b if wmode == "full" else b[None]), atol=1e-5)
    ingrad = np.stack([g[:, i] @ Wg[i].T for i in range(groups)], 1)
    close(gl.grad, ingrad.sum(1, keepdims=True) if inmode == "one" else ingrad, atol=1e-5)
    wgrad = np.stack([xg[i].T @ g[:, i] for i in range(groups)])
    close(gl.vars["W"].grad, wgrad if wmode == "full" else wgrad.sum(0, keepdims=True), atol=1e-5)
    bgrad = g.sum(0)
    close(gl.vars["b"].grad, bgrad if wmode == "full" else bgrad.sum(0, keepdims=True), atol=1e-5)


def test_group_linear_batch_dim_one():
    gl = Modules.GroupLinear(2, 5, 4, batchDim=1)
    x = randn(2, 3, 5)
    W, b = gl.W.get(), gl.b.get()
    close(gl(x), np.stack([x[i] @ W[i] + b[i] for i in range(2)]), atol=1e-5)


def _puzzlelib_rule(name, lr, **k):
    """PuzzleLib's update rule (its optimizers' calcTest formulas) as a NumPy step:
    step(W, g, state, t) -> W, with g the descent-sign gradient."""
    def sgd(W, g, s, t):
        return W + lr * g

    def momentum(W, g, s, t):
        s["mom"] = k["momRate"] * s.get("mom", 0) + lr * g
        return W + s["mom"]

    def nesterov(W, g, s, t):
        mom, mr = s.get("mom", 0), k["momRate"]
        s["mom"] = mr * mom + lr * g
        return W + mr ** 2 * mom + (1 + mr) * lr * g

    def adam(W, g, s, t):
        b1, b2, eps = 0.9, 0.999, 1e-8
        rate = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        s["mg"] = b1 * s.get("mg", 0) + (1 - b1) * g
        s["ms"] = b2 * s.get("ms", 0) + (1 - b2) * g ** 2
        return W + rate * s["mg"] / (np.sqrt(s["ms"]) + eps)

    def adagrad(W, g, s, t):
        s["h"] = s.get("h", 0) + g ** 2
        return W + lr * g / (np.sqrt(s["h"]) + 1e-8)

    def adadelta(W, g, s, t):
        rho, eps = 0.95, 1e-6
        msg, msdx = s.get("msg", 0), s.get("msdx", 0)
        msg = msg + (1 - rho) * (g * g - msg)
        dx = np.sqrt((msdx + eps) / (msg + eps)) * g
        s["msg"], s["msdx"] = msg, msdx + (1 - rho) * (dx ** 2 - msdx)
        return W + dx

    def rmsprop(W, g, s, t):
        s["ms"] = 0.9 * s.get("ms", 0) + 0.1 * g ** 2
        return W + lr * g / (np.sqrt(s["ms"]) + 1e-5)

    def graves(W, g, s, t):
        a, mr, eps = 0.95, 0.9, 1e-4
        s["mg"] = a * s.get("mg", 0) + (1 - a) * g
        s["ms"] = a * s.get("ms", 0) + (1 - a) * g ** 2
        s["delta"] = mr * s.get("delta", 0) + lr * g / np.sqrt(s["ms"] - s["mg"] ** 2 + eps)
        return W + s["delta"]

    def smorms3(W, g, s, t):
        eps = 1e-16
        mem = s.get("mem", 1.0)
        r = 1 / (1 + mem)
        s["mg"] = (1 - r) * s.get("mg", 0) + r * g
        s["ms"] = (1 - r) * s.get("ms", 0) + r * g ** 2
        x = s["mg"] ** 2 / (s["ms"] + eps)
        s["mem"] = 1 + mem * (1 - x)
        return W + g * np.minimum(lr, x) / (np.sqrt(s["ms"]) + eps)

    return {"SGD": sgd, "MomentumSGD": momentum, "NesterovSGD": nesterov, "Adam": adam, "AdaGrad": adagrad,
            "AdaDelta": adadelta, "RMSProp": rmsprop, "RMSPropGraves": graves, "SMORMS3": smorms3}[name]


@pytest.mark.parametrize("name,make,lr,kw", [
    ("SGD", lambda: Optimizers.SGD(learnRate=0.1), 0.1, {}),
    ("MomentumSGD", lambda: Optimizers.MomentumSGD(learnRate=0.05, momRate=0.8), 0.05, {"momRate": 0.8}),
    ("NesterovSGD", lambda: Optimizers.NesterovSGD(learnRate=0.05, momRate=0.8), 0.05, {"momRate": 0.8}),
    ("Adam", lambda: Optimizers.Adam(alpha=0.01), 0.01, {}),
    ("AdaGrad", lambda: Optimizers.AdaGrad(learnRate=0.01), 0.01, {}),
    ("AdaDelta", lambda: Optimizers.AdaDelta(), None, {}),
    ("RMSProp", lambda: Optimizers.RMSProp(learnRate=0.01), 0.01, {}),
    ("RMSPropGraves", lambda: Optimizers.RMSPropGraves(learnRate=0.01), 0.01, {}),
    ("SMORMS3", lambda: Optimizers.SMORMS3(learnRate=0.01), 0.01, {}),
], ids=lambda v: v if isinstance(v, str) else "")
def test_optimizer_steps_follow_puzzlelibs_formulas(name, make, lr, kw):
    """Three steps of each optimizer against PuzzleLib's formula for it, from its initial
    state, with the gradients the net produces (descent sign)."""
    lin = Modules.Linear(4, 3)
    opt = make()
    opt.setupOn(lin, useGlobalState=True)
    rule = _puzzlelib_rule(name, lr, **kw)
    x, t = randn(8, 4), randn(8, 3)
    mse = Cost.MSE()
    W, state = lin.W.get().astype(np.float64), {}
    for step in range(1, 4):
        _, grad = mse(lin(x), t)
        opt.zeroGradParams()
        lin.backward(grad)
        g = lin.vars["W"].grad.get().astype(np.float64)
        W = rule(W, g, state, step)
        opt.update()
        np.testing.assert_allclose(lin.W.get(), W, rtol=1e-4, atol=1e-5, err_msg=f"{name}, step {step}")


def test_embedder_padding_id_and_vocabulary():
    """PuzzleLib's own Embedder check: ids from -1 (padding: a zero vector) up, and
    updateParams adding lr * grad to the rows the ids name."""
    emb = Modules.Embedder({"the": 0, "cat": 1, "sat": 2}, 5, 4)
    assert emb.getVocabulary() == {"the": 0, "cat": 1, "sat": 2} and emb.W.shape == (3, 4)
    ids = np.array([[0, -1, 2, 1, -1], [2, 2, -1, 0, 1]], np.int32)
    y = emb(ids).get()
    W = emb.W.get()
    ref = np.where((ids == -1)[..., None], 0.0, W[np.maximum(ids, 0)])
    close(y, ref)
    g = randn(2, 5, 4)
    emb.backward(g, updGrad=False)
    emb.updateParams(0.1)
    for b in range(2):
        for s in range(5):
            if ids[b, s] != -1:
                W[ids[b, s]] += 0.1 * g[b, s]
    close(emb.W, W)
    with pytest.raises(Modules.ModuleError, match="-1 \\(padding\\) or more, found -2"):
        emb(np.full((1, 5), -2, np.int32))
    filled = Modules.Embedder(3, 2, 2, onVocabulary=lambda W: W.fill(0.5))
    close(filled.W, np.full((3, 2), 0.5))


def test_cross_map_lrn_follows_puzzlelibs_formula():
    maps, N, alpha, beta, K = 10, 5, 1e-4, 0.75, 2.0
    x = randn(1, maps, 1, 1) * 3
    lrn = Modules.CrossMapLRN()
    y, g = forward_backward(lrn, x)
    d, gd = x.reshape(maps).astype(np.float64), g.reshape(maps).astype(np.float64)
    behind, ahead = (N - 1) // 2, N - (N - 1) // 2
    norms = np.array([K + alpha / N * (d[max(0, i - behind):min(maps, i + ahead)] ** 2).sum() for i in range(maps)])
    close(y.get().reshape(maps), d / norms ** beta)
    ingrad = gd / norms ** beta
    k = 2 * alpha * beta / N
    for i in range(maps):
        for j in range(max(0, i - behind), min(maps, i + ahead)):
            ingrad[j] -= gd[i] * k * d[i] * d[j] / norms[i] ** (beta + 1)
    close(lrn.grad.get().reshape(maps), ingrad)


def test_map_lrn_follows_puzzlelibs_formula():
    h = w = 6
    N, alpha, beta, K = 3, 0.5, 0.75, 2.0  # a large alpha, so that the window matters
    x = randn(1, 1, h, w)
    lrn = Modules.MapLRN(N=N, alpha=alpha, beta=beta, K=K)
    y, g = forward_backward(lrn, x)
    d, gd = x[0, 0].astype(np.float64), g[0, 0].astype(np.float64)
    behind, ahead = (N - 1) // 2, N - (N - 1) // 2
    win = lambda i, j: (slice(max(0, i - behind), min(h, i + ahead)), slice(max(0, j - behind), min(w, j + ahead)))
    norms = np.array([[K + alpha / N ** 2 * (d[win(i, j)] ** 2).sum() for j in range(w)] for i in range(h)])
    close(y.get()[0, 0], d / norms ** beta, atol=1e-5)
    k = 2 * alpha * beta / N ** 2
    ingrad = gd / norms ** beta
    for i in range(h):
        for j in range(w):
            rows, cols = win(i, j)
            for m in range(rows.start, rows.stop):
                for n in range(cols.start, cols.stop):
                    ingrad[i, j] -= k * gd[m, n] * d[i, j] * d[m, n] / norms[m, n] ** (beta + 1)
    close(lrn.grad.get()[0, 0], ingrad, atol=1e-5)


def test_depth_concat_to_list_cast_and_noise_in_eval_mode():
    a, b = randn(2, 3, 4, 4), randn(2, 2, 2, 2)
    y = Modules.DepthConcat()([a, b]).get()
    assert y.shape == (2, 5, 4, 4)
    close(y[:, :3], a)
    close(y[:, 3:, 1:3, 1:3], b)  # the smaller maps centred, zeros around
    assert np.all(y[:, 3:, 0] == 0)
    outs = Modules.ToList()([a, b])
    close(outs[1], b)
    z = Modules.Cast(intype="float32", outtype="int32")(np.array([[1.7, -2.2]], np.float32))
    assert z.dtype == "int32"
    # PuzzleLib's own check: float16 data to float32, the gradient back to float16
    half, grad = randn(5, 4, 8).astype(np.float16), randn(5, 4, 8)
    cast = Modules.Cast(half.dtype, grad.dtype)
    cast(gpuarray.to_gpu(half))
    assert cast.data.get().dtype == np.float32
    close(cast.data.get(), half.astype(np.float32))
    cast.backward(gpuarray.to_gpu(grad))
    assert cast.grad.get().dtype == np.float16
    np.testing.assert_array_equal(cast.grad.get(), grad.astype(np.float16))
    noise = Modules.NoiseInjector(mode="add", noisetype="gaussian", params=(0.0, 1.0))
    noise.evalMode()
    close(noise(a), a)


# ---- the rest of the catalogue ------------------------------------------------------------------

def test_subtract_mean_takes_each_windows_mean_away():
    x = randn(2, 3, 6, 7)
    y, g = forward_backward(Modules.SubtractMean(size=3), x)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    mean = sum(padded[:, :, i:i + 6, j:j + 7] for i in range(3) for j in range(3)) / 9  # zeros outside, / size^2
    close(y, x - mean)


def test_avgpool3d_deconv1d_deconv3d_and_batchnorm3d():
    x = randn(2, 3, 4, 4, 6)
    y = Modules.AvgPool3D()(x).get()  # size 2, stride 2
    close(y, x.reshape(2, 3, 2, 2, 2, 2, 3, 2).mean(axis=(3, 5, 7)))
    # a deconvolution is the adjoint of the convolution with the same weights: <deconv(a), b> = <a, conv(b)>
    for nd, make, conv in ((1, Modules.Deconv1D, Modules.Conv1D), (3, Modules.Deconv3D, Modules.Conv3D)):
        deconv = make(3, 2, 3, stride=2, pad=1, useBias=False)
        a = randn(2, 3, *(4,) * nd)
        ya = deconv(a).get()
        b = randn(*ya.shape)
        fwd = conv(2, 3, 3, stride=2, pad=1, useBias=False)
        fwd.setVar("W", deconv.W.get())  # (3, 2, ...): the deconvolution's (in, out) is the convolution's (out, in)
        assert np.isclose((ya * b).sum(), (a * fwd(b).get()).sum(), rtol=1e-4)
    bn = Modules.BatchNorm3D(3)
    y = bn(x).get()
    mean, var = x.mean(axis=(0, 2, 3, 4), keepdims=True), x.var(axis=(0, 2, 3, 4), keepdims=True)
    close(y, (x - mean) / np.sqrt(var + 1e-5) * bn.scale.get() + bn.bias.get(), atol=1e-4)
    assert bn.scale.shape == (1, 3, 1, 1, 1)


def test_spatial_tf_samples_on_the_transforms_grid():
    x = randn(2, 1, 4, 5)
    identity = np.tile(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], np.float32), (2, 1, 1))
    tf = Modules.SpatialTf()
    close(tf([x, identity]), x)
    mirror = np.tile(np.array([[-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], np.float32), (2, 1, 1))
    close(tf([x, mirror]), x[:, :, :, ::-1])  # x_s = -x_t: the corner centres swap
    half = Modules.SpatialTf(shape=(1, 2, 3))
    y = half([x, identity]).get()
    assert y.shape == (2, 1, 2, 3)
    close(y[:, :, :, [0, -1]][:, :, [0, -1]], x[:, :, [0, -1]][:, :, :, [0, -1]])  # the grid's corners
    with pytest.raises(Modules.ModuleError, match="C must be 1"):
        Modules.SpatialTf(shape=(3, 2, 3))([x, identity])


def test_glue_runs_puzzlelibs_hooks_with_the_namespaces_modules():
    d1, d2, d3 = randn(10, 2, 3, 3), randn(10, 2, 3, 3), randn(10, 10)

    def fwdGlue(data, modules):
        a, b, c = data
        out1, out2 = modules["split"](c)
        return [a + b, out1, out2]

    def bwdGlue(grad, modules):
        g1, g2, g3 = grad
        modules["split"].backward([g2, g3])
        return [g1, g1, modules["split"].grad]

    glue = Modules.Glue(fwdGlue=fwdGlue, bwdGlue=bwdGlue, modules={"split": Modules.Split(axis=1, sections=(5, 5))},
                        fwdShapeGlue=lambda shapes: [shapes[0], (shapes[2][0], 5), (shapes[2][0], 5)])
    out = glue([gpuarray.to_gpu(d) for d in (d1, d2, d3)])
    close(out[0], d1 + d2)
    close(out[1], d3[:, :5])
    close(out[2], d3[:, 5:])
    assert glue.dataShapeFrom([d1.shape, d2.shape, d3.shape]) == [d1.shape, (10, 5), (10, 5)]
    g = [randn(*o.shape) for o in out]
    glue.backward([gpuarray.to_gpu(v) for v in g])
    close(glue.grad[0], g[0])
    close(glue.grad[2], np.concatenate([g[1], g[2]], axis=1))
    with pytest.raises(Modules.ModuleError, match="bwdShapeGlue"):
        glue.gradShapeFrom([(10, 2, 3, 3)])
    with pytest.raises(Modules.ModuleError, match="cannot join a Tessera container"):
        Containers.Sequential().append(glue)


def test_ctc_of_probabilities_and_of_logits():
    torch = pytest.importorskip("torch")
    # PuzzleLib's small check: with probabilities, exp(-error) is the one path's probability.
    probs = np.array([[[0.1, 0.6, 0.1, 0.1, 0.1]], [[0.1, 0.1, 0.6, 0.1, 0.1]]], np.float32)
    ctc = Cost.CTC(blank=4, vocabsize=5, normalized=True)
    error, grad = ctc([gpuarray.to_gpu(probs), np.array([2], np.int32)], [np.array([1, 2], np.int32),
                                                                           np.array([2], np.int32)])
    assert np.isclose(np.exp(-error), 0.6 * 0.6, rtol=1e-5)
    # its gradient: the derivative with respect to the probabilities, -1/p on the path (descent sign)
    ref = np.zeros_like(probs)
    ref[0, 0, 1], ref[1, 0, 2] = 1 / 0.6, 1 / 0.6
    close(grad, ref, atol=1e-4)
    # logits: PyTorch's ctc_loss on their log-softmax, averaged over the batch
    T, N, V = 12, 3, 6
    rng = np.random.default_rng(3)
    x = rng.standard_normal((T, N, V)).astype(np.float32)
    datalen = np.array([12, 10, 11], np.int32)
    lengths = np.array([3, 4, 2], np.int32)
    labels = rng.integers(1, V, lengths.sum()).astype(np.int32)
    ctc = Cost.CTC(blank=0, vocabsize=V)
    error, grad = ctc([x, datalen], [labels, lengths])
    xt = torch.tensor(x, requires_grad=True)
    loss = torch.nn.functional.ctc_loss(torch.log_softmax(xt, 2), torch.tensor(labels, dtype=torch.long),
                                        torch.tensor(datalen, dtype=torch.long),
                                        torch.tensor(lengths, dtype=torch.long), blank=0, reduction="sum") / N
    loss.backward()
    assert np.isclose(error, loss.item(), rtol=1e-5)
    close(grad, -xt.grad.numpy(), atol=1e-5)
    with pytest.raises(Cost.CostError, match="lengths sum to 9, got 8 labels"):
        ctc([x, datalen], [labels[:-1], lengths])
