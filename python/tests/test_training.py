"""Training from Python: a hand-written LeNet loop, the Trainer with Python callbacks,
model files, and the GIL released while C++ works."""

import signal
import threading
import time

import numpy as np
import pytest

import tessera as ts


@pytest.fixture(scope="module")
def fashion():
    try:
        train = ts.loadMnist(split="train")
        test = ts.loadMnist(split="t10k")
    except ts.IoError as e:
        pytest.skip(f"Fashion-MNIST is not installed (tools/setup.sh installs it): {e}")
    return train, test


def test_lenet_python_loop_one_epoch(fashion):
    """Forward, cost, backward and update called from Python, batch by batch: one epoch
    reaches 85% test accuracy and the loss drops."""
    (images, labels), (timages, tlabels) = fashion
    ts.manualSeed(1)
    net = ts.loadZooModel("lenet")
    cost = ts.CrossEntropy()
    opt = ts.Adam(alpha=1e-3)
    opt.setupOn(net, useGlobalState=True)
    x, y = images.numpy(), labels.numpy()
    order = np.random.default_rng(1).permutation(len(x))
    batch = 64
    errors = []
    net.trainMode()
    for i in range(0, len(x) - batch + 1, batch):
        idx = order[i:i + batch]
        out = net(x[idx])
        error, grad = cost(out, y[idx])
        opt.zeroGradParams()
        net.backward(grad)
        opt.update()
        errors.append(error)
    assert np.mean(errors[-50:]) < 0.5 * np.mean(errors[:50])
    net.evalMode()
    accuracy = 1 - ts.Validator(net, cost, batchsize=500).validate(timages, tlabels)
    assert accuracy >= 0.85, accuracy
    # the per-epoch validation by hand agrees with the Validator
    scores = ts.Calculator(net, batchsize=1000).calc(timages).numpy()
    assert abs((scores.argmax(1) == tlabels.numpy()).mean() - accuracy) < 1e-9


def test_trainer_with_python_callbacks(fashion):
    (images, labels), _ = fashion
    x, y = images.numpy()[:4096], labels.numpy()[:4096]
    ts.manualSeed(2)
    net = ts.loadZooModel("lenet")
    opt = ts.MomentumSGD(learnRate=0.02)
    opt.setupOn(net, useGlobalState=True)
    trainer = ts.Trainer(net, ts.CrossEntropy(), opt, batchsize=128, progress=False)
    seen, epochs = [], []
    trainer.onBatchFinish = lambda info: seen.append((info.epoch, info.batch, info.error))
    trainer.onEpochFinish = lambda info: epochs.append(info.meanError)
    sched = ts.StepSchedule(0.02, 1, 0.5)
    for epoch in range(3):
        opt.learnRate = sched.at(epoch)
        trainer.train(x, y)
    assert [b for e, b, _ in seen if e == 0] == list(range(32))
    assert len(epochs) == 3 and epochs[2] < epochs[0]
    assert opt.learnRate == pytest.approx(0.005)

    def stop_at_3(info):
        if info.batch == 3:
            trainer.requestStop()
    trainer.onBatchFinish = stop_at_3
    steps = opt.steps
    trainer.train(x, y)
    assert opt.steps == steps + 4 and trainer.stopRequested and trainer.position == (3, 4)
    trainer.clearStop()
    trainer.onBatchFinish = None
    trainer.train(x, y)  # the rest of the epoch
    assert opt.steps == steps + 32 and trainer.position == (4, 0)

    def fail(info):
        raise ValueError("from the callback")
    failing = ts.Trainer(net, ts.CrossEntropy(), opt, progress=False)
    failing.onBatchFinish = fail
    with pytest.raises(ValueError, match="from the callback"):
        failing.train(x, y)


