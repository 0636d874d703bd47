"""Data sets, transforms, the background Loader and checkpoints from Python."""

import numpy as np
import pytest
from PIL import Image

import tessera as ts


@pytest.fixture
def folder(tmp_path):
    """Two classes of five 8x6 PNG images; class 1 is bright, class 0 dark."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(["cat", "dog"]):
        (tmp_path / name).mkdir()
        for i in range(5):
            pixels = (rng.uniform(0, 0.4, (6, 8, 3)) + 0.5 * c) * 255
            Image.fromarray(pixels.astype(np.uint8)).save(tmp_path / name / f"{i}.png")
    return tmp_path


def test_image_folder_and_loader_order_is_the_same_for_any_workers(folder):
    ds = ts.imageFolder(str(folder), channels=3)
    assert len(ds) == 10 and ds.classes == 2 and ds.classNames == ["cat", "dog"]
    image, label = ds[7]
    assert image.shape == (3, 6, 8) and image.dtype == np.float32 and label == 1
    assert image.min() >= 0.5 and image.max() <= 1.0
    assert ds.where(0).endswith("cat/0.png")
    with pytest.raises(IndexError):
        ds[10]

    def batches(workers, pinned=False):
        loader = ts.Loader(ds, ts.Transforms("crop:6:1,flip"), batchsize=4, seed=5, workers=workers, pinned=pinned)
        assert len(loader) == 3 and loader.sampleShape == (3, 6, 6)  # square crops
        return [(x.numpy().copy(), y.numpy().copy()) for x, y in loader.epoch(2)]

    one, two, pinned = batches(0), batches(2), batches(2, pinned=True)  # pinned: page-locked with a GPU
    assert [x.shape for x, _ in one] == [(4, 3, 6, 6), (4, 3, 6, 6), (2, 3, 6, 6)]
    for (x0, y0), (x1, y1), (x2, y2) in zip(one, two, pinned):
        np.testing.assert_array_equal(x0, x1)
        np.testing.assert_array_equal(y0, y1)
        np.testing.assert_array_equal(x0, x2)
        np.testing.assert_array_equal(y0, y2)
    assert sorted(np.concatenate([y for _, y in one]).tolist()) == [0] * 5 + [1] * 5


def test_bad_files_are_io_errors_naming_them(folder, tmp_path):
    with pytest.raises(ts.IoError, match="nowhere"):
        ts.imageFolder(str(tmp_path / "nowhere"))
    (folder / "dog" / "5.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    ds = ts.imageFolder(str(folder))
    loader = ts.Loader(ds, batchsize=11, shuffle=False, workers=2)
    with pytest.raises(ts.IoError, match="5.png"):
        list(loader.epoch(0))
    with pytest.raises(ts.ModuleError):
        ts.Loader(ds, batchsize=0)


def test_npy_and_cifar_files(tmp_path):
    images = np.random.default_rng(1).integers(0, 256, (6, 1, 4, 4)).astype(np.uint8)
    labels = np.arange(6, dtype=np.int64) % 3
    np.save(tmp_path / "x.npy", images)
    np.save(tmp_path / "y.npy", labels)
    ds = ts.npyDataset(str(tmp_path / "x.npy"), str(tmp_path / "y.npy"))
    assert len(ds) == 6 and ds.classes == 3
    np.testing.assert_allclose(ds[2][0], images[2] / 255.0, rtol=1e-6)

    records = bytearray()
    for label in (3, 7):
        records += bytes([label]) + bytes(range(256)) * 12
    (tmp_path / "test_batch.bin").write_bytes(bytes(records))
    cifar = ts.cifar10(str(tmp_path), "test")
    assert len(cifar) == 2 and cifar[1][1] == 7 and cifar[0][0].shape == (3, 32, 32)


def test_cifar_read_from_the_archives_as_distributed(tmp_path):
    """cifar-10-binary.tar.gz and cifar-100-binary.tar.gz read without unpacking: the same
    samples as the unpacked folders; damaged archives are errors naming them."""
    import gzip
    import tarfile
    rng = np.random.default_rng(2)

    def records(n, label_bytes, top):
        labels = rng.integers(0, top, (n, label_bytes)).astype(np.uint8)
        return np.concatenate([labels, rng.integers(0, 256, (n, 3072)).astype(np.uint8)], 1).tobytes()

    ten = tmp_path / "cifar-10-batches-bin"
    ten.mkdir()
    for b in range(1, 6):
        (ten / f"data_batch_{b}.bin").write_bytes(records(3 + b, 1, 10))
    (ten / "test_batch.bin").write_bytes(records(4, 1, 10))
    (ten / "batches.meta.txt").write_text("airplane\n")
    hundred = tmp_path / "cifar-100-binary"
    hundred.mkdir()
    for split in ("train", "test"):
        (hundred / f"{split}.bin").write_bytes(records(5, 2, 20))
    for name, folder, mode in (("ten.tar.gz", ten, "w:gz"), ("ten.tar", ten, "w"), ("hundred.tgz", hundred, "w:gz")):
        with tarfile.open(tmp_path / name, mode) as t:
            t.add(folder, arcname=folder.name)
    cases = [(ts.cifar10, "ten.tar.gz", {}), (ts.cifar10, "ten.tar", {}),
             (lambda p, s: ts.cifar100(p, s, fine=False), "hundred.tgz", {})]
    for read, name, _ in cases:
        for split in ("train", "test"):
            want, got = read(str(tmp_path), split), read(str(tmp_path / name), split)
            assert len(got) == len(want) > 0 and got.classes == want.classes
            for i in range(len(want)):
                np.testing.assert_array_equal(got[i][0], want[i][0])
                assert got[i][1] == want[i][1]
    train = ts.cifar10(str(tmp_path / "ten.tar.gz"), "train")
    assert len(train) == sum(3 + b for b in range(1, 6)) and train.classNames[0] == "airplane"
    assert train.where(4) == str(tmp_path / "ten.tar.gz") + ":cifar-10-batches-bin/data_batch_2.bin (record 0)"

    # A cut stream, damaged compressed bytes, a missing member and a file that is no tar.
    packed = (tmp_path / "ten.tar.gz").read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(ts.IoError, match="cut.tar.gz: truncated"):
        ts.cifar10(str(tmp_path / "cut.tar.gz"), "test")
    damaged = bytearray(packed)
    damaged[len(packed) // 3: len(packed) // 3 + 64] = b"\x55" * 64
    (tmp_path / "damaged.tar.gz").write_bytes(bytes(damaged))
    with pytest.raises(ts.IoError, match="damaged.tar.gz"):
        ts.cifar10(str(tmp_path / "damaged.tar.gz"), "test")
    with pytest.raises(ts.IoError, match="holds no data_batch_1.bin"):
        ts.cifar10(str(tmp_path / "hundred.tgz"), "train")
    (tmp_path / "plain.gz").write_bytes(gzip.compress(b"not a tar" * 100))
    with pytest.raises(ts.IoError, match="plain.gz: not a tar archive"):
        ts.cifar10(str(tmp_path / "plain.gz"), "test")
    # CIFAR's archive holds no image folders.
    with pytest.raises(ts.IoError, match="no images under train/"):
        ts.imageArchive(str(tmp_path / "ten.tar.gz"), "train")


def test_trainer_and_validator_on_loaders_and_a_checkpoint_resumes_exactly(tmp_path):
    try:
        images, labels = ts.loadMnist(split="train", limit=2048)
    except ts.IoError as e:
        pytest.skip(f"Fashion-MNIST is not installed: {e}")
    ds = ts.tensorDataset(images, labels)

    def run(stop_at=None, resume=None):
        ts.manualSeed(11)
        net = ts.loadZooModel("lenet")
        opt = ts.Adam(alpha=1e-3)
        opt.setupOn(net, useGlobalState=True)
        loader = ts.Loader(ds, batchsize=64, seed=4, workers=2)
        trainer = ts.Trainer(net, ts.CrossEntropy(), opt, progress=False)
        if resume:
            ts.loadCheckpoint(resume, net, opt, trainer)
        errors = []

        def batch_done(info):
            errors.append(info.error)
            if info.batch == stop_at:
                trainer.requestStop()
        trainer.onBatchFinish = batch_done
        trainer.train(loader)
        return net, opt, trainer, errors

    whole, _, _, errors = run()
    assert len(errors) == 32 and np.mean(errors[-5:]) < 0.6 * np.mean(errors[:5])
    val = ts.Validator(whole, ts.CrossEntropy()).validate(ts.Loader(ds, batchsize=500, shuffle=False, train=False))
    assert val < 0.4  # 60% accuracy on the training images after one short epoch

    net, opt, trainer, _ = run(stop_at=9)
    assert trainer.position == (0, 10)
    path = str(tmp_path / "run.ckpt")
    ts.saveCheckpoint(path, net, opt, trainer, notes='{"best": 0.5}')
    resumed, _, trainer2, _ = run(resume=path)
    assert trainer2.position == (1, 0)
    for (name, a), (_, b) in zip(whole.namedParams().items(), resumed.namedParams().items()):
        np.testing.assert_array_equal(a.data.numpy(), b.data.numpy(), err_msg=name)
    with pytest.raises(ts.IoError):
        ts.loadCheckpoint(str(tmp_path / "none.ckpt"), net, opt, trainer)
    assert ts.loadCheckpoint(path, net, opt, trainer) == '{"best": 0.5}'  # the caller's own notes come back


def test_affine_warp_matches_torchvision():
    torch = pytest.importorskip("torch")
    F = pytest.importorskip("torchvision.transforms.functional")
    image = np.random.default_rng(5).uniform(0, 1, (3, 13, 18)).astype(np.float32)
    for degrees, translate, scale, shear in [(0, (0, 0), 1, 0), (90, (0, 0), 1, 0), (-33, (0, 0), 1, 0),
                                             (0, (3, -2), 1, 0), (0, (0, 0), 1.3, 0), (0, (0, 0), 0.7, 0),
                                             (0, (0, 0), 1, 20), (0, (0, 0), 1, -35), (17, (-4, 1), 0.85, 12)]:
        got = ts.Transforms.warp(image, degrees, translate, scale, shear)
        want = F.affine(torch.from_numpy(image), angle=-degrees, translate=list(translate), scale=scale,
                        shear=[float(shear), 0.0], interpolation=F.InterpolationMode.BILINEAR).numpy()
        np.testing.assert_allclose(got, want, atol=2e-6, err_msg=str((degrees, translate, scale, shear)))
    # A quarter turn counter-clockwise is NumPy's rot90 on a square image.
    square = image[:, :12, :12]
    np.testing.assert_allclose(ts.Transforms.warp(square, 90), np.rot90(square, 1, axes=(1, 2)), atol=1e-5)
    with pytest.raises(ts.ShapeError, match=r"\[C, H, W\]"):
        ts.Transforms.warp(image[0], 10)


def test_random_affine(folder):
    t = ts.Transforms().affine(10, translate=0.1, scale=(0.9, 1.1), shear=5)
    assert repr(t) == "tessera.Transforms('affine:10:0.1:0.9/1.1:5')"
    assert repr(ts.Transforms("affine:10:0.1:0.9/1.1:5")) == repr(t)
    assert repr(ts.Transforms("affine:15")) == "tessera.Transforms('affine:15')"
    assert repr(ts.Transforms("affine:0:0.2")) == "tessera.Transforms('affine:0:0.2')"
    ds = ts.imageFolder(str(folder), channels=3)
    (x, _), = list(ts.Loader(ds, t, batchsize=10, seed=1, workers=2).epoch(0))
    (again, _), = list(ts.Loader(ds, t, batchsize=10, seed=1, workers=0).epoch(0))
    np.testing.assert_array_equal(x.numpy(), again.numpy())  # seeded by sample, not by worker
    originals = np.stack([ds[i][0] for i in range(10)])
    assert x.shape == originals.shape
    assert all(not np.array_equal(x.numpy()[i], originals[i]) for i in range(10))  # every image moved
    (second, _), = list(ts.Loader(ds, t, batchsize=10, seed=1).epoch(1))
    assert not np.array_equal(second.numpy(), x.numpy())  # drawn anew each epoch
    (evaluated, _), = list(ts.Loader(ds, t, batchsize=10, shuffle=False, train=False).epoch(0))
    np.testing.assert_array_equal(evaluated.numpy(), originals)  # evaluation leaves images as they are
    # A shift alone moves an image by whole pixels: each column (row) appears intact.
    shift = ts.Transforms().affine(0, translate=0.5)
    (s, _), = list(ts.Loader(ds, shift, batchsize=10, shuffle=False).epoch(0))
    for i in range(10):
        img, out = originals[i], s.numpy()[i]
        found = [(dy, dx) for dy in range(-3, 4) for dx in range(-4, 5)
                 if np.array_equal(out, np.roll(np.roll(img, dy, 1), dx, 2) *
                                   _inside(img.shape, dy, dx))]
        assert found, f"image {i} is not a whole-pixel shift"
    for bad in ("affine:181", "affine:10:1.5", "affine:10:0.1:1.1/0.9", "affine:10:0.1:0/1", "affine:10:0:1/1:90",
                "affine:10:0:0.9", "affine"):
        with pytest.raises(ts.ModuleError):
            ts.Transforms(bad)


def _inside(shape, dy, dx):
    """1 where a shift by (dy, dx) keeps a pixel of the image, 0 where it brings in zeros."""
    mask = np.zeros(shape, np.float32)
    h, w = shape[1], shape[2]
    mask[:, max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = 1
    return mask


def test_random_resized_crop_rotation_and_jitter(folder):
    t = ts.Transforms().randomResizedCrop(5, 5, scale=0.3).rotate(10).jitter(0.3, 0.3, 0.3)
    assert repr(t) == "tessera.Transforms('rrc:5:0.3,rotate:10,jitter:0.3:0.3:0.3')"
    assert repr(ts.Transforms("rrc:5:0.3,rotate:10,jitter:0.3:0.3:0.3")) == repr(t)
    assert repr(ts.Transforms().jitter(0.1, hue=0.2)) == "tessera.Transforms('jitter:0.1:0:0:0.2')"
    ds = ts.imageFolder(str(folder), channels=3)
    loader = ts.Loader(ds, t, batchsize=10, seed=1, workers=2)
    assert loader.sampleShape == (3, 5, 5)
    (x, _), = list(loader.epoch(0))
    (again, _), = list(ts.Loader(ds, t, batchsize=10, seed=1, workers=0).epoch(0))
    np.testing.assert_array_equal(x.numpy(), again.numpy())  # seeded by sample, not by worker
    assert x.numpy().min() >= 0 and x.numpy().max() <= 1
    with pytest.raises(ts.ModuleError):
        ts.Transforms("rrc:5:0")
    # Random erasing zeroes a box of every image (p=1), the same with any workers.
    erase = ts.Transforms().resize(6, 8).erase(1.0, 0.1, 0.3)
    assert repr(erase) == "tessera.Transforms('resize:6x8,erase:1:0.1:0.3')"
    (e, _), = list(ts.Loader(ds, erase, batchsize=10, seed=1, workers=2).epoch(0))
    (e0, _), = list(ts.Loader(ds, erase, batchsize=10, seed=1).epoch(0))
    np.testing.assert_array_equal(e.numpy(), e0.numpy())
    zero = (e.numpy() == 0).all(axis=1)  # [N, H, W]: zero in every channel
    assert all(4 <= z.sum() <= 16 for z in zero), zero.sum((1, 2))


def test_resize_matches_torch_interpolate_antialiased_when_shrinking():
    torch = pytest.importorskip("torch")
    images = np.random.default_rng(4).uniform(0, 1, (2, 3, 37, 50)).astype(np.float32)
    ds = ts.tensorDataset(images, np.array([0, 1], np.int32))
    # Shrinking (both axes, and one axis only) antialiases; enlarging is plain bilinear.
    for size, antialias in [((11, 16), True), ((30, 20), True), ((37, 20), True), ((64, 75), False)]:
        loader = ts.Loader(ds, ts.Transforms("resize:%dx%d" % size), batchsize=2, shuffle=False, train=False)
        (got, _), = list(loader.epoch(0))
        want = torch.nn.functional.interpolate(torch.from_numpy(images), size=size, mode="bilinear",
                                               align_corners=False, antialias=antialias).numpy()
        np.testing.assert_allclose(got.numpy(), want, atol=2e-6, err_msg=str(size))


def test_hold_out_for_validation():
    images = np.arange(20, dtype=np.float32).reshape(20, 1, 1, 1)
    ds = ts.tensorDataset(images, (np.arange(20) % 4).astype(np.int32))
    rest, held = ts.holdOut(ds, 5, seed=3)
    assert len(rest) == 15 and len(held) == 5 and held.classes == 4
    seen = sorted(float(rest[i][0].ravel()[0]) for i in range(15)) + sorted(float(held[i][0].ravel()[0]) for i in range(5))
    assert sorted(seen) == list(range(20))
    with pytest.raises(ts.ShapeError):
        ts.holdOut(ds, 20)


def _splits(folder, root):
    """`folder`'s classes copied as both root/train and root/test."""
    for split in ("train", "test"):
        for cls in ("cat", "dog"):
            (root / split / cls).mkdir(parents=True)
            for f in sorted((folder / cls).iterdir()):
                (root / split / cls / f.name).write_bytes(f.read_bytes())
    return root


