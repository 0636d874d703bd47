#!/usr/bin/python3
"""Text over padded batches, from PyTorch: a classifier given token ids and each sequence's
length, which makes its padding mask from the lengths, exported to ONNX, imported in
Python, checked against PyTorch, fine-tuned, saved, and run by `tessera run` on .npy files:
docs/onnx.md's "A worked example: text over padded batches".

    PYTHONPATH=build/python /usr/bin/python3 docs/examples/padded_text.py build/tools/tessera/tessera /tmp/work
"""
import os
import subprocess
import sys

import numpy as np
import torch

import tessera as ts

tessera, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
VOCAB, LENGTH, WIDTH = 10, 8, 16


# 1. The model in PyTorch: the mask is made from the lengths (True at padding), as
#    nn.TransformerEncoder's src_key_padding_mask takes it; the mean is over the real tokens.
class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, WIDTH)
        layer = torch.nn.TransformerEncoderLayer(WIDTH, 2, 2 * WIDTH, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = torch.nn.Linear(WIDTH, 2)

    def forward(self, ids, lengths):
        pad = torch.arange(ids.shape[1])[None, :] >= lengths[:, None]
        h = self.encoder(self.embedding(ids), src_key_padding_mask=pad).masked_fill(pad[..., None], 0.0)
        return self.head(h.sum(1) / lengths[:, None].float())


rng = np.random.default_rng(3)


def batch(n):
    """Ids (the padding holds random ids too), lengths from 3 to LENGTH, and the label:
    whether most of the real ids are below VOCAB / 2."""
    ids = rng.integers(0, VOCAB, (n, LENGTH))
    lengths = rng.integers(3, LENGTH + 1, n)
    real = np.arange(LENGTH)[None, :] < lengths[:, None]
    labels = ((ids < VOCAB // 2) & real).sum(1) * 2 > lengths
    return ids.astype(np.int32), lengths.astype(np.int32), labels.astype(np.int32)


torch.manual_seed(0)
model = Classifier().eval()
ids, lengths, _ = batch(4)
path = os.path.join(work, "padded_text.onnx")
torch.onnx.export(model, (torch.from_numpy(ids).long(), torch.from_numpy(lengths).long()), path,
                  opset_version=17, input_names=["ids", "lengths"], output_names=["scores"],
                  dynamic_axes={"ids": {0: "batch"}, "lengths": {0: "batch"}, "scores": {0: "batch"}})

# 2. Imported: int64 inputs are int32 in Tessera; the same scores as PyTorch's, and the
#    padding's ids change nothing.
net = ts.importOnnx(path)
net.evalMode()
with torch.no_grad():
    want = model(torch.from_numpy(ids).long(), torch.from_numpy(lengths).long()).numpy()
got = net([ids, lengths])[0].numpy().copy()
print(f"largest difference from PyTorch: {np.abs(got - want).max():.2e}")
assert np.allclose(got, want, rtol=1e-4, atol=1e-5)
past = np.arange(LENGTH)[None, :] >= lengths[:, None]
assert np.array_equal(net([np.where(past, (ids + 1) % VOCAB, ids).astype(np.int32), lengths])[0].numpy(), got)

# 3. Fine-tuned in Python on fresh batches: Adam, cross-entropy.
cost, opt = ts.CrossEntropy(), ts.Adam(alpha=1e-2)
opt.setupOn(net, useGlobalState=True)
net.trainMode()
errors = []
for step in range(150):
    ids, lengths, labels = batch(32)
    error, grad = cost(net([ids, lengths])[0], labels)
    opt.zeroGradParams()
    net.backward(grad)
    opt.update()
    errors.append(error)
net.evalMode()
ids, lengths, labels = batch(512)
accuracy = float((net([ids, lengths])[0].numpy().argmax(1) == labels).mean())
print(f"loss {np.mean(errors[:10]):.3f} -> {np.mean(errors[-10:]):.3f}, held-out accuracy {accuracy:.3f}")
assert np.mean(errors[-10:]) < 0.5 * np.mean(errors[:10]) and accuracy >= 0.9

# 4. Saved, and run from the command line on .npy inputs: the same scores.
saved = os.path.join(work, "padded_text.h5")
net.save(saved)
np.save(os.path.join(work, "ids.npy"), ids)
np.save(os.path.join(work, "lengths.npy"), lengths)
scores = os.path.join(work, "scores.npy")
subprocess.run([tessera, "run", saved, "--input", os.path.join(work, "ids.npy"), os.path.join(work, "lengths.npy"),
                "-o", scores], check=True)
assert np.allclose(np.load(scores), net([ids, lengths])[0].numpy(), rtol=1e-5, atol=1e-6)
print("padded text: imported, fine-tuned and run: done")