def test_ctrl_c_stops_the_trainer_after_a_batch(fashion):
    """SIGINT while the epoch runs in C++ (the GIL released, no Python callback) ends it
    after the batch in progress with KeyboardInterrupt, not at the end of the epoch."""
    (images, labels), _ = fashion
    x, y = images.numpy(), labels.numpy()  # 7,500 batches of 8: seconds, were it not stopped
    net = ts.loadZooModel("lenet")
    opt = ts.SGD(learnRate=0.01)
    opt.setupOn(net, useGlobalState=True)
    trainer = ts.Trainer(net, ts.CrossEntropy(), opt, batchsize=8, progress=False)
    main = threading.main_thread().ident
    timer = threading.Timer(0.2, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            trainer.train(x, y)
    finally:
        timer.cancel()
    assert 0 < opt.steps < 7500


def test_save_and_load_hdf5_and_onnx(tmp_path):
    ts.manualSeed(3)
    net = ts.loadZooModel("lenet")
    net.evalMode()
    x = ts.rand((4, 1, 28, 28))
    ref = net(x).numpy().copy()

    h5 = str(tmp_path / "lenet.h5")
    net.save(h5)
    again = ts.load(h5)  # rebuilt from the file's blueprint
    again.evalMode()
    np.testing.assert_array_equal(again(x).numpy(), ref)
    fresh = ts.loadZooModel("lenet")
    fresh.load(h5)
    fresh.evalMode()
    np.testing.assert_array_equal(fresh(x).numpy(), ref)
    with pytest.raises(ts.IoError, match="lenet.h5"):
        ts.Sequential().append(ts.Linear(3, 3)).load(h5)

    onnx = str(tmp_path / "lenet.onnx")
    ts.exportOnnx(net, (1, 1, 28, 28), onnx)
    imported = ts.importOnnx(onnx)
    assert isinstance(imported, ts.Graph)
    imported.evalMode()
    np.testing.assert_allclose(imported(x).numpy(), ref, rtol=1e-4, atol=1e-4)


def test_imported_attention_is_one_layer_unless_asked_otherwise(tmp_path):
    ts.manualSeed(4)
    net = ts.Sequential().append(ts.MultiheadAttention(8, 2, causal=True))
    path = str(tmp_path / "attention.onnx")
    ts.exportOnnx(net, (2, 5, 8), path)
    fused, separate = ts.importOnnx(path), ts.importOnnx(path, attention=False)
    names = [sorted(type(c).__name__ for c in m.children()) for m in (fused, separate)]
    assert names[0].count("ScaledDotProductAttention") == 1 and "SoftMax" not in names[0]
    assert "ScaledDotProductAttention" not in names[1] and names[1].count("SoftMax") == 1
    x = ts.rand((2, 5, 8))
    dy = ts.rand((2, 5, 8))
    net.trainMode()
    want, dx = net(x).numpy().copy(), net.backward(dy).numpy().copy()
    for m in (fused, separate):
        m.trainMode()
        np.testing.assert_allclose(m(x).numpy(), want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(m.backward(dy).numpy(), dx, rtol=1e-4, atol=1e-5)


def test_import_stops_past_the_fold_limit(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    one = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["ones"], name="fill", value=one),
             helper.make_node("ReduceSum", ["ones"], ["total"], name="total", keepdims=0),
             helper.make_node("Add", ["x", "total"], ["y"], name="add")]
    g = helper.make_graph(nodes, "folds", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor("shape", TensorProto.INT64, [2], [16, 16])])
    path = str(tmp_path / "folds.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    x = ts.rand((2, 3))
    np.testing.assert_allclose(ts.importOnnx(path)(x).numpy(), x.numpy() + 256.0)
    # the fill counts 2 + 256 values, the sum 256 + 1
    np.testing.assert_allclose(ts.importOnnx(path, foldLimit=515)(x).numpy(), x.numpy() + 256.0)
    with pytest.raises(ts.IoError, match=r"'total' \(ReduceSum\): computations on constants of over 514 values"):
        ts.importOnnx(path, foldLimit=514)


def test_import_gives_named_free_dims_their_sizes(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    # ids [batch, seq] -> a token table's rows: the table needs the length, which the file leaves free
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    g = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"], name="embed")], "free",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
                          [helper.make_tensor("table", TensorProto.FLOAT, [10, 4], table.flatten())])
    path = str(tmp_path / "free.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    with pytest.raises(ts.IoError, match=r"the inputs' dims 'seq' have no size in the file"):
        ts.importOnnx(path)
    net = ts.importOnnx(path, dims={"seq": 3})
    ids = np.array([[1, 2, 3], [9, 0, 4]], np.int32)
    np.testing.assert_array_equal(net(ts.Tensor(ids)).numpy(), table[ids])
    with pytest.raises(ts.IoError, match=r"names 'length', which no input's dim is named \(they name batch, seq\)"):
        ts.importOnnx(path, dims={"length": 3})

def test_check_and_summary():
    net = ts.loadZooModel("resnet18")
    r = ts.check(net, input=(1, 3, 224, 224))
    assert r.outputs == [(1, 1000)] and r.params == 11689512
    assert ts.check(net, "2x3x64x64").outputs == [(2, 1000)]
    with pytest.raises(ts.ShapeError, match=r"stem_conv: Conv2D 'stem_conv': expects input \[N, 3, H, W\]"):
        ts.check(net, input=(1, 4, 224, 224))
    rows = ts.summary(net, input=(1, 3, 224, 224))
    assert sum(r.trainable for r in rows) == 11689512
    assert rows[0].outputs and rows[-1].outputs == [(1, 1000)]
    assert "11,689,512" in str(rows)
    assert "<table>" in rows._repr_html_()
    grouped = ts.summary(net, input=(1, 3, 224, 224), depth=1)
    assert len(grouped) < len(rows) and grouped.trainable == rows.trainable
    assert "digraph" in rows.dot("resnet18")


def test_gil_is_released_during_forward_backward_and_update():
    """While one thread is inside a long forward (backward, update), another Python thread
    keeps running: it could not if the call held the GIL."""
    ts.manualSeed(4)
    net = ts.Sequential().append(ts.Linear(2048, 2048)).append(ts.Linear(2048, 2048))
    opt = ts.SGD(learnRate=1e-6)
    opt.setupOn(net)
    x = ts.randn((512, 2048))
    net(x)  # warm-up
    net.backward(ts.randn((512, 2048)))

    def calls():
        for _ in range(3):
            net(x)
            net.backward(ts.randn((512, 2048)))
            opt.update()
            net.updateParams(1e-6)

    for work in (calls,):
        started, done = threading.Event(), threading.Event()

        def run():
            started.set()
            work()
            done.set()
        t = threading.Thread(target=run)
        t.start()
        started.wait()
        t0 = time.perf_counter()
        ticks = 0
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)
        elapsed = time.perf_counter() - t0
        t.join()
        # with the GIL held the loop would advance once per call at most (about 12)
        assert elapsed > 0.05
        assert ticks > 0.3 * elapsed / 0.0011, (ticks, elapsed)


def test_models_of_the_same_shapes_run_in_two_threads_at_once():
    """Each thread with its own model (docs/python.md): two LeNets stepping at the same time
    in two threads give exactly what each gives alone."""
    from concurrent.futures import ThreadPoolExecutor

    ts.manualSeed(6)
    first = ts.loadZooModel("lenet")
    nets = [first, first.copy()]  # the same weights, nothing shared
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal((8, 1, 28, 28)).astype(np.float32) for _ in range(2)]
    dys = [rng.standard_normal((8, 10)).astype(np.float32) for _ in range(2)]

    def step(i):
        net = nets[i]
        net.zeroGradParams()
        y = net(xs[i]).numpy()
        dx = net.backward(dys[i]).numpy()
        return [y, dx] + [v.grad.numpy() for v in net.namedParams().values()]

    alone = [step(0), step(1)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(10):
            together = list(pool.map(step, [0, 1]))  # one step of each model, at the same time
            for i, got in enumerate(together):
                for a, b in zip(alone[i], got):
                    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_copies_share_nothing_and_compute_the_same():
    """Module.copy() and copy.deepcopy: the same outputs in train and eval mode (batch norm's
    statistics, dropout's stream, compute types copied), and nothing shared."""
    import copy

    ts.manualSeed(9)
    net = ts.Sequential("net")
    net.append(ts.Conv2D(1, 4, 3, pad=1, name="conv")).append(ts.BatchNorm2D(4, name="bn"))
    net.append(ts.Activation(ts.relu)).append(ts.Dropout(0.3, name="drop"))
    net.append(ts.Flatten()).append(ts.Linear(4 * 6 * 6, 3, name="fc"))
    x = np.random.default_rng(9).standard_normal((2, 1, 6, 6)).astype(np.float32)
    for _ in range(2):
        net(x)
    net["fc"].calcMode("bfloat16")
    for c in (net.copy(), copy.deepcopy(net)):
        assert type(c) is ts.Sequential and isinstance(c["fc"], ts.Linear)
        assert c["fc"].computeDType == "bfloat16"
    c = net.copy()
    np.testing.assert_array_equal(c(x).numpy(), net(x).numpy())
    net.evalMode()
    c.evalMode()
    np.testing.assert_array_equal(c(x).numpy(), net(x).numpy())
    w = c["conv"].namedParams()["W"].data.numpy().copy()
    net["conv"].namedParams()["W"].data = np.zeros((4, 1, 3, 3), np.float32)
    np.testing.assert_array_equal(c["conv"].namedParams()["W"].data.numpy(), w)
    assert isinstance(copy.deepcopy(net["conv"]), ts.Conv2D)


def test_gradient_clipping_and_filtered_weight_decay():
    ts.manualSeed(1)
    net = ts.Linear(3, 2)
    params = net.namedParams()
    w0, b0 = params["W"].data.numpy(copy=True), params["b"].data.numpy(copy=True)
    opt = ts.SGD(learnRate=0.5)
    opt.setupOn(net)
    opt.setWeightDecay(0.1, applies=lambda name: name == "W")
    opt.gradientClipping = 1.0
    assert opt.gradientClipping == 1.0 and np.isnan(opt.lastGradientNorm)
    gw = np.arange(6, dtype=np.float32).reshape(w0.shape)
    gb = np.array([3.0, -4.0], np.float32)
    params["W"].grad.numpy()[...] = gw  # a view of the gradient
    params["b"].grad.numpy()[...] = gb
    opt.update()
    norm = np.sqrt((gw.astype(np.float64) ** 2).sum() + (gb.astype(np.float64) ** 2).sum())
    assert opt.lastGradientNorm == pytest.approx(norm)
    k = 1.0 / norm  # clipped to norm 1; the decay acts on W alone and is not clipped
    np.testing.assert_allclose(params["W"].data.numpy(), w0 - 0.5 * (k * gw + 0.1 * w0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(params["b"].data.numpy(), b0 - 0.5 * k * gb, rtol=1e-6, atol=1e-7)
    with pytest.raises(ts.ModuleError, match="finite maximum norm"):
        opt.setGradientClipping(-1.0)
    params["W"].grad.numpy()[0, 0] = np.nan
    with pytest.raises(ts.NumericsError, match="global norm is nan"):
        opt.update()


def test_adamw_decays_apart_from_the_gradient():
    net = ts.Linear(2, 1)
    w = net.namedParams()["W"]
    w.data = np.array([[1.0], [-2.0]], np.float32)
    opt = ts.AdamW(alpha=0.1, weightDecay=0.5)
    opt.setupOn(net)
    opt.update()  # zero gradients: only the decay acts, w (1 - alpha decay)
    np.testing.assert_allclose(w.data.numpy(), [[0.95], [-1.9]], rtol=1e-6)
    assert opt.classname == "AdamW"


def test_label_smoothing_matches_pytorch():
    # nn.CrossEntropyLoss(label_smoothing=0.1) gives 0.8031091265562451 here (float64).
    error, grad = ts.CrossEntropy(labelSmoothing=0.1)(np.array([[1, 2, 3], [0, 0, 0]], np.float32),
                                                      np.array([2, 1], np.int32))
    assert error == pytest.approx(0.8031091265562451, abs=1e-6)
    np.testing.assert_allclose(grad.numpy()[1], [0.15, -0.3, 0.15], atol=1e-6)
    with pytest.raises(ts.ModuleError, match=r"labelSmoothing must lie in \[0, 1\)"):
        ts.CrossEntropy(labelSmoothing=1.0)


def test_probability_targets_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    scores = rng.normal(size=(6, 5, 3)).astype(np.float32)
    probs = rng.uniform(size=(6, 5, 3)).astype(np.float32)
    probs /= probs.sum(1, keepdims=True)
    for e in (0.0, 0.2):
        error, grad = ts.CrossEntropy(labelSmoothing=e)(scores, probs)
        s = torch.from_numpy(scores).double().requires_grad_()
        want = torch.nn.functional.cross_entropy(s, torch.from_numpy(probs).double(), label_smoothing=e)
        want.backward()
        assert error == pytest.approx(want.item(), abs=1e-6)
        np.testing.assert_allclose(grad.numpy(), s.grad.numpy(), atol=1e-7)
    with pytest.raises(ts.ShapeError, match="int32 labels or float32 probabilities"):
        ts.CrossEntropy()(scores, probs[:, :4])


def test_mixed_batches_train_a_network():
    """A Loader's mixup/CutMix batches (probabilities as labels) through the Trainer."""
    rng = np.random.default_rng(5)
    labels = np.arange(60, dtype=np.int32) % 3
    images = (rng.uniform(0, 0.3, (60, 3, 8, 8)) + np.eye(3)[labels][:, :, None, None] * 0.6).astype(np.float32)
    data = ts.tensorDataset(images, labels)
    loader = ts.Loader(data, batchsize=10, seed=2, mixup=0.4, cutmix=1.0, classes=4)
    x, y = next(iter(loader.epoch(0)))
    y = y.numpy()
    assert y.dtype == np.float32 and y.shape == (10, 4)
    np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-6)
    ts.manualSeed(1)
    net = ts.Sequential().append(ts.Flatten()).append(ts.Linear(192, 4))
    opt = ts.Adam(alpha=0.01)
    opt.setupOn(net, True)
    trainer = ts.Trainer(net, ts.CrossEntropy(), opt, progress=False)
    losses = [trainer.train(loader) for _ in range(15)]
    assert losses[-1] < 0.8 * losses[0]
    accuracy = 1 - ts.Validator(net, ts.CrossEntropy(), progress=False).validate(
        ts.Loader(data, batchsize=20, shuffle=False, train=False))
    assert accuracy > 0.9


def test_weight_average_swaps_and_checkpoints(tmp_path):
    ts.manualSeed(3)
    net = ts.Linear(3, 2)
    w = net.namedParams()["W"]
    start = w.data.numpy(copy=True)
    opt = ts.SGD(learnRate=0.1)
    opt.setupOn(net, True)
    avg = ts.WeightAverage(net, decay=0.5)
    assert avg.currentDecay == pytest.approx(0.1)  # (1 + 0) / (10 + 0): warming up
    w.grad.numpy()[...] = 1.0
    opt.update()
    avg.update()
    stepped = w.data.numpy(copy=True)
    avg.swap()
    np.testing.assert_allclose(w.data.numpy(), 0.1 * start + 0.9 * stepped, rtol=1e-6)
    avg.swap()
    np.testing.assert_array_equal(w.data.numpy(), stepped)
    trainer = ts.Trainer(net, ts.CrossEntropy(), opt, batchsize=4, progress=False)
    trainer.setWeightAverage(avg)  # updated after each of the trainer's steps from now on
    trainer.train(np.zeros((8, 3), np.float32), np.zeros(8, np.int32))
    assert avg.updates == 1 + 2
    ts.saveCheckpoint(str(tmp_path / "avg.ckpt"), net, opt, trainer, average=avg)
    with pytest.raises(ts.ModuleError, match="saved with a weight average, resumed without one"):
        ts.loadCheckpoint(str(tmp_path / "avg.ckpt"), net, opt, trainer)
    ts.loadCheckpoint(str(tmp_path / "avg.ckpt"), net, opt, trainer, average=avg)
    assert avg.updates == 3


def test_trainer_accumulates_gradients():
    x = np.random.default_rng(1).standard_normal((40, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)

    def run(batchsize, accumulate):
        ts.manualSeed(2)
        net = ts.Linear(6, 2)
        opt = ts.SGD(learnRate=0.5)
        opt.setupOn(net, True)
        updated = []
        trainer = ts.Trainer(net, ts.CrossEntropy(), opt, batchsize=batchsize, accumulate=accumulate,
                             shuffle=False, progress=False)
        trainer.onBatchFinish = lambda info: updated.append(info.updated)
        trainer.train(x, y)
        return net.namedParams()["W"].data.numpy(copy=True), opt.steps, updated

    w4, steps4, updated = run(5, 4)
    w20, steps20, _ = run(20, 1)
    assert steps4 == steps20 == 2 and updated == [False, False, False, True] * 2
    np.testing.assert_allclose(w4, w20, rtol=1e-5, atol=1e-6)


def test_schedules_from_their_text():
    assert ts.parseSchedule("step:2:0.5", 0.1, 10).at(3) == pytest.approx(0.05)
    assert ts.parseSchedule("cosine:0.01", 0.1, 4).at(4) == pytest.approx(0.01)
    assert ts.parseSchedule("exp:0.9", 1.0, 5)(2) == pytest.approx(0.81)
    with pytest.raises(ts.ModuleError, match="expected step:N:G, exp:G, cosine or cosine:MIN"):
        ts.parseSchedule("linear", 0.1, 10)


def test_profile_finds_the_slow_layer():
    # A Python layer that sleeps 30 ms in forward: its row holds that time, the others less.
    def slow_forward(self, inputs):
        time.sleep(0.03)
        return inputs[0]

    ts.registerGlue("py_slow", {"shapes": lambda s: s, "forward": slow_forward, "backward": lambda self, g: g})
    ts.manualSeed(8)
    x = ts.Identity(name="x").node()
    fc1 = ts.Linear(6, 6, name="fc1").node(x)
    slow = ts.Glue("py_slow", name="slow").node(fc1)
    fc2 = ts.Linear(6, 3, name="fc2").node(slow)
    net = ts.Graph(inputs=x, outputs=fc2)
    sgd = ts.SGD(0.01)
    sgd.setupOn(net, True)
    before = net.namedParams()["fc1.W"].data.numpy().copy()
    p = ts.profile(net, np.ones((4, 6), np.float32), steps=2, warmup=1, optimizer=sgd)
    rows = {r.name: r for r in p.rows}
    assert list(rows) == ["x", "fc1", "slow", "fc2"]
    assert rows["slow"].forward >= 0.03
    assert all(rows[n].forward < rows["slow"].forward for n in ("x", "fc1", "fc2"))
    assert rows["fc1"].backward > 0 and rows["fc2"].outputs == [(4, 3)]
    assert p.step >= p.forward >= 0.03 and p.plainStep >= 0.03 and p.update > 0
    assert all(layers <= step for layers, step in zip(p.layerSamples, p.stepSamples))
    assert not np.array_equal(before, net.namedParams()["fc1.W"].data.numpy())  # the updates ran
    assert "slow" in p.table(byTime=True).splitlines()[2]  # the slowest row first
    assert p.csv().startswith("name,module,output,flops,kept_bytes,forward_ms,backward_ms\n")
    # Each layer's forward keeps its output: fc1 [4, 6], fc2 [4, 3]; x and the slow layer pass a view on.
    assert rows["fc1"].kept == 4 * 6 * 4 and rows["x"].kept == 0 and p.kept == 4 * 6 * 4 + 4 * 3 * 4
    inference = ts.profile(net, np.ones((4, 6), np.float32), train=False, steps=1, warmup=0)
    assert not inference.train and all(r.backward == 0 for r in inference.rows)
    with pytest.raises(ts.ModuleError, match="at least 1 timed step"):
        ts.profile(net, np.ones((4, 6), np.float32), steps=0)
    with pytest.raises(ts.ShapeError):
        ts.profile(net, np.ones((4, 5), np.float32))


def test_fit_runs_the_whole_recipe_from_python(tmp_path):
    """tessera.fit: warm-up and a schedule, a weight average, validation with save-best and
    early stopping, the test accuracy per epoch, checkpoints, metrics; a run stopped by a
    callback resumes from its checkpoint to the same weights as a run that was not."""
    try:
        images, labels = ts.loadMnist(split="train", limit=3072)
        timages, tlabels = ts.loadMnist(split="t10k", limit=1000)
    except ts.IoError as e:
        pytest.skip(f"Fashion-MNIST is not installed: {e}")
    train_set, held = ts.holdOut(ts.tensorDataset(images, labels), 512, 3)
    test_set = ts.tensorDataset(timages, tlabels)

    def setup():
        ts.manualSeed(5)
        net = ts.loadZooModel("lenet")
        opt = ts.Adam(alpha=2e-3)
        opt.setupOn(net, useGlobalState=True)
        trainer = ts.Trainer(net, ts.CrossEntropy(), opt, progress=False)
        loaders = (ts.Loader(train_set, batchsize=64, seed=4),
                   ts.Loader(held, batchsize=256, shuffle=False, train=False),
                   ts.Loader(test_set, batchsize=500, shuffle=False, train=False))
        return net, opt, trainer, loaders

    common = dict(epochs=3, warmup=20, schedule=ts.StepSchedule(2e-3, 2, 0.5), ema=0.9, verbose=False)
    net, opt, trainer, (train, valid, test) = setup()
    best, ckpt, metrics = tmp_path / "best.h5", tmp_path / "run.ckpt", tmp_path / "m.csv"
    seen = []
    result = ts.fit(trainer, train, validation=valid, test=test, saveBest=str(best), checkpoint=str(ckpt),
                    metrics=str(metrics), inputs=[[1, 1, 28, 28]], onEpoch=seen.append, **common)
    assert [r.epoch for r in result.epochs] == [1, 2, 3] and [r.epoch for r in seen] == [1, 2, 3]
    losses = [r.loss for r in result.epochs]
    assert losses[-1] < losses[0], losses
    assert result.testAccuracy >= 0.70, result.testAccuracy
    assert 0 < result.bestValidationAccuracy <= 1 and 1 <= result.bestEpoch <= 3
    assert result.epochs[-1].learnRate == pytest.approx(1e-3)  # StepSchedule halved it at epoch 2
    assert result.average is not None and result.average.updates == opt.steps
    assert best.exists() and ckpt.exists() and not result.stopped
    rows = metrics.read_text().splitlines()
    assert rows[0].startswith("epoch,train_loss,validation_accuracy_percent,test_accuracy_percent") and len(rows) == 4
    whole = {k: v.data.numpy().copy() for k, v in net.namedParams().items()}

    # Stopped after batch 30 of epoch 2 by a callback; resumed from its checkpoint.
    net, opt, trainer, (train, valid, test) = setup()

    def batch_done(info):
        if info.epoch == 1 and info.batch == 29:
            trainer.requestStop()
    r1 = ts.fit(trainer, train, validation=valid, test=test, checkpoint=str(ckpt), onBatch=batch_done, **common)
    assert r1.stopped and r1.position == (1, 30), r1.position
    net, opt, trainer, (train, valid, test) = setup()
    r2 = ts.fit(trainer, train, validation=valid, test=test, resume=str(ckpt), **common)
    assert r2.resumed and [r.epoch for r in r2.epochs] == [2, 3]
    for name, v in net.namedParams().items():
        np.testing.assert_array_equal(v.data.numpy(), whole[name], err_msg=name)

    # Contradictory options are refused before any work.
    net, opt, trainer, (train, valid, test) = setup()
    with pytest.raises(ts.ModuleError, match="saveBest"):
        ts.fit(trainer, train, saveBest=str(best), epochs=1, verbose=False)


def test_language_model_on_text(tmp_path):
    """A text corpus as byte ids (every 10th entry held out), next-id windows, gpt-mini trained
    a few steps with cross entropy over its [N, T, V] scores (classesLast), and its sample."""
    (tmp_path / "quotes").write_text("".join(f"quote number {i}\nsaid someone\n%\n" for i in range(20)))
    (tmp_path / "index.dat").write_bytes(b"\0\1binary")
    corpus = ts.readTextCorpus(str(tmp_path))
    assert (corpus.files, corpus.entries) == (1, 20)
    held = bytes(corpus.heldOut.astype(np.uint8)).decode()
    assert held == "quote number 9\nsaid someone\n\nquote number 19\nsaid someone\n"
    assert corpus.train.dtype == np.int32 and "quote number 0\n" in bytes(corpus.train.astype(np.uint8)).decode()
    x, y = ts.nextIdWindows(corpus.train, 64)
    assert x.shape == y.shape == ((len(corpus.train) - 1) // 64, 64)
    assert (x.numpy()[0, 1:] == y.numpy()[0, :-1]).all()
    ts.manualSeed(2)
    gpt = ts.loadZooModel("gpt-mini")
    cost = ts.CrossEntropy(classesLast=True)
    opt = ts.Adam(alpha=3e-3)
    opt.setupOn(gpt, useGlobalState=True)
    errors = []
    for _ in range(8):
        error, grad = cost(gpt(x[:8]), y[:8])
        opt.zeroGradParams()
        gpt.backward(grad)
        opt.update()
        errors.append(error)
    assert errors[-1] < 0.7 * errors[0], errors
    text = ts.sampleText(gpt, "quote", 64, count=30, seed=4)
    assert text.startswith("quote") and len(text) == 35
    assert text == ts.sampleText(gpt, "quote", 64, count=30, seed=4)
    with pytest.raises(ts.ShapeError, match="byte 195 at position 3"):  # UTF-8's first byte of the e-acute
        ts.sampleText(gpt, "caf\u00e9", 64)


def test_checkpoint_of_a_loop_without_a_trainer(tmp_path):
    """saveCheckpoint/loadCheckpoint without a Trainer keep the weights and the optimizer state."""
    ts.manualSeed(3)
    net = ts.loadZooModel("mlp")
    opt = ts.Adam(alpha=1e-3)
    opt.setupOn(net, useGlobalState=True)
    x, y = np.random.default_rng(0).random((16, 1, 28, 28), np.float32), np.arange(16, dtype=np.int32) % 10
    error, grad = ts.CrossEntropy()(net(x), y)
    opt.zeroGradParams()
    net.backward(grad)
    opt.update()
    path = str(tmp_path / "loop.ckpt")
    ts.saveCheckpoint(path, net, opt, notes="step 1")
    other = ts.loadZooModel("mlp")
    opt2 = ts.Adam(alpha=1e-3)
    opt2.setupOn(other, useGlobalState=True)
    assert ts.loadCheckpoint(path, other, opt2) == "step 1"
    assert np.array_equal(other(x).numpy(), net(x).numpy())


def test_optimizer_state_from_python():
    ts.manualSeed(4)
    lin = ts.Linear(3, 2)
    opt = ts.Adam(alpha=0.01)
    opt.setupOn(lin, useGlobalState=True)
    x = np.random.default_rng(4).standard_normal((5, 3)).astype(np.float32)
    for _ in range(3):
        opt.zeroGradParams()
        lin(x)
        lin.backward(np.ones((5, 2), np.float32))
        opt.update()
    st = opt.state()
    assert st["steps"] == 3 and sorted(st["tensors"]) == ["W#0", "W#1", "b#0", "b#1"]
    g = lin.getVar("W").grad.numpy()
    m = st["tensors"]["W#0"].numpy()
    assert m.shape == (3, 2) and np.abs(m).max() > 0
    np.testing.assert_allclose(m, (1 - 0.9 ** 3) * g, rtol=1e-4)  # the same gradient three times
    # restoring into a fresh optimizer makes the next update the same
    other = ts.Adam(alpha=0.01)
    twin = lin.copy()
    other.setupOn(twin, useGlobalState=True)
    other.setState(st)
    for o, net in ((opt, lin), (other, twin)):
        o.zeroGradParams()
        net(x)
        net.backward(np.ones((5, 2), np.float32))
        o.update()
    np.testing.assert_array_equal(lin.getVar("W").data.numpy(), twin.getVar("W").data.numpy())
    bad = dict(st, tensors={"W#0": st["tensors"]["W#0"]})
    with pytest.raises(ts.ModuleError, match="Adam"):
        other.setState(bad)


def test_multi_keeps_each_costs_error_and_cross_entropy_its_most_likely_classes():
    rng = np.random.default_rng(5)
    scores, labels = rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 4, 6).astype(np.int32)
    pred, target = rng.standard_normal((6, 3)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32)
    ce, mse = ts.CrossEntropy(), ts.MSE()
    multi = ts.Multi([ce, mse])
    assert multi.errors == []
    error, _ = multi([scores, pred], [labels, target])
    e_ce, _ = ts.CrossEntropy()(scores, labels)
    e_mse, _ = ts.MSE()(pred, target)
    assert np.allclose(multi.errors, [e_ce, e_mse]) and np.isclose(error, e_ce + e_mse)
    multi.validate([scores, pred], [labels, target])
    assert np.isclose(multi.validationErrors[0], (scores.argmax(1) != labels).mean())
    rate = ce.validate(scores, labels)
    assert ce.mostProb.numpy().tolist() == scores.argmax(1).tolist()
    assert np.isclose(rate, (scores.argmax(1) != labels).mean())


def test_saved_tensors_of_the_last_forward():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((8, 3, 4, 4)).astype(np.float32)
    bn = ts.BatchNorm2D(3)
    assert bn.saved == {}
    bn(x)
    np.testing.assert_allclose(bn.saved["batchMean"].numpy(), x.mean(axis=(0, 2, 3)), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(bn.saved["batchVar"].numpy(), x.var(axis=(0, 2, 3)), rtol=1e-4)
    bn.saved["batchMean"].fill(100)  # a copy: the module's own stays
    assert abs(bn.saved["batchMean"].numpy()).max() < 10
    drop = ts.Dropout(p=0.5)
    y = drop(x).numpy()
    np.testing.assert_allclose(y, x * drop.saved["mask"].numpy())
    assert ts.Linear(2, 2).saved == {}


def test_validator_reports_each_output_of_a_multi():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((50, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 50).astype(np.int32)
    target = rng.standard_normal((50, 2)).astype(np.float32)
    inp = ts.Identity(name="x").node()
    cls = ts.Linear(6, 3, name="cls").node(inp)
    reg = ts.Linear(6, 2, name="reg").node(inp)
    net = ts.Graph(inputs=inp, outputs=[cls, reg])
    multi = ts.Multi([ts.CrossEntropy(), ts.MSE()])
    v = ts.Validator(net, multi, batchsize=16)
    total = v.validate([x], [labels, target])
    scores, pred = net(x)
    rate = (scores.numpy().argmax(1) != labels).mean()
    mse = ((pred.numpy() - target) ** 2).sum() / (2 * 50)
    assert np.allclose(v.errors, [rate, mse], rtol=1e-5) and np.isclose(total, rate + mse, rtol=1e-5)
    v.validate([x], [labels, target])  # the parts' accumulators start again
    assert np.allclose(v.errors, [rate, mse], rtol=1e-5)
    single = ts.Validator(ts.Sequential().append(ts.Linear(6, 3)), ts.CrossEntropy())
    e = single.validate(x, labels)
    assert single.errors == [e]


def test_progress_and_epoch_lines_go_through_pythons_streams(monkeypatch):
    """In a notebook sys.stdout and sys.stderr are Python objects, not file descriptors 1
    and 2: the Trainer's progress and fit's epoch lines are written through them."""
    import io
    import sys
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((256, 1, 2, 3)).astype(np.float32)  # images, for the Loader below
    y = rng.integers(0, 3, 256).astype(np.int32)
    net = ts.Sequential().append(ts.Flatten()).append(ts.Linear(6, 3))
    opt = ts.SGD(0.1)
    opt.setupOn(net, useGlobalState=True)
    trainer = ts.Trainer(net, ts.CrossEntropy(), opt, batchsize=32, progress=True)
    trainer.train(x, y)
    lines = err.getvalue().splitlines()
    assert len(lines) >= 8 and lines[-1].startswith("train epoch 1 batch 8/8"), lines
    loader = ts.Loader(ts.tensorDataset(ts.tensor(x), ts.tensor(y)), batchsize=64, seed=1)
    ts.fit(ts.Trainer(net, ts.CrossEntropy(), opt, progress=False), loader, epochs=2, verbose=True)
    assert "epoch 1/2: train loss" in out.getvalue() and "epoch 2/2: train loss" in out.getvalue(), out.getvalue()


def _imported_ids_model(torch, make, vocab, length, path):
    """A model of token ids made after seeding PyTorch (`make()`, in eval mode), exported at
    opset 13 (input "idx", output "logits", a free batch) to `path` and imported: the model,
    4 random sequences of ids and the imported network."""
    torch.manual_seed(0)
    model = make().eval()
    ids = torch.randint(0, vocab, (4, length))
    torch.onnx.export(model, ids, path, opset_version=13, input_names=["idx"], output_names=["logits"],
                      dynamic_axes={"idx": {0: "batch"}, "logits": {0: "batch"}})
    return model, ids, ts.importOnnx(path)


def _fine_tune_on_counting(net, vocab, length, steps):
    """Adam steps predicting the next id of counting sequences (mod vocab); the losses."""
    rng = np.random.default_rng(1)
    cost = ts.CrossEntropy(classesLast=True)
    opt = ts.Adam(alpha=1e-2)
    opt.setupOn(net, useGlobalState=True)
    net.trainMode()
    errors = []
    for _ in range(steps):
        seq = (rng.integers(0, vocab, (16, 1)) + np.arange(length + 1)) % vocab
        error, grad = cost(net(seq[:, :-1].astype(np.int32)), seq[:, 1:].astype(np.int32))
        opt.zeroGradParams()
        net.backward(grad)
        opt.update()
        errors.append(error)
    return errors


def test_gpt_written_with_masked_fill_imports_stays_causal_and_fine_tunes(tmp_path):
    """A GPT block as nanoGPT writes it (masked_fill(bias == 0, -inf) of a tril buffer,
    positions by arange into a learned table) exported by PyTorch: it imports, gives
    PyTorch's outputs, stays causal, saves, exports again, and fine-tunes: its loss drops and
    its positional rows (a learned table of their own) change."""
    torch = pytest.importorskip("torch")
    vocab, context, length, width = 11, 12, 8, 16

    class Gpt(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = torch.nn.Embedding(vocab, width), torch.nn.Embedding(context, width)
            self.ln, self.qkv, self.proj = torch.nn.LayerNorm(width), torch.nn.Linear(width, 3 * width), \
                torch.nn.Linear(width, width)
            self.head = torch.nn.Linear(width, vocab, bias=False)
            self.register_buffer("bias", torch.tril(torch.ones(context, context)).view(1, 1, context, context))

        def forward(self, idx):
            B, T = idx.shape
            x = self.wte(idx) + self.wpe(torch.arange(0, T, dtype=torch.long))
            q, k, v = (t.view(B, T, 2, width // 2).transpose(1, 2) for t in self.qkv(self.ln(x)).split(width, 2))
            att = (q @ k.transpose(-2, -1)) / (width // 2) ** 0.5
            att = torch.softmax(att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf")), dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, width))
            return self.head(x)

    model, ids, net = _imported_ids_model(torch, Gpt, vocab, length, str(tmp_path / "gpt.onnx"))
    x = ids.numpy().astype(np.int32)
    with torch.no_grad():
        want = model(ids).numpy()
    net.evalMode()
    got = net(x).numpy().copy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # Causal: changing the last token changes only the last position's scores.
    later = x.copy()
    later[:, -1] = (later[:, -1] + 1) % vocab
    moved = np.abs(net(later).numpy() - got).max(axis=(0, 2))
    assert moved[:-1].max() == 0 and moved[-1] > 0, moved
    # Saved and loaded back (the mask's fill, -inf, is a layer's attribute): the same outputs.
    h5 = str(tmp_path / "gpt.h5")
    net.save(h5)
    again = ts.load(h5)
    again.evalMode()
    np.testing.assert_array_equal(again(x).numpy(), got)
    # Exported again (int32 ids in, the mask's -inf a constant) and imported: the same outputs
    # and parameters.
    back_path = str(tmp_path / "back.onnx")
    ts.exportOnnx(net, (4, length), back_path)
    back = ts.importOnnx(back_path)
    back.evalMode()
    np.testing.assert_array_equal(back(x).numpy(), got)
    assert sorted(v.data.numpy().size for v in back.namedParams().values()) == \
        sorted(v.data.numpy().size for v in net.namedParams().values())
    # The positional rows the graph reads are a parameter, fine-tuned with the rest: the
    # next id of a counting sequence is learned.
    names = [n for n in net.namedParams() if tuple(net.namedParams()[n].data.shape) == (length, width)]
    assert names, list(net.namedParams())
    rows = net.namedParams()[names[0]].data.numpy().copy()
    errors = _fine_tune_on_counting(net, vocab, length, 60)
    assert np.mean(errors[-10:]) < 0.2 * np.mean(errors[:10]), errors
    assert not np.array_equal(net.namedParams()[names[0]].data.numpy(), rows)


def test_text_classifier_with_a_padding_mask_imports_ignores_padding_and_fine_tunes(tmp_path):
    """A classifier over a padded batch, given its padding as a bool input (nn.TransformerEncoder's
    src_key_padding_mask, a mean over the real tokens by masked_fill and ~pad), exported by PyTorch:
    it imports, gives PyTorch's outputs for NumPy's bool masks, ignores whatever ids the
    padding holds, exports again with an int32 mask input, and fine-tunes on sequences of
    several lengths: the loss drops and the accuracy reaches 90%."""
    torch = pytest.importorskip("torch")
    vocab, length, width = 10, 8, 16

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(vocab, width)
            layer = torch.nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=0.0, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
            self.head = torch.nn.Linear(width, 2)

        def forward(self, ids, pad):
            h = self.encoder(self.embedding(ids), src_key_padding_mask=pad).masked_fill(pad[..., None], 0.0)
            return self.head(h.sum(1) / (~pad).float().sum(1, keepdim=True))

    rng = np.random.default_rng(3)

    def batch(n):
        """Ids (the padding holds random ids too), the padding (True past each length) and the
        label: whether most of the real ids are below vocab / 2."""
        ids = rng.integers(0, vocab, (n, length))
        lengths = rng.integers(3, length + 1, n)
        pad = np.arange(length)[None, :] >= lengths[:, None]
        labels = ((ids < vocab // 2) & ~pad).sum(1) * 2 > lengths
        return ids.astype(np.int32), pad, labels.astype(np.int32)

    torch.manual_seed(0)
    model = Classifier().eval()
    ids, pad, _ = batch(4)
    path = str(tmp_path / "padded.onnx")
    torch.onnx.export(model, (torch.from_numpy(ids).long(), torch.from_numpy(pad)), path, opset_version=17,
                      input_names=["ids", "pad"], output_names=["y"],
                      dynamic_axes={"ids": {0: "batch"}, "pad": {0: "batch"}, "y": {0: "batch"}})
    net = ts.importOnnx(path)
    net.evalMode()
    with torch.no_grad():
        want = model(torch.from_numpy(ids).long(), torch.from_numpy(pad)).numpy()
    got = net([ids, pad])[0].numpy().copy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # Other ids where the padding is: the same outputs, to the bit.
    other = np.where(pad, (ids + 1) % vocab, ids).astype(np.int32)
    np.testing.assert_array_equal(net([other, pad])[0].numpy(), got)
    # Exported again: the mask an int32 input; the attention reads back as one layer, and
    # the outputs are the same to the bit.
    back_path = str(tmp_path / "back.onnx")
    ts.exportOnnx(net, [(4, length), (4, length)], back_path)
    back = ts.importOnnx(back_path)
    back.evalMode()
    assert [n.module.classname for n in back.nodes()].count("ScaledDotProductAttention") == 1
    np.testing.assert_array_equal(back([ids, pad])[0].numpy(), got)
    # Fine-tuned: Adam on fresh batches, the loss falls and held-out accuracy passes 90%.
    cost = ts.CrossEntropy()
    opt = ts.Adam(alpha=1e-2)
    opt.setupOn(net, useGlobalState=True)
    net.trainMode()
    errors = []
    for _ in range(150):
        ids, pad, labels = batch(32)
        error, grad = cost(net([ids, pad])[0], labels)
        opt.zeroGradParams()
        net.backward(grad)
        opt.update()
        errors.append(error)
    assert np.mean(errors[-10:]) < 0.5 * np.mean(errors[:10]), errors
    net.evalMode()
    ids, pad, labels = batch(512)
    accuracy = (net([ids, pad])[0].numpy().argmax(1) == labels).mean()
    assert accuracy >= 0.9, accuracy


def test_reductions_over_a_free_length_import_from_pytorch(tmp_path):
    """A 1-D convolutional text model exported with its batch and length free: the max over
    time (amax), a sum over the length, an L1 norm over channels and time, a sum over the
    batch and a logsumexp over time (ReduceMax, ReduceSum, ReduceL1, ReduceLogSumExp over dims
    the file leaves free) import and match PyTorch's outputs and input gradients at lengths
    and batches other than the export's."""
    torch = pytest.importorskip("torch")

    class TextConv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(8, 16, 3, padding=1)
            self.head = torch.nn.Linear(49, 3)

        def forward(self, x):
            h = torch.tanh(self.conv(x))  # [N, 16, T]
            norm = h.abs().sum((1, 2), keepdim=True)[:, :, 0]  # [N, 1]
            lse = torch.logsumexp(100 * h, 2) / 100  # a soft maximum; exp(100) is past float32
            y = self.head(torch.cat([h.amax(2), 0.1 * h.sum(2), 0.01 * norm, lse], 1))
            return y - y.sum(0, keepdim=True) / 8

    torch.manual_seed(0)
    model = TextConv()
    path = str(tmp_path / "text_conv.onnx")
    torch.onnx.export(model, torch.randn(2, 8, 5), path, opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch", 2: "length"}, "y": {0: "batch"}})
    net = ts.importOnnx(path)
    net.trainMode()
    rng = np.random.default_rng(5)
    for batch, length in ((3, 7), (5, 12)):
        x = rng.standard_normal((batch, 8, length)).astype(np.float32)
        dy = rng.standard_normal((batch, 3)).astype(np.float32)
        tx = torch.from_numpy(x).requires_grad_()
        want = model(tx)
        want.backward(torch.from_numpy(dy))
        np.testing.assert_allclose(net(x).numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(net.backward(dy).numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_maximum_minimum_and_selu_import_from_pytorch(tmp_path):
    """torch.maximum and torch.minimum of data broadcast against data and against constants
    (ONNX's Max and Min) and nn.SELU (Selu) import and match PyTorch's outputs and both
    inputs' gradients at another batch than the export's."""
    torch = pytest.importorskip("torch")

    class Bounded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("floor", torch.tensor([-0.5, 0.0, 0.25, -1.0]))
            self.register_buffer("ceiling", torch.tensor(0.75))
            self.selu = torch.nn.SELU()

        def forward(self, x, y):
            top = torch.maximum(x, y)  # y [N, 1, 4] against x [N, 3, 4]
            low = torch.minimum(top, self.ceiling)
            return self.selu(torch.maximum(low, self.floor) + torch.minimum(x, 2 * y))

    model = Bounded()
    path = str(tmp_path / "bounded.onnx")
    torch.onnx.export(model, (torch.randn(2, 3, 4), torch.randn(2, 1, 4)), path, opset_version=13,
                      input_names=["x", "y"], output_names=["z"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}, "z": {0: "batch"}})
    net = ts.importOnnx(path)
    net.trainMode()
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    y = rng.standard_normal((5, 1, 4)).astype(np.float32)
    dz = rng.standard_normal((5, 3, 4)).astype(np.float32)
    tx, ty = torch.from_numpy(x).requires_grad_(), torch.from_numpy(y).requires_grad_()
    want = model(tx, ty)
    want.backward(torch.from_numpy(dz))
    np.testing.assert_allclose(net([x, y])[0].numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    dx, dy = (g.numpy() for g in net.backward([dz]))
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dy, ty.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_gather_imports_from_pytorch_and_trains(tmp_path):
    """x.gather(1, idx) by positions the model computes (an argmax) and by positions given as
    an input (ONNX's GatherElements) import, match PyTorch's outputs and input gradients at
    another batch than the export's, and export back to the same outputs."""
    torch = pytest.importorskip("torch")

    class Picks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(6, 6)

        def forward(self, x, idx):
            h = self.proj(x)  # [N, 4, 6]
            best = h.gather(1, h.argmax(1, keepdim=True))  # the maximum over dim 1, [N, 1, 6]
            return torch.cat([best, h.gather(2, idx)], 1)  # idx [N, 4, 6] into the last dim

    torch.manual_seed(1)
    model = Picks()
    path = str(tmp_path / "picks.onnx")
    torch.onnx.export(model, (torch.randn(2, 4, 6), torch.zeros(2, 4, 6, dtype=torch.long)), path, opset_version=13,
                      input_names=["x", "idx"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "idx": {0: "batch"}, "y": {0: "batch"}})
    net = ts.importOnnx(path)
    assert sum(n.module.classname == "GatherElements" for n in net.nodes()) == 2
    net.trainMode()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 6)).astype(np.float32)
    idx = rng.integers(0, 6, (3, 4, 6)).astype(np.int32)
    dy = rng.standard_normal((3, 5, 6)).astype(np.float32)
    tx = torch.from_numpy(x).requires_grad_()
    want = model(tx, torch.from_numpy(idx).long())
    want.backward(torch.from_numpy(dy))
    got = net([x, idx])[0].numpy().copy()
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.backward([dy])[0].numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    back_path = str(tmp_path / "back.onnx")
    ts.exportOnnx(net, [(3, 4, 6), (3, 4, 6)], back_path)
    back = ts.importOnnx(back_path)
    back.evalMode()
    np.testing.assert_array_equal(back([x, idx])[0].numpy(), got)


def test_losses_inside_a_model_import_from_pytorch_and_train(tmp_path):
    """A segmentation-style model that computes its own losses from labels given beside its
    input (F.cross_entropy with class weights and PyTorch's ignore_index -100 per position,
    F.nll_loss of log-sigmoids over a pooled head, weighted per sample by a vector indexed by
    the labels counted from its end, and a cross-entropy with smoothed one-hot labels: ONNX's
    SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss, a Gather from a 1-D table by negative
    indices and OneHot) imports, matches PyTorch's losses and input gradients at another
    batch and length than the export's, and trains by its own loss output."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    class Segmenter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(4, 5, 3, padding=1)
            self.head = torch.nn.Linear(4, 3)
            self.register_buffer("weight", torch.tensor([1.0, 2.0, 0.5, 1.5, 3.0]))
            self.register_buffer("kind_weight", torch.tensor([0.5, 1.0, 2.0]))

        def forward(self, x, labels, kinds):
            scores = self.conv(x)  # [N, 5, T]
            per_position = F.cross_entropy(scores, labels, weight=self.weight)  # ignore_index -100
            kind = F.nll_loss(F.logsigmoid(self.head(x.mean(2))), kinds, reduction="none")
            kind = (kind * self.kind_weight[kinds - 3]).sum()  # a Gather from a vector, indices -3 to -1
            smoothed = 0.9 * F.one_hot(kinds, 3).float() + 0.1 / 3  # label smoothing written out
            kind = kind - (smoothed * F.log_softmax(self.head(x.mean(2)), 1)).sum()
            return per_position + 0.1 * kind

    torch.manual_seed(3)
    model = Segmenter()
    path = str(tmp_path / "segmenter.onnx")
    torch.onnx.export(model, (torch.randn(2, 4, 6), torch.zeros(2, 6, dtype=torch.long),
                              torch.zeros(2, dtype=torch.long)), path, opset_version=13,
                      input_names=["x", "labels", "kinds"], output_names=["loss"],
                      dynamic_axes={"x": {0: "batch", 2: "length"}, "labels": {0: "batch", 1: "length"},
                                    "kinds": {0: "batch"}})
    net = ts.importOnnx(path)
    ops = {node.op_type for node in pytest.importorskip("onnx").load(path).graph.node}
    assert ops >= {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "Gather", "OneHot"}, ops
    net.trainMode()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4, 9)).astype(np.float32)
    labels = rng.integers(0, 5, (3, 9))
    labels[rng.random((3, 9)) < 0.3] = -100  # ignored positions
    labels = labels.astype(np.int32)
    kinds = rng.integers(0, 3, 3).astype(np.int32)
    tx = torch.from_numpy(x).requires_grad_()
    want = model(tx, torch.from_numpy(labels).long(), torch.from_numpy(kinds).long())
    want.backward()
    got = net([x, labels, kinds])[0].numpy()
    assert got.size == 1
    np.testing.assert_allclose(got.reshape(()), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.backward([np.ones(got.shape, np.float32)])[0].numpy(), tx.grad.numpy(),
                               rtol=1e-4, atol=1e-6)
    # Exported again and read back: the same loss.
    back_path = str(tmp_path / "back.onnx")
    ts.exportOnnx(net, [x.shape, labels.shape, kinds.shape], back_path)
    back = ts.importOnnx(back_path)
    back.evalMode()
    np.testing.assert_allclose(back([x, labels, kinds])[0].numpy(), got, rtol=1e-6)
    # Trained by its own loss: the gradient of the output with respect to itself is 1.
    opt = ts.Adam(alpha=5e-2)
    opt.setupOn(net, useGlobalState=True)
    losses = []
    for _ in range(60):
        loss = net([x, labels, kinds])[0].numpy().copy()
        opt.zeroGradParams()
        net.backward([np.ones(loss.shape, np.float32)])
        opt.update()
        losses.append(float(loss.reshape(())))
    assert losses[-1] < 0.3 * losses[0], losses


def test_cumsum_position_ids_import_from_pytorch(tmp_path):
    """Position ids of a padded batch as Hugging Face's RoBERTa computes them (the running
    count of a mask made from the ids, torch.cumsum of integers), the ids shifted right (a
    Slice and a Concat of integers) and a running sum of float data (ONNX's CumSum) import, match PyTorch's outputs and input gradients at another batch
    than the export's, and export back to the same outputs."""
    torch = pytest.importorskip("torch")
    vocab, length, pad = 11, 7, 1

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = torch.nn.Embedding(vocab, 8, padding_idx=pad)
            self.positions = torch.nn.Embedding(length + 2, 8, padding_idx=pad)
            self.head = torch.nn.Linear(8, 3)

        def forward(self, ids, x):
            mask = ids.ne(pad).int()
            position_ids = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + pad
            previous = torch.cat([ids[:, :1], ids[:, :-1]], 1)  # the ids shifted right (int Slice, Concat)
            h = self.tokens(ids) + self.positions(position_ids) + torch.cumsum(x, 1) / length
            h = h + 0.5 * self.tokens(previous)
            return self.head(h).sum(1)

    torch.manual_seed(5)
    model = Encoder()
    path = str(tmp_path / "positions.onnx")
    torch.onnx.export(model, (torch.full((2, length), 3, dtype=torch.long), torch.randn(2, length, 8)), path,
                      opset_version=13, input_names=["ids", "x"], output_names=["y"],
                      dynamic_axes={"ids": {0: "batch"}, "x": {0: "batch"}, "y": {0: "batch"}})
    net = ts.importOnnx(path)
    assert sum(n.module.classname == "CumSum" for n in net.nodes()) == 1  # the float one; the other is inside a graph
    net.trainMode()
    rng = np.random.default_rng(6)
    ids = rng.integers(2, vocab, (4, length))
    for row, kept in enumerate((7, 5, 2, 4)):
        ids[row, kept:] = pad  # padded at the end
    ids[3, 0] = pad  # and at the start
    ids = ids.astype(np.int32)
    x = rng.standard_normal((4, length, 8)).astype(np.float32)
    dy = rng.standard_normal((4, 3)).astype(np.float32)
    tx = torch.from_numpy(x).requires_grad_()
    want = model(torch.from_numpy(ids).long(), tx)
    want.backward(torch.from_numpy(dy))
    got = net([ids, x])[0].numpy().copy()
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(net.backward([dy])[1].numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    back_path = str(tmp_path / "back.onnx")
    ts.exportOnnx(net, [ids.shape, x.shape], back_path)
    back = ts.importOnnx(back_path)
    back.evalMode()
    np.testing.assert_allclose(back([ids, x])[0].numpy(), got, rtol=1e-6, atol=1e-6)


def test_pixel_shuffle_imports_from_pytorch(tmp_path):
    """A super-resolution net (ESPCN's sub-pixel convolution: nn.PixelShuffle, which PyTorch
    exports as ONNX's DepthToSpace in CRD mode from opset 11) imports and matches PyTorch's
    outputs and input gradients at another batch than the export's."""
    torch = pytest.importorskip("torch")

    class Upscaler(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.features = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.subpixel = torch.nn.Conv2d(16, 3 * 9, 3, padding=1)
            self.shuffle = torch.nn.PixelShuffle(3)

        def forward(self, x):
            return self.shuffle(self.subpixel(torch.tanh(self.features(x))))

    torch.manual_seed(2)
    model = Upscaler()
    path = str(tmp_path / "upscaler.onnx")
    torch.onnx.export(model, torch.randn(1, 3, 5, 6), path, opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    ops = {node.op_type for node in pytest.importorskip("onnx").load(path).graph.node}
    assert "DepthToSpace" in ops, ops
    net = ts.importOnnx(path)
    net.trainMode()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 15, 18)).astype(np.float32)
    tx = torch.from_numpy(x).requires_grad_()
    want = model(tx)
    want.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(net(x).numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(net.backward(dy).numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_top_k_routing_imports_from_pytorch(tmp_path):
    """A mixture of experts' top-2 routing (torch.topk of the gate's logits: ONNX's TopK, its
    values softmaxed, its positions made one-hot to weight the experts) and the smallest
    values of each row (largest=False) import and match PyTorch's outputs, positions and input
    gradients at another batch than the export's, and export back to the same outputs."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    class Mixture(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = torch.nn.Linear(8, 6)
            self.experts = torch.nn.Linear(8, 6 * 4)

        def forward(self, x):
            weights, chosen = torch.topk(self.gate(x), 2, dim=-1)  # [N, T, 2]
            gates = (F.one_hot(chosen, 6).float() * F.softmax(weights, -1)[..., None]).sum(-2)  # [N, T, 6]
            outputs = self.experts(x).view(x.shape[0], x.shape[1], 6, 4)
            mixed = (gates[..., None] * outputs).sum(2)  # [N, T, 4]
            lowest, _ = torch.topk(mixed, 2, dim=1, largest=False)  # [N, 2, 4]
            return mixed, lowest, chosen

    torch.manual_seed(4)
    model = Mixture()
    path = str(tmp_path / "mixture.onnx")
    torch.onnx.export(model, torch.randn(2, 5, 8), path, opset_version=13, input_names=["x"],
                      output_names=["mixed", "lowest", "chosen"],
                      dynamic_axes={"x": {0: "batch"}, "mixed": {0: "batch"}, "lowest": {0: "batch"},
                                    "chosen": {0: "batch"}})
    ops = [node.op_type for node in pytest.importorskip("onnx").load(path).graph.node]
    assert ops.count("TopK") == 2, ops
    net = ts.importOnnx(path)
    assert sum(n.module.classname == "TopK" for n in net.nodes()) == 2
    net.trainMode()
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 5, 8)).astype(np.float32)
    dmixed = rng.standard_normal((3, 5, 4)).astype(np.float32)
    dlowest = rng.standard_normal((3, 2, 4)).astype(np.float32)
    tx = torch.from_numpy(x).requires_grad_()
    mixed, lowest, chosen = model(tx)
    (mixed * torch.from_numpy(dmixed)).sum().backward(retain_graph=True)
    (lowest * torch.from_numpy(dlowest)).sum().backward()
    got = [t.numpy().copy() for t in net([x])]
    np.testing.assert_allclose(got[0], mixed.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], lowest.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[2], chosen.numpy())
    dx = net.backward([dmixed, dlowest, np.zeros(got[2].shape, np.float32)])[0].numpy()
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    back_path = str(tmp_path / "back.onnx")
    ts.exportOnnx(net, [x.shape], back_path)
    back = ts.importOnnx(back_path)
    back.evalMode()
    for want, have in zip(got, back([x])):
        np.testing.assert_array_equal(have.numpy(), want)


def test_scatter_imports_from_pytorch(tmp_path):
    """x.scatter(dim, idx, src) and x.scatter_add(dim, idx, src) (ONNX's ScatterElements, its
    add reduction from opset 16) by positions given as an input import, match PyTorch's
    outputs and both float inputs' gradients at another batch than the export's (positions
    repeated in the sums), and export back to the same outputs."""
    torch = pytest.importorskip("torch")

    class Scatters(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(6, 6)

        def forward(self, x, idx, src):
            h = self.proj(x)  # [N, 4, 6]
            put = h.scatter(2, idx[:, :, :3], src[:, :, :3])  # distinct positions per row
            summed = torch.tanh(h).scatter_add(1, idx[:, :3, :].clamp(max=3), src[:, :3, :])
            return put * summed

    torch.manual_seed(6)
    model = Scatters()
    path = str(tmp_path / "scatters.onnx")
    example = (torch.randn(2, 4, 6), torch.zeros(2, 4, 6, dtype=torch.long), torch.randn(2, 4, 6))
    torch.onnx.export(model, example, path, opset_version=16, input_names=["x", "idx", "src"], output_names=["y"],
                      dynamic_axes={n: {0: "batch"} for n in ("x", "idx", "src", "y")})
    net = ts.importOnnx(path)
    assert sum(n.module.classname == "ScatterElements" for n in net.nodes()) == 2
    net.trainMode()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 4, 6)).astype(np.float32)
    src = rng.standard_normal((3, 4, 6)).astype(np.float32)
    idx = np.stack([np.stack([rng.permutation(6) for _ in range(4)]) for _ in range(3)]).astype(np.int32)
    dy = rng.standard_normal((3, 4, 6)).astype(np.float32)
    tx, tsrc = torch.from_numpy(x).requires_grad_(), torch.from_numpy(src).requires_grad_()
    want = model(tx, torch.from_numpy(idx).long(), tsrc)
    want.backward(torch.from_numpy(dy))
    got = net([x, idx, src])[0].numpy().copy()
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-6)
    grads = net.backward([dy])
    np.testing.assert_allclose(grads[0].numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[2].numpy(), tsrc.grad.numpy(), rtol=1e-5, atol=1e-6)
    back_path = str(tmp_path / "back.onnx")
    ts.exportOnnx(net, [x.shape, idx.shape, src.shape], back_path, opset=16)
    back = ts.importOnnx(back_path)
    back.evalMode()
    np.testing.assert_array_equal(back([x, idx, src])[0].numpy(), got)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_matches_pytorch(mode):
    """GridSample against F.grid_sample for every padding and corner alignment: outputs, and
    the gradients of the image and (but for nearest, whose is zero) the grid, at positions
    inside and up to a third of the image outside it."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = rng.uniform(-1.6, 1.6, size=(2, 4, 6, 2)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    for padding in ("zeros", "border", "reflection"):
        for align in (False, True):
            layer = ts.GridSample(mode=mode, padding=padding, alignCorners=align)
            tx, tg = torch.from_numpy(x).requires_grad_(), torch.from_numpy(grid).requires_grad_()
            want = torch.nn.functional.grid_sample(tx, tg, mode=mode, padding_mode=padding, align_corners=align)
            want.backward(torch.from_numpy(dy))
            got = layer([x, grid])[0].numpy()
            np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-5, err_msg=f"{padding} {align}")
            dx, dgrid = layer.backward(dy)
            np.testing.assert_allclose(dx.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(dgrid.numpy(), tg.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_flow_warping_imports_from_pytorch(tmp_path):
    """A net that predicts a flow and warps its input by it (F.grid_sample at a grid that is
    data, ONNX's GridSample from opset 16) imports as a GridSample, matches PyTorch's output
    and input gradient at another batch than the export's, and exports back to the same
    outputs."""
    torch = pytest.importorskip("torch")

    class Warp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.flow = torch.nn.Conv2d(3, 2, 3, padding=1)
            ys, xs = torch.meshgrid(torch.linspace(-1, 1, 6), torch.linspace(-1, 1, 8), indexing="ij")
            self.register_buffer("base", torch.stack([xs, ys], dim=-1)[None])

        def forward(self, x):
            grid = self.base + 0.3 * torch.tanh(self.flow(x)).permute(0, 2, 3, 1)
            return torch.nn.functional.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)

    torch.manual_seed(4)
    model = Warp()
    path = str(tmp_path / "warp.onnx")
    torch.onnx.export(model, (torch.randn(2, 3, 6, 8),), path, opset_version=16, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    net = ts.importOnnx(path)
    assert sum(n.module.classname == "GridSample" for n in net.nodes()) == 1
    net.trainMode()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 3, 6, 8)).astype(np.float32)
    dy = rng.standard_normal((3, 3, 6, 8)).astype(np.float32)
    tx = torch.from_numpy(x).requires_grad_()
    want = model(tx)
    want.backward(torch.from_numpy(dy))
    got = net(x).numpy().copy()
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(net.backward(dy).numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    back_path = str(tmp_path / "back.onnx")
    ts.exportOnnx(net, [x.shape], back_path, opset=16)
    back = ts.importOnnx(back_path)
    back.evalMode()
    np.testing.assert_array_equal(back(x).numpy(), got)


def test_exported_shapes_name_the_batch_wherever_layers_move_it(tmp_path):
    """The shapes an export declares for its values: a dim that follows the batch is named for
    it wherever a layer moved it ('batch', 'batch*5' where the positions are folded into it),
    the others are their sizes; the file reads back into one attention layer and runs at other
    batches. A model that takes only the batch it was exported at declares its values' ranks
    alone."""
    onnx = pytest.importorskip("onnx")
    x = ts.Identity(name="x").node()
    t = ts.Transpose((1, 0, 2), name="time_major").node(x)
    att = ts.MultiheadAttention(8, 2, batchFirst=False, name="att").node(t)
    rows = ts.Reshape((-1, 8), name="rows").node(att)
    back_to_time = ts.Reshape((5, -1, 8), name="back_to_time").node(ts.Linear(8, 8, name="fc").node(rows))
    y = ts.Transpose((1, 0, 2), name="batch_major").node(back_to_time)
    net = ts.Graph([x], [y])
    net.evalMode()
    path = str(tmp_path / "moved.onnx")
    ts.exportOnnx(net, [(3, 5, 8)], path)
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    dims = {v.name: [d.dim_param or d.dim_value or None for d in v.type.tensor_type.shape.dim]
            for v in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output)}
    assert dims["input"] == ["batch", 5, 8]
    assert dims["time_major"] == [5, "batch", 8]
    assert dims[model.graph.output[0].name] == ["batch", 5, 8]
    assert dims["att"] == [5, "batch", 8]
    assert dims["rows"] == ["batch*5", 8]  # the batch folded with the positions
    assert all(None not in d for d in dims.values()), dims
    back = ts.importOnnx(path)
    back.evalMode()
    assert [n.module.classname for n in back.nodes()].count("ScaledDotProductAttention") == 1
    for batch in (1, 4):
        data = np.random.default_rng(batch).standard_normal((batch, 5, 8)).astype(np.float32)
        np.testing.assert_allclose(back(data).numpy(), net(data).numpy(), rtol=1e-5, atol=1e-6)
    # Only batch 3: a reshape to a fixed shape. The values' sizes are left to the reader.
    x = ts.Identity(name="x").node()
    flat = ts.Reshape((15, 8), name="flat").node(x)
    fixed = ts.Graph([x], [ts.Linear(8, 2, name="fc").node(flat)])
    ts.exportOnnx(fixed, [(3, 5, 8)], path)
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    ranks = {}
    for v in list(model.graph.value_info) + list(model.graph.output):
        assert not any(d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim), v.name
        ranks[v.name] = len(v.type.tensor_type.shape.dim)
    assert ranks == {"x": 3, "flat": 2, "fc": 2}


def test_head_tied_to_the_token_table_imports_shared_and_stays_tied(tmp_path):
    """A language model whose head is its token table (Hugging Face's tie_word_embeddings:
    nn.Linear's weight is the nn.Embedding's), which PyTorch's export writes as a transposed
    copy: the import ties them again (a Linear storing W [out, in] sharing the Embedder's
    Variable), so the parameters are PyTorch's count; fine-tuning moves them as one; a saved
    and loaded model, a copy and an export imported again stay tied."""
    torch = pytest.importorskip("torch")
    vocab, length, width = 13, 6, 8

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.ln = torch.nn.Embedding(vocab, width), torch.nn.LayerNorm(width)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(),
                                           torch.nn.Linear(2 * width, width))
            self.head = torch.nn.Linear(width, vocab, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, idx):
            x = self.wte(idx)
            return self.head(self.ln(x + self.mlp(x)))

    model, ids, net = _imported_ids_model(torch, Tied, vocab, length, str(tmp_path / "tied.onnx"))
    expected = sum(p.numel() for p in model.parameters())  # the tied weight once
    assert net.numOfParams() == expected
    x = ids.numpy().astype(np.int32)
    with torch.no_grad():
        want = model(ids).numpy()
    net.evalMode()
    np.testing.assert_allclose(net(x).numpy(), want, rtol=1e-4, atol=1e-5)

    def table_and_head(m):
        shaped = {n: v.data.numpy().copy() for n, v in m.namedParams().items()
                  if tuple(v.data.shape) == (vocab, width)}
        assert len(shaped) == 2, list(m.namedParams())
        return list(shaped.values())

    before = table_and_head(net)[0]
    # Fine-tuned (predict the next id of a counting sequence): the loss drops, the table moves,
    # and the head is the table still.
    errors = _fine_tune_on_counting(net, vocab, length, 40)
    assert np.mean(errors[-5:]) < 0.5 * np.mean(errors[:5]), errors
    table, head = table_and_head(net)
    assert not np.array_equal(table, before)
    np.testing.assert_array_equal(table, head)
    # Saved and loaded (a model rebuilt from the file's blueprint), copied, exported and
    # imported again: still one weight, with the same outputs.
    net.evalMode()
    got = net(x).numpy().copy()
    h5 = str(tmp_path / "tied.h5")
    net.save(h5)
    back_path = str(tmp_path / "back.onnx")
    ts.exportOnnx(net, (4, length), back_path)
    for again in (ts.load(h5), net.copy(), ts.importOnnx(back_path)):
        assert again.numOfParams() == expected
        again.evalMode()
        np.testing.assert_allclose(again(x).numpy(), got, rtol=1e-6, atol=1e-6)