def _archives(root, tmp_path):
    """The folder `root` (train/ and test/ of class folders) as a tar (pax), a GNU tar, a zip
    of deflated members, a zip of stored ones under a top folder and a .tar.gz under one."""
    import tarfile
    import zipfile
    files = sorted(p for p in root.rglob("*") if p.is_file())
    tar, gnu, deflated, stored = (tmp_path / n for n in ("set.tar", "gnu.tar", "set.zip", "top.zip"))
    for path, form in ((tar, tarfile.PAX_FORMAT), (gnu, tarfile.GNU_FORMAT)):
        with tarfile.open(path, "w", format=form) as t:
            for p in files:
                t.add(p, arcname=str(p.relative_to(root)))
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as z:
        for p in files:
            z.write(p, str(p.relative_to(root)))
    with zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as z:
        for p in files:
            z.write(p, "pictures/" + str(p.relative_to(root)))
    tgz = tmp_path / "set.tar.gz"
    with tarfile.open(tgz, "w:gz") as t:
        for p in files:
            t.add(p, arcname="pictures/" + str(p.relative_to(root)))
    return tar, gnu, deflated, stored, tgz


def test_image_archives_read_as_the_folder(folder, tmp_path):
    root = _splits(folder, tmp_path / "set")
    # Names over tar's 100 bytes (its prefix field; a file name that needs a pax or GNU
    # record), and a JPEG among the PNGs.
    deep = root / "train" / "dog" / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    Image.fromarray(np.full((6, 8, 3), 200, np.uint8)).save(deep / "z.jpg", quality=95)
    Image.fromarray(np.full((6, 8, 3), 90, np.uint8)).save(root / "train" / "cat" / ("f" * 120 + ".png"))
    tar, gnu, deflated, stored, tgz = _archives(root, tmp_path)
    for split in ("train", "test"):
        want = ts.imageFolder(str(root / split), channels=3)
        for archive in (tar, gnu, deflated, stored, tgz):
            got = ts.imageArchive(str(archive), split, channels=3)
            assert len(got) == len(want) and got.classes == want.classes == 2, archive
            for i in range(len(want)):
                (a, la), (b, lb) = got[i], want[i]
                np.testing.assert_array_equal(a, b, err_msg=f"{archive} {split} {i}")
                assert la == lb
            assert got.where(0).startswith(str(archive) + ":")
    # Damaged archives: errors that name the archive.
    data = deflated.read_bytes()
    (tmp_path / "cut.zip").write_bytes(data[: len(data) // 2])
    bad_tar = bytearray(tar.read_bytes())
    bad_tar[130] = ord("7") if bad_tar[130] != ord("7") else ord("6")  # the first member's size: checksum fails
    (tmp_path / "bad.tar").write_bytes(bytes(bad_tar))
    packed = tgz.read_bytes()
    (tmp_path / "cut.tar.gz").write_bytes(packed[: len(packed) - 40])  # the end blocks and gzip's check cut
    for name in ("cut.zip", "bad.tar", "cut.tar.gz: truncated"):
        with pytest.raises(ts.IoError, match=name):
            ts.imageArchive(str(tmp_path / name.split(":")[0]), "train")
    with pytest.raises(ts.IoError, match="no images under val/"):
        ts.imageArchive(str(tar), "val")
    # A member whose deflated bytes are damaged (the first, test/cat/0.png, whose local
    # header opens the file) is an error naming it when it is read; the others still read.
    z = bytearray(data)
    start = 30 + int.from_bytes(z[26:28], "little") + int.from_bytes(z[28:30], "little")
    z[start:start + 8] = b"\xff" * 8
    (tmp_path / "damaged.zip").write_bytes(bytes(z))
    damaged = ts.imageArchive(str(tmp_path / "damaged.zip"), "test")
    with pytest.raises(ts.IoError, match="damaged.zip:test/cat/0.png"):
        damaged[0]
    np.testing.assert_array_equal(damaged[1][0], ts.imageFolder(str(root / "test"))[1][0])


def test_zip64_archives(folder, tmp_path, monkeypatch):
    import zipfile
    root = _splits(folder, tmp_path / "set")
    files = sorted(p for p in root.rglob("*") if p.is_file())
    # ZIP64 records and extra fields on every member, as for archives over 4 GiB: the
    # limits that make zipfile write them lowered to nothing.
    wide = tmp_path / "wide.zip"
    with monkeypatch.context() as m:
        m.setattr(zipfile, "ZIP64_LIMIT", 0)
        m.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 0)
        with zipfile.ZipFile(wide, "w", zipfile.ZIP_DEFLATED) as z:
            for p in files:
                z.write(p, str(p.relative_to(root)))
    data = wide.read_bytes()
    assert data[-42:-38] == b"PK\x06\x07"  # the ZIP64 locator before the end record
    # The same with the end record's own fields marked 0xFFFF..., as writers mark them when
    # the values do not fit.
    end = bytearray(data)
    end[-22 + 8:-22 + 20] = b"\xff" * 12
    marked = tmp_path / "marked.zip"
    marked.write_bytes(bytes(end))
    for split in ("train", "test"):
        want = ts.imageFolder(str(root / split))
        for archive in (wide, marked):
            got = ts.imageArchive(str(archive), split)
            assert len(got) == len(want) == 10 and got.classNames == ["cat", "dog"], archive
            for i in range(len(want)):
                np.testing.assert_array_equal(got[i][0], want[i][0], err_msg=f"{archive} {split} {i}")
                assert got[i][1] == want[i][1]
    # Damaged ZIP64 ends: the locator gone, or pointing elsewhere.
    no_locator = bytes(end[:-42]) + bytes(end[-22:])
    (tmp_path / "nolocator.zip").write_bytes(no_locator)
    moved = bytearray(end)
    moved[-42 + 8:-42 + 16] = (0).to_bytes(8, "little")
    (tmp_path / "moved.zip").write_bytes(bytes(moved))
    for name, text in (("nolocator.zip", "declares ZIP64 but no ZIP64 locator"),
                       ("moved.zip", "no ZIP64 end of central directory record where its locator says")):
        with pytest.raises(ts.IoError, match=text):
            ts.imageArchive(str(tmp_path / name), "train")
    # More than 65,535 members: zipfile itself switches to ZIP64.
    many = tmp_path / "many.zip"
    png = [(folder / c / "0.png").read_bytes() for c in ("cat", "dog")]
    n = 65_600
    with zipfile.ZipFile(many, "w", zipfile.ZIP_STORED) as z:
        for i in range(n):
            z.writestr(f"train/{'cd'[i % 2]}/{i:05d}.png", png[i % 2])
    assert many.read_bytes()[-22 + 10:-22 + 12] == b"\xff\xff"
    got = ts.imageArchive(str(many), "train")
    assert len(got) == n and got.classNames == ["c", "d"]
    np.testing.assert_array_equal(got[n - 1][0], ts.imageFolder(str(folder))[5][0])
    assert got[n - 1][1] == 1 and got.where(n - 1).endswith("train/d/65599.png")


def test_scaled_jpeg_decoding(tmp_path):
    # Smooth 240x320 photographs: decoded at a quarter of their size for resize:48, the batch
    # is close to a full decode's, the same shape, and not the same pixels.
    y, x = np.mgrid[0:240, 0:320] / 240.0
    for c, name in enumerate(["a", "b"]):
        (tmp_path / name).mkdir()
        pixels = np.stack([np.sin(3 * x + k + c) * np.cos(2 * y - k) * 0.4 + 0.5 for k in range(3)], -1)
        Image.fromarray((pixels * 255).astype(np.uint8)).save(tmp_path / name / "0.jpg", quality=95)
    ds = ts.imageFolder(str(tmp_path))
    for spec in ("resize:48,center:48", "rrc:40:0.5,flip"):
        t = ts.Transforms(spec)
        (scaled, _), = list(ts.Loader(ds, t, batchsize=2, seed=1).epoch(0))
        (full, _), = list(ts.Loader(ds, t, batchsize=2, seed=1, scaledDecode=False).epoch(0))
        assert scaled.shape == full.shape
        diff = np.abs(scaled.numpy() - full.numpy()).mean()
        assert 0 < diff < 0.01, (spec, diff)


def test_augment_ops_match_torchvision_on_uint8_images():
    torch = pytest.importorskip("torch")
    A = pytest.importorskip("torchvision.transforms.autoaugment")
    from torchvision.transforms import InterpolationMode
    rng = np.random.default_rng(7)
    # A picture with smooth parts and noise, in colour and in grey, on 8-bit levels. Even
    # sides: a quarter turn of an odd by even picture puts every sampling point on a half
    # pixel, where the nearest pixel is torchvision's float32 rounding's choice.
    y, x = np.mgrid[0:24, 0:30]
    smooth = 120 + 60 * np.sin(x / 4.0 + y / 7.0)
    levels = np.clip(np.stack([smooth + 40 * k for k in (-1, 0, 1)]) + rng.integers(-20, 21, (3, 24, 30)), 0, 255)
    levels = levels.astype(np.uint8)
    # Every operation at every magnitude TrivialAugmentWide draws, of either sign.
    space = A.TrivialAugmentWide()._augmentation_space(31)
    for channels in (3, 1):
        img = levels[:channels]
        for op, (magnitudes, signed) in space.items():
            for magnitude in (magnitudes.tolist() if magnitudes.ndim else [0.0]):
                for m in ((magnitude, -magnitude) if signed else (magnitude,)):
                    want = A._apply_op(torch.from_numpy(img.copy()), op, m, InterpolationMode.NEAREST, None)
                    got = np.rint(ts.Transforms.augmentOp(img / np.float32(255), op, m) * 255).astype(int)
                    differ = (got != want.numpy().astype(int)).mean()
                    if op in ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"):
                        # A sampling point within rounding of a half pixel (a turn by 45 degrees
                        # has some) may go to the other neighbour than torchvision's float32 grid.
                        assert differ <= 0.01, (channels, op, m, differ)
                    else:
                        assert differ == 0, (channels, op, m, differ)
    # A flat picture has no range for autocontrast to stretch.
    flat = np.full((1, 4, 4), 128 / 255, np.float32)  # on a level: kept as it is
    np.testing.assert_array_equal(ts.Transforms.augmentOp(flat, "AutoContrast"), flat)
    with pytest.raises(ts.ModuleError, match="unknown operation 'Blur'"):
        ts.Transforms.augmentOp(flat, "Blur", 1.0)
    with pytest.raises(ts.ShapeError, match=r"\[0, 1\]"):
        ts.Transforms.augmentOp(flat * 3, "Brightness", 0.5)


def test_trivial_augment(folder):
    t = ts.Transforms().trivialAugment()
    assert repr(t) == "tessera.Transforms('trivial')" == repr(ts.Transforms("trivial"))
    ds = ts.imageFolder(str(folder), channels=3)
    originals = np.stack([ds[i][0] for i in range(10)])
    changed = 0
    for epoch in range(6):
        (x, _), = list(ts.Loader(ds, t, batchsize=10, seed=1, workers=2, shuffle=False).epoch(epoch))
        (again, _), = list(ts.Loader(ds, t, batchsize=10, seed=1, shuffle=False).epoch(epoch))
        np.testing.assert_array_equal(x.numpy(), again.numpy())  # seeded by sample, not by worker
        assert x.numpy().min() >= 0 and x.numpy().max() <= 1
        changed += sum(not np.allclose(x.numpy()[i], originals[i], atol=1 / 255) for i in range(10))
    assert changed >= 40  # one operation of 14 is the identity, and some magnitudes are small
    (evaluated, _), = list(ts.Loader(ds, t, batchsize=10, shuffle=False, train=False).epoch(0))
    np.testing.assert_array_equal(evaluated.numpy(), originals)
    with pytest.raises(ts.ModuleError):
        ts.Transforms("trivial:3")


def test_augment_magnitude_tables_are_torchvisions():
    pytest.importorskip("torch")
    A = pytest.importorskip("torchvision.transforms.autoaugment")
    for policy, space in (("trivial", A.TrivialAugmentWide()._augmentation_space(31)),
                          ("randaugment", A.RandAugment()._augmentation_space(31, (24, 30)))):
        assert len(space) == 14
        for op, (magnitudes, signed) in space.items():
            got, sign = ts.Transforms.augmentMagnitudes(policy, op, 24, 30)
            want = magnitudes.tolist() if magnitudes.ndim else [0.0] * 31
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5, err_msg=f"{policy} {op}")
            assert sign == signed, (policy, op)
    with pytest.raises(ts.ModuleError):
        ts.Transforms.augmentMagnitudes("autoaugment", "ShearX", 24, 30)


