#!/usr/bin/python3
"""LeNet on Fashion-MNIST from Python: built graph-style, shape-checked, trained by a
loop written here, validated after each epoch, saved and loaded back."""

import os
import tempfile

import numpy as np

import tessera as ts

ts.manualSeed(1)

# The network, graph-style: each layer's node() takes its parents.
x = ts.Identity(name="images").node()
h = ts.Conv2D(1, 16, 3, name="conv1").node(x)
h = ts.MaxPool2D(2).node(h)
h = ts.Activation(ts.relu).node(h)
h = ts.Conv2D(inmaps=16, outmaps=32, size=4, name="conv2").node(h)
h = ts.MaxPool2D(2).node(h)
h = ts.Activation(ts.relu).node(h)
h = ts.Flatten().node(h)
h = ts.Linear(800, 1024, name="fc1").node(h)
h = ts.Activation(ts.relu).node(h)
h = ts.Linear(1024, 10, name="fc2").node(h)
net = ts.Graph(inputs=x, outputs=h, name="lenet")

# Shapes first: nothing is allocated, a bad shape is a ShapeError naming the layer.
print(ts.check(net, input=(64, 1, 28, 28)))
print(ts.summary(net, input=(1, 1, 28, 28)))

# Data as NumPy arrays (here the first 12,000 training images, and the test set).
images, labels = ts.loadMnist(split="train", limit=12000)
test_images, test_labels = ts.loadMnist(split="t10k")
x_train, y_train = images.numpy(), labels.numpy()

cost = ts.CrossEntropy()
optimizer = ts.Adam(alpha=1e-3)
optimizer.setupOn(net, useGlobalState=True)
validator = ts.Validator(net, cost, batchsize=500)

batch = 64
rng = np.random.default_rng(1)
for epoch in range(2):
    net.trainMode()
    order = rng.permutation(len(x_train))
    errors = []
    for i in range(0, len(order) - batch + 1, batch):
        idx = order[i:i + batch]
        scores = net(x_train[idx])                   # forward (NumPy in, Tensor out)
        error, grad = cost(scores, y_train[idx])     # the loss and its gradient
        optimizer.zeroGradParams()
        net.backward(grad)                           # backward through the graph
        optimizer.update()
        errors.append(error)
    accuracy = 1 - validator.validate(test_images, test_labels)   # runs in eval mode
    print(f"epoch {epoch + 1}: train loss {np.mean(errors):.3f}, test accuracy {accuracy:.2%}")

assert accuracy > 0.8

# Save (HDF5, with the blueprint) and load back: the same predictions.
path = os.path.join(tempfile.mkdtemp(), "lenet.h5")
net.save(path)
again = ts.load(path)
again.evalMode()
net.evalMode()
sample = test_images.numpy()[:8]
assert np.array_equal(again(sample).numpy(), net(sample).numpy())
print("predicted", again(sample).numpy().argmax(axis=1), "labels", test_labels.numpy()[:8])
