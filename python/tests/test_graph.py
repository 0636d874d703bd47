"""Graph-style building as in PuzzleLib: nodes, slots, fwds/bwds, whole-graph checks."""

import numpy as np
import pytest

import tessera as ts


def branchy():
    ts.manualSeed(2)
    x = ts.Identity(name="x").node()
    split = ts.Split(1, [3, 5], name="split").node(x)
    a = ts.Linear(3, 4, name="a").node((split, 0))
    b = ts.Linear(5, 4, name="b").node((split, 1))
    s = ts.Add(name="sum").node(a, b)
    return x, split, a, b, s, ts.Graph(inputs=x, outputs=s, name="g")


def test_graph_forward_backward_against_numpy():
    x, split, a, b, s, net = branchy()
    assert net.dataShapeFrom((2, 8)) == (2, 4)
    xin = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    Wa, ba = (net["a"].namedParams()[k].data.numpy() for k in ("W", "b"))
    Wb, bb = (net["b"].namedParams()[k].data.numpy() for k in ("W", "b"))
    y = net(xin).numpy()
    np.testing.assert_allclose(y, xin[:, :3] @ Wa + ba + xin[:, 3:] @ Wb + bb, rtol=1e-5, atol=1e-5)
    g = net.backward(np.ones((2, 4), np.float32)).numpy()
    ref = np.concatenate([np.ones((2, 4)) @ Wa.T, np.ones((2, 4)) @ Wb.T], axis=1)
    np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(net["a"].namedParams()["W"].grad.numpy(), xin[:, :3].T @ np.ones((2, 4)), rtol=1e-5)
    assert net.numOfParams() == 3 * 4 + 4 + 5 * 4 + 4


def test_fwds_bwds_and_names():
    x, split, a, b, s, net = branchy()
    assert [(n.name, slots) for n, slots in split.fwds] == [("a", [0]), ("b", [1])]
    assert [(n.name, slots) for n, slots in a.bwds] == [("split", [0])]
    assert [n.name for n, _ in s.bwds] == ["a", "b"]
    assert [n.name for n in net.nodes()] == ["x", "split", "a", "b", "sum"]
    assert net.getNodeByName("b").module.name == "b"
    assert net["a"].name == "a" and len(net) == 5
    assert [m.name for m in net] == ["x", "split", "a", "b", "sum"]


def test_node_forward_walks_the_descendants():
    x, split, a, b, s, net = branchy()
    xin = np.ones((3, 8), np.float32)
    x.forward(xin)
    np.testing.assert_allclose(s.data.numpy(), net(xin).numpy(), rtol=1e-6)


def test_node_constructor_and_sequential_in_a_graph():
    inp = ts.Node(ts.Identity(), name="in")
    body = ts.Sequential(name="body").append(ts.Linear(4, 6)).append(ts.Activation(ts.relu))
    out = ts.Node(body, parents=inp, name="out")
    net = ts.Graph(inputs=[inp], outputs=[out])
    assert net.dataShapeFrom([(5, 4)]) == [(5, 6)]
    assert net["out"]["0"].classname == "Linear"  # a Sequential numbers unnamed children
    assert net["out.1"].classname == "Activation"


def test_graph_errors_name_the_nodes():
    x = ts.Identity(name="x").node()
    a = ts.Linear(4, 4, name="a").node(x)
    with pytest.raises(ts.GraphError, match="a"):
        x.addBackwards(a)  # a cycle
    split = ts.Split(1, [2, 2], name="split").node(x)
    with pytest.raises(ts.GraphError, match="slot"):
        ts.Linear(2, 2).node((split, 5))
    dup = ts.Linear(4, 4, name="a").node(x)
    with pytest.raises(ts.GraphError, match="'a'"):
        ts.Graph(inputs=x, outputs=[a, dup])
    with pytest.raises(TypeError, match="a parent is a Node"):
        ts.Linear(2, 2).node("x")