def test_rand_augment(folder):
    t = ts.Transforms().randAugment()
    assert repr(t) == "tessera.Transforms('randaugment')" == repr(ts.Transforms("randaugment"))
    assert repr(ts.Transforms("randaugment:3:15")) == "tessera.Transforms('randaugment:3:15')"
    assert repr(ts.Transforms().randAugment(1)) == "tessera.Transforms('randaugment:1')"
    ds = ts.imageFolder(str(folder), channels=3)
    originals = np.stack([ds[i][0] for i in range(10)])
    strong = ts.Transforms("randaugment:2:30")
    (x, _), = list(ts.Loader(ds, strong, batchsize=10, seed=1, workers=2, shuffle=False).epoch(0))
    (again, _), = list(ts.Loader(ds, strong, batchsize=10, seed=1, shuffle=False).epoch(0))
    np.testing.assert_array_equal(x.numpy(), again.numpy())
    assert sum(not np.allclose(x.numpy()[i], originals[i], atol=1 / 255) for i in range(10)) >= 8
    (evaluated, _), = list(ts.Loader(ds, strong, batchsize=10, shuffle=False, train=False).epoch(0))
    np.testing.assert_array_equal(evaluated.numpy(), originals)
    for bad in ("randaugment:0", "randaugment:2:31", "randaugment:2:-1", "randaugment:1:2:3"):
        with pytest.raises(ts.ModuleError):
            ts.Transforms(bad)


