"""Writes small generated data sets in the formats `tessera train --data` reads, with
other libraries' writers (Pillow for JPEG and PNG, NumPy for .npy and the CIFAR records):

    make_image_data.py folder DIR   DIR/train/<class>/*.png|*.jpg and DIR/test/<class>/...
    make_image_data.py cifar10 DIR  DIR/data_batch_1.bin .. data_batch_5.bin, test_batch.bin
    make_image_data.py npy DIR      DIR/{train,test}_{images,labels}.npy
    make_image_data.py zip FILE     the folder data set, deflated into the zip FILE under a top folder
    make_image_data.py tgz FILE     the folder data set in the .tar.gz FILE
    make_image_data.py cifar10tgz FILE  the CIFAR-10 files in FILE.tar.gz under cifar-10-batches-bin/,
                                        as cifar-10-binary.tar.gz is distributed
    make_image_data.py csv DIR      the folder data set's images in DIR/pictures/, listed with their
                                    classes in DIR/train.csv (Python's csv writer) and DIR/test.txt
                                    ("FILE CLASS" lines; two of the three classes)

Three classes told apart by which colour channel is bright, with noise and a bright square
in a random place; folder images have varying sizes (a transform must resize them).
"""
import os
import sys

import numpy as np
from PIL import Image


def picture(rng, k, height, width):
    img = rng.uniform(0.2, 0.35, size=(height, width, 3))
    img[:, :, k] += 0.4
    s = max(2, min(height, width) // 3)
    y, x = rng.integers(0, height - s), rng.integers(0, width - s)
    img[y:y + s, x:x + s, :] += 0.2
    return (np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8)


def folder(root, rng):
    for split, count in (("train", 40), ("test", 15)):
        for k, name in enumerate(("blue-ish", "green-ish", "red-ish")):
            d = os.path.join(root, split, name)
            os.makedirs(d, exist_ok=True)
            for i in range(count):
                channel = 2 - k  # the names sort blue, green, red
                px = picture(rng, channel, int(rng.integers(24, 40)), int(rng.integers(24, 40)))
                img = Image.fromarray(px)
                if i % 3 == 0:
                    img.convert("L").save(os.path.join(d, f"{i}.png"))  # grayscale files too
                elif i % 3 == 1:
                    img.save(os.path.join(d, f"{i}.png"))
                else:
                    img.save(os.path.join(d, f"{i}.jpg"), quality=92)


def records(rng, n):
    out = bytearray()
    labels = []
    for i in range(n):
        k = i % 3
        px = picture(rng, k, 32, 32)
        out.append(k)
        out += px.transpose(2, 0, 1).tobytes()  # the red, green and blue planes
        labels.append(k)
    return bytes(out), np.array(labels), np.frombuffer(out, np.uint8)


def cifar10(root, rng):
    os.makedirs(root, exist_ok=True)
    for b in range(1, 6):
        with open(os.path.join(root, f"data_batch_{b}.bin"), "wb") as f:
            f.write(records(rng, 30)[0])
    with open(os.path.join(root, "test_batch.bin"), "wb") as f:
        f.write(records(rng, 30)[0])


def npy(root, rng):
    os.makedirs(root, exist_ok=True)
    for split, n in (("train", 150), ("test", 30)):
        weights = np.array([0.6, 0.3, 0.1])  # the classes differ in brightness
        images = np.stack([(picture(rng, i % 3, 28, 28) @ weights).astype(np.uint8) for i in range(n)])
        np.save(os.path.join(root, f"{split}_images.npy"), images)  # [N, 28, 28] uint8
        np.save(os.path.join(root, f"{split}_labels.npy"), np.arange(n) % 3)


def zipped(path, rng):
    import tempfile
    import zipfile
    with tempfile.TemporaryDirectory() as tmp:
        folder(tmp, rng)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for top, _, files in sorted(os.walk(tmp)):
                for name in sorted(files):
                    full = os.path.join(top, name)
                    z.write(full, os.path.join("images", os.path.relpath(full, tmp)))


def folder_tgz(path, rng):
    import tarfile
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        folder(tmp, rng)
        with tarfile.open(path, "w:gz") as t:
            for split in ("train", "test"):
                t.add(os.path.join(tmp, split), arcname=split)


def cifar10_tgz(path, rng):
    import tarfile
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        cifar10(os.path.join(tmp, "cifar-10-batches-bin"), rng)
        with open(os.path.join(tmp, "cifar-10-batches-bin", "readme.html"), "w") as f:
            f.write("<p>a member the reader skips</p>")
        with tarfile.open(path, "w:gz") as t:
            t.add(os.path.join(tmp, "cifar-10-batches-bin"), arcname="cifar-10-batches-bin")


def listed(root, rng):
    import csv
    import shutil
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        folder(tmp, rng)
        os.makedirs(os.path.join(root, "pictures"), exist_ok=True)
        for split in ("train", "test"):
            rows = []
            for name in sorted(os.listdir(os.path.join(tmp, split))):
                if split == "test" and name == "blue-ish":
                    continue  # the test classes must still be labelled as in training
                for f in sorted(os.listdir(os.path.join(tmp, split, name))):
                    target = f"{split} {name}, {f}"  # a space and a comma: a quoted field
                    shutil.copy(os.path.join(tmp, split, name, f), os.path.join(root, "pictures", target))
                    rows.append({"file": "pictures/" + target, "species": name, "note": "generated"})
            rng.shuffle(rows)
            if split == "test":
                with open(os.path.join(root, "test.txt"), "w") as out:
                    out.writelines(f"{r['file']} {r['species']}\n" for r in rows)
                continue
            with open(os.path.join(root, split + ".csv"), "w", newline="") as out:
                w = csv.DictWriter(out, fieldnames=["file", "species", "note"])
                w.writeheader()
                w.writerows(rows)


def main():
    kind, root = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(7)
    {"folder": folder, "cifar10": cifar10, "npy": npy, "zip": zipped, "tgz": folder_tgz, "cifar10tgz": cifar10_tgz,
     "csv": listed}[kind](root, rng)


if __name__ == "__main__":
    main()