def test_shape_errors_carry_the_path():
    x = ts.Identity(name="x").node()
    h = ts.Linear(784, 10, name="fc").node(x)
    net = ts.Graph(inputs=x, outputs=h)
    with pytest.raises(ts.ShapeError, match=r"x -> fc: Linear 'fc': expects input \[\.\.\., 784\], got \[64, 700\]"):
        net.dataShapeFrom((64, 700))
    seq = ts.Sequential("mlp").append(ts.Linear(8, 4, name="fc1")).append(ts.Linear(5, 2, name="fc2"))
    with pytest.raises(ts.ShapeError, match="fc1 -> fc2"):
        seq.dataShapeFrom((1, 8))


def _conv_bn_graph(channels, residual):
    """x -> conv -> bn -> relu, or with residual x -> conv -> bn -> (+ x) -> relu; the batch
    norm's bias spread, so that the ReLU cuts."""
    x = ts.Identity(name="x").node()
    conv = ts.Conv2D(channels[0], channels[1], 3, pad=1, name="conv").node(x)
    h = ts.BatchNorm2D(channels[1], name="bn").node(conv)
    if residual:
        h = ts.Add(name="add").node(h, x)
    net = ts.Graph(inputs=x, outputs=ts.Activation("relu", name="relu").node(h))
    net["bn"].namedParams()["bias"].data.numpy()[:] = np.linspace(-0.5, 0.5, channels[1], dtype=np.float32)
    return net


def _fused_and_unfused(net, xin, dy, during=lambda on: None):
    """The output, input gradient, conv weight gradient and running mean of a training step
    with fusion on, then off; `during(on)` runs between the forward and the backward."""
    results = []
    try:
        for on in (True, False):
            ts.setFusion(on)
            assert ts.fusionEnabled() == on
            y = net(xin).numpy().copy()
            during(on)
            dx = net.backward(dy).numpy().copy()
            dw = net["conv"].namedParams()["W"].grad.numpy().copy()
            results.append((y, dx, dw, net["bn"].namedAttrs()["mean"].numpy().copy()))
    finally:
        ts.setFusion(True)
    assert (results[1][0] == 0).any()  # the ReLU cut something
    return results


def test_batch_norm_relu_fusion_gives_the_unfused_results():
    ts.manualSeed(4)
    net = _conv_bn_graph((3, 6), residual=False)
    rng = np.random.default_rng(1)
    xin = rng.standard_normal((4, 3, 5, 5)).astype(np.float32)
    dy = rng.standard_normal((4, 6, 5, 5)).astype(np.float32)
    fused, plain = _fused_and_unfused(net, xin, dy)
    for a, b in zip(fused, plain):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_batch_norm_before_a_sum_runs_inside_it_with_the_unfused_results():
    """A residual block's last batch norm leaves its normalisation to the sum: its output is
    its input (no memory of its own), and the results are the unfused ones, bit for bit."""
    ts.manualSeed(5)
    net = _conv_bn_graph((4, 4), residual=True)
    rng = np.random.default_rng(2)
    xin = rng.standard_normal((3, 4, 5, 5)).astype(np.float32)
    dy = rng.standard_normal((3, 4, 5, 5)).astype(np.float32)

    def shares(on):
        assert net["bn"].data.sharesMemory(net["conv"].data) == on

    fused, plain = _fused_and_unfused(net, xin, dy, shares)
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)