def test_image_lists(folder, tmp_path):
    import csv
    files = sorted((folder / c / f.name, c) for c in ("cat", "dog") for f in (folder / c).iterdir())
    want = ts.imageFolder(str(folder))
    # Relative and absolute names, a quoted one with a comma, CRLF line ends, a byte order
    # mark, extra columns, the columns chosen by name.
    (tmp_path / "sub").mkdir()
    rows = []
    for i, (path, cls) in enumerate(files):
        name = f"sub/{i}, copy.png" if i % 2 else str(path)
        if i % 2:
            (tmp_path / name).write_bytes(path.read_bytes())
        rows.append({"id": i, "kind": cls, "image": name})
    with open(tmp_path / "list.csv", "w", newline="", encoding="utf-8-sig") as out:
        w = csv.DictWriter(out, fieldnames=["id", "kind", "image"], lineterminator="\r\n")
        w.writeheader()
        w.writerows(rows)
    got = ts.imageList(str(tmp_path / "list.csv"), pathColumn="image", labelColumn="kind")
    assert len(got) == len(want) == 10 and got.classNames == ["cat", "dog"]
    for i in range(10):
        np.testing.assert_array_equal(got[i][0], want[i][0])
        assert got[i][1] == want[i][1]
    assert got.where(1).endswith("1, copy.png")
    # Whole numbers are classes 0..max (007 is 7); given names label by name.
    (tmp_path / "numbers.csv").write_text("file,class\n" + "".join(f"{p},{k}\n" for p, k in
                                                                   ((files[0][0], "007"), (files[5][0], 2))))
    numbers = ts.imageList(str(tmp_path / "numbers.csv"))
    assert numbers.classes == 8 and [numbers[i][1] for i in range(2)] == [7, 2]
    (tmp_path / "dogs.csv").write_text(f"f,c\n{files[9][0]},dog\n")
    assert ts.imageList(str(tmp_path / "dogs.csv"))[0][1] == 0  # alone: the first class
    assert ts.imageList(str(tmp_path / "dogs.csv"), classes=["cat", "dog"])[0][1] == 1
    # Errors name the file and line.
    bad = {"empty.csv": ("", "empty"),
           "missing.csv": ("file,class\nnowhere.png,cat\n", "line 2: image .*nowhere.png not found"),
           "short.csv": (f"file,class\n{files[0][0]},cat\n{files[1][0]}\n", "line 3: 1 field"),
           "quote.csv": (f'file,class\n"{files[0][0]},cat\n', "line 2: a quote is never closed"),
           "after.csv": (f'file,class\n"{files[0][0]}"x,cat\n', "line 2: text after a closing quote"),
           "one.csv": ("file\nx.png\n", "two"),
           "nolabel.csv": (f"file,class\n{files[0][0]},\n", "line 2: an empty file name or class")}
    for name, (text, message) in bad.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ts.IoError, match=name + ".*" + message):
            ts.imageList(str(tmp_path / name))
    with pytest.raises(ts.IoError, match="no column 'label' .*id, kind, image"):
        ts.imageList(str(tmp_path / "list.csv"), labelColumn="label")
    with pytest.raises(ts.IoError, match="line 2: class 'cat' is not one of the 1 classes given"):
        ts.imageList(str(tmp_path / "list.csv"), pathColumn="image", labelColumn="kind", classes=["dog"])


