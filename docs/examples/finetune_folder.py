"""Your own images, a zoo network with your number of classes, and a model file that
carries its preprocessing: docs/python.md's "From a folder of PNGs to tessera predict".

A folder of three classes of PNGs (drawn here: circles, squares and stripes), the zoo's
ResNet-18 for 32x32 images with its 10-way head swapped for a 3-way one, a few epochs, a
model file that keeps the input shape, the class names and the transforms; then
`tessera predict` on one image, with no preprocessing option, gives the class and the
probability Python computes.

    PYTHONPATH=build/python /usr/bin/python3 docs/examples/finetune_folder.py build/tools/tessera/tessera /tmp/work
"""

import csv
import os
import subprocess
import sys

import numpy as np
from PIL import Image

import tessera as ts


def draw_folder(root, rng, per_class):
    """root/{train,test}/{circle,square,stripes}/*.png: 40x40 RGB pictures of each shape
    at a random place and size, in a random tint of its colour, on noise."""
    yy, xx = np.mgrid[0:40, 0:40]
    for split, count in (("train", per_class), ("test", per_class // 3)):
        for k, name in enumerate(("circle", "square", "stripes")):
            os.makedirs(os.path.join(root, split, name), exist_ok=True)
            for i in range(count):
                img = rng.integers(0, 60, (40, 40, 3))
                cy, cx, r = rng.integers(12, 28), rng.integers(12, 28), rng.integers(6, 11)
                if name == "circle":
                    mask = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
                elif name == "square":
                    mask = (abs(yy - cy) < r) & (abs(xx - cx) < r)
                else:
                    mask = (xx // 4) % 2 == 0
                colour = np.roll(np.array([200, 40, 40]) + rng.integers(0, 50, 3), k)
                img[mask] = colour
                Image.fromarray(img.astype(np.uint8)).save(os.path.join(root, split, name, f"{i}.png"))


def main(tessera_cli, work):
    rng = np.random.default_rng(0)
    ts.manualSeed(0)
    folder = os.path.join(work, "shapes")
    draw_folder(folder, rng, per_class=24)
    train = ts.imageFolder(os.path.join(folder, "train"), channels=3)
    test = ts.imageFolder(os.path.join(folder, "test"), channels=3)
    print(f"{len(train)} training images of {train.classNames}")

    # The zoo's ResNet-18 for 32x32 images scores 10 classes: its head becomes a 3-way one.
    net = ts.loadZooModel("resnet18-cifar")
    net.replace("fc", ts.Linear(512, train.classes, name="fc"))
    # What makes an image the network's input: kept in the model file below.
    prepare = ts.Transforms("resize:32x32,normalize:0.5/0.5/0.5:0.25/0.25/0.25")

    opt = ts.Adam(alpha=1e-3)
    opt.setupOn(net, useGlobalState=True)
    trainer = ts.Trainer(net, ts.CrossEntropy(), opt, progress=False)
    loader = ts.Loader(train, prepare, batchsize=16, seed=1)
    for epoch in range(4):
        trainer.train(loader)
    error = ts.Validator(net, ts.CrossEntropy()).validate(ts.Loader(test, prepare, batchsize=32, shuffle=False,
                                                                    train=False))
    print(f"test accuracy {100 * (1 - error):.1f}% on {len(test)} images")

    model = os.path.join(work, "shapes.h5")
    net.save(model, inputs=(1, 3, 32, 32), classes=train.classNames, transforms=prepare)

    # Python: the file's transforms on one PNG, the network, a softmax.
    image = os.path.join(folder, "test", "stripes", "0.png")
    loaded = ts.load(model)
    loaded.evalMode()
    x = ts.readTransforms(model).apply(image)
    scores = loaded(x[None]).numpy()[0].astype(np.float64)
    p = np.exp(scores - scores.max())
    p /= p.sum()
    names = ts.readClassNames(model)
    print(f"Python: {names[int(p.argmax())]} {100 * p.max():.1f}%")

    # tessera predict, with no preprocessing option: the file says what to do.
    table = os.path.join(work, "predict.csv")
    out = subprocess.run([tessera_cli, "predict", model, image, "--top", "1", "--csv", table, "--quiet"],
                         capture_output=True, text=True, check=True).stdout
    print("tessera predict:", out.strip())
    row = list(csv.reader(open(table)))[1]
    q = np.array([float(v) for v in row[1:]])
    assert int(q.argmax()) == int(p.argmax()) and abs(q.max() - p.max()) < 1e-5, (q, p)
    print("the same class and probability")
    return 1 - error


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: finetune_folder.py TESSERA WORKDIR")
    accuracy = main(sys.argv[1], sys.argv[2])
    sys.exit(0 if accuracy >= 0.9 else 1)