def test_children_come_back_as_their_layer_classes(tmp_path):
    """Modules the C++ side made (a zoo model, a loaded file, a graph's nodes) come back as
    their layer classes, and they are the model's own modules, not copies."""
    net = ts.loadZooModel("lenet")
    assert [type(m).__name__ for m in net] == [m.classname for m in net]
    conv = net[0]
    assert isinstance(conv, ts.Conv2D) and isinstance(conv, ts.Module)
    assert repr(conv).startswith("tessera.Conv2D(name='conv1', inmaps=1, outmaps=16")
    assert isinstance(net.getByName("conv1"), ts.Conv2D)
    assert [type(m) for m in net.children()] == [type(m) for m in net]
    # the same module: a change through the child shows in the model
    conv.namedParams()["W"].data = np.full((16, 1, 3, 3), 0.5, np.float32)
    assert (net.namedParams()["conv1.W"].data.numpy() == 0.5).all()

    x = ts.Identity().node(name="x")
    h = ts.Linear(4, 2, name="fc").node(x)
    g = ts.Graph(inputs=x, outputs=h)
    assert isinstance(g.getNodeByName("fc").module, ts.Linear)
    assert isinstance(g["fc"], ts.Linear)

    path = str(tmp_path / "fc.h5")
    g["fc"].save(path)
    loaded = ts.load(path)
    assert isinstance(loaded, ts.Linear)
    np.testing.assert_array_equal(loaded.namedParams()["W"].data.numpy(), g["fc"].namedParams()["W"].data.numpy())
    # containers keep their own classes
    assert type(ts.loadZooModel("resnet18-cifar")) is ts.Graph


def test_a_new_head_on_an_inner_node_checks_although_the_old_head_still_hangs_there():
    # The natural head swap: a new Linear on the old model's inner node, a new Graph from
    # the same input. The inner node also feeds the old head, outside the new graph; the
    # check passes over it instead of failing with a raw standard-library range error.
    ts.manualSeed(4)
    x = ts.Identity(name="x").node()
    body = ts.Activation(ts.relu, name="body").node(ts.Linear(8, 6, name="features").node(x))
    old = ts.Linear(6, 10, name="old_head").node(body)
    ts.Graph(inputs=x, outputs=old, name="old")
    new = ts.Linear(6, 3, name="new_head").node(body)
    net = ts.Graph(inputs=x, outputs=new, name="swapped")
    result = ts.check(net, (5, 8))
    assert result.outputs == [(5, 3)]
    xin = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    assert net(xin).shape == (5, 3)
    assert net.backward(np.ones((5, 3), np.float32)).shape == (5, 8)


def test_zoo_models_take_a_number_of_classes():
    """loadZooModel(name, classes) builds the head for that many classes; gpt-mini has none."""
    assert ts.loadZooModel("lenet", classes=3).dataShapeFrom((2, 1, 28, 28)) == (2, 3)
    assert ts.loadZooModel("resnet18-cifar", classes=7).dataShapeFrom((1, 3, 32, 32)) == (1, 7)
    assert ts.loadZooModel("vit-tiny", classes=4).dataShapeFrom((1, 1, 28, 28)) == (1, 4)
    assert ts.loadZooModel("lenet").dataShapeFrom((2, 1, 28, 28)) == (2, 10)
    with pytest.raises(ts.ModuleError, match="gpt-mini scores its 128 byte values"):
        ts.loadZooModel("gpt-mini", classes=3)


def test_head_swap_with_replace():
    """A zoo model's last layer replaced for 3 classes, in a Sequential and in a Graph."""
    ts.manualSeed(1)
    lenet = ts.loadZooModel("lenet")
    old = lenet.replace("fc2", ts.Linear(1024, 3))
    assert old.classname == "Linear"
    assert lenet(np.zeros((2, 1, 28, 28), np.float32)).shape == (2, 3)
    resnet = ts.loadZooModel("resnet18-cifar")
    resnet.replace("fc", ts.Linear(512, 3))
    assert resnet.dataShapeFrom((1, 3, 32, 32)) == (1, 3)
    with pytest.raises(ts.ContainerError, match="no child named 'head'"):
        lenet.replace("head", ts.Linear(1024, 3))