def test_balanced_loader():
    labels = np.array([0] * 45 + [1] * 5, np.int32)
    images = np.arange(50, dtype=np.float32).reshape(50, 1, 1, 1)
    ds = ts.tensorDataset(images, labels)
    seen = [int(l) for e in range(8) for _, y in ts.Loader(ds, batchsize=10, seed=2, balanced=True).epoch(e)
            for l in y.numpy()]
    assert len(seen) == 400 and 0.4 < np.mean(seen) < 0.6  # class 1 is a tenth of the set, half of the draws
    (a, _), = list(ts.Loader(ds, batchsize=50, seed=2, balanced=True, workers=2).epoch(1))
    (b, _), = list(ts.Loader(ds, batchsize=50, seed=2, balanced=True).epoch(1))
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_image_list_class_numbers(folder, tmp_path):
    png = folder / "cat" / "0.png"
    (tmp_path / "huge.csv").write_text(f"file,class\n{png},3\n{png},1000000\n")
    with pytest.raises(ts.IoError, match="huge.csv line 3: class 1000000: whole-number classes .* at most 999999"):
        ts.imageList(str(tmp_path / "huge.csv"))
    # Names and numbers mixed: every label is a name ("007" and "7" differ).
    (tmp_path / "mixed.csv").write_text(f"file,class\n{png},007\n{png},7\n{png},cat\n")
    mixed = ts.imageList(str(tmp_path / "mixed.csv"))
    assert mixed.classNames == ["007", "7", "cat"] and [mixed[i][1] for i in range(3)] == [0, 1, 2]


def test_image_list_of_words(folder, tmp_path):
    # "FILE CLASS" lines (.txt): the class is the last word, the file may hold spaces.
    files = sorted((folder / c / f.name, k) for k, c in enumerate(("cat", "dog")) for f in (folder / c).iterdir())
    (tmp_path / "with space.png").write_bytes(files[0][0].read_bytes())
    lines = [f"with space.png {files[0][1]}"] + [f"  {p}\t{k}  " for p, k in files[1:]] + [""]
    (tmp_path / "list.txt").write_text("\n".join(lines))
    got = ts.imageList(str(tmp_path / "list.txt"))
    want = ts.imageFolder(str(folder))
    assert len(got) == 10 and got.classes == 2
    for i in range(10):
        np.testing.assert_array_equal(got[i][0], want[i][0])
        assert got[i][1] == want[i][1]
    (tmp_path / "one.txt").write_text(f"{files[0][0]} 0\nlonely\n")
    with pytest.raises(ts.IoError, match="one.txt line 2: one word"):
        ts.imageList(str(tmp_path / "one.txt"))
    with pytest.raises(ts.IoError, match="no named columns"):
        ts.imageList(str(tmp_path / "list.txt"), labelColumn="class")
    (tmp_path / "long.txt").write_text("x" * 300 + ".png 0\n")  # a name the file system refuses
    with pytest.raises(ts.IoError, match="long.txt line 1: image .* not found"):
        ts.imageList(str(tmp_path / "long.txt"))


def test_first_of_each_class_takes_the_classes_in_turn():
    """A data set sorted by class gives every class its share, in the data's order."""
    images = np.arange(7, dtype=np.float32).reshape(7, 1, 1, 1)
    data = ts.tensorDataset(images, np.array([0, 0, 0, 0, 1, 1, 2], np.int32), classes=3)
    part, counts = ts.firstOfEachClass(data, 4)
    assert counts == [2, 1, 1]
    assert [float(part[i][0][0, 0, 0]) for i in range(len(part))] == [0.0, 1.0, 4.0, 6.0]