def test_sequential_slices_share_modules_and_getbyname_searches_below():
    seq = ts.Sequential()
    seq.append(ts.Linear(4, 3, name="fc1"))
    seq.append(ts.Activation("relu"))
    inner = ts.Sequential(name="head")
    inner.append(ts.Linear(3, 2, name="fc2"))
    seq.append(inner)
    part = seq[:2]
    assert isinstance(part, ts.Sequential) and len(part) == 2
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    W, b = seq["fc1"].getVar("W").data.numpy(), seq["fc1"].getVar("b").data.numpy()
    np.testing.assert_allclose(part(x).numpy(), np.maximum(x @ W + b, 0), rtol=1e-5, atol=1e-6)
    assert part[0].getVar("W").data.sharesMemory(seq[0].getVar("W").data)  # the same module
    assert len(seq[::2]) == 2 and isinstance(ts.Parallel()[:0], ts.Parallel)
    assert seq.getByName("fc2").classname == "Linear"  # found in the container below
    assert seq.getByName("head.fc2").getVar("W").data.sharesMemory(seq.getByName("fc2").getVar("W").data)
    with pytest.raises(ts.ContainerError, match="no child named 'nope'"):
        seq.getByName("nope")
    a = ts.Identity().node()
    g = ts.Graph(inputs=a, outputs=ts.Linear(2, 2).node(a))
    with pytest.raises(ts.ContainerError, match="only a Sequential or a Parallel is sliced"):
        g[:1]


def test_containers_print_their_layers():
    x = ts.Identity(name="x").node()
    a = ts.Linear(4, 3, name="a").node(x)
    blk = ts.Sequential("blk").append(ts.Linear(3, 3)).append(ts.Activation("relu")).node(a)
    text = repr(ts.Graph(inputs=x, outputs=blk))
    assert text.splitlines() == [
        "tessera.Graph() (",
        "  (x): tessera.Identity(name='x')  <- input",
        "  (a): tessera.Linear(name='a', insize=4, outsize=3, wscale=1, useBias=True, initscheme='xavier')  <- x",
        "  (blk): tessera.Sequential('blk') (",
        "    (0): tessera.Linear(insize=3, outsize=3, wscale=1, useBias=True, initscheme='xavier')",
        "    (1): tessera.Activation(activation='relu')",
        "  )  <- a",
        ")"], text
    assert repr(ts.Sequential()) == "tessera.Sequential()"


def test_graphs_draw_themselves_in_notebooks():
    import shutil
    x = ts.Identity(name="x").node()
    a = ts.Linear(4, 3, name="a").node(x)
    r = ts.Activation("tanh", name="r").node(a)
    g = ts.Graph(inputs=x, outputs=r)
    dot = g.dot()
    assert '"x" [label="x\\nIdentity", shape=ellipse' in dot and '"x" -> "a";' in dot and '"a" -> "r";' in dot
    assert 'label="r\\nActivation (tanh)", style="rounded,filled"' in dot
    svg = g._repr_svg_()
    if shutil.which("dot"):
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    else:
        assert svg is None


def test_backward_releases_the_values_it_used_unless_told_to_keep_them():
    x = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    net = ts.Sequential().append(ts.Linear(3, 5, name="fc1")).append(ts.Activation("relu")) \
        .append(ts.Linear(5, 2, name="fc2"))
    assert net.releaseInBackward  # the default: a training step holds less
    net(x)
    net.backward(np.ones((4, 2), np.float32))
    with pytest.raises(ts.ModuleError, match="a second backward after one forward"):
        net.backward(np.ones((4, 2), np.float32))
    net.releaseInBackward = False  # PuzzleLib's way: the values stay readable
    net(x)
    net.backward(np.ones((4, 2), np.float32))
    assert net["fc1"].data.shape == (4, 5)
    net.backward(np.ones((4, 2), np.float32))  # and a second backward adds to the gradients


def test_inputs_passed_one_by_one_are_a_list():
    x, y = ts.Identity(name="x").node(), ts.Identity(name="y").node()
    net = ts.Graph(inputs=[x, y], outputs=ts.Sub(name="diff").node(x, y))
    a, b = np.full((2, 3), 5, np.float32), np.full((2, 3), 2, np.float32)
    out = net(a, b)
    assert isinstance(out, list) and len(out) == 1
    np.testing.assert_array_equal(out[0].numpy(), a - b)
    np.testing.assert_array_equal(net([a, b])[0].numpy(), a - b)
    with pytest.raises(ts.ShapeError, match="expects 2 input tensors, got 3"):
        net(a, b, b)
    with pytest.raises(TypeError, match="called with no input"):
        net()
