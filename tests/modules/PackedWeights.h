#pragma once
// The checks of Module::packWeights shared by the layers that pack (convolutions,
// bfloat16 Linear): eval-mode forwards read the weights packed by the first one (the same
// kernels, so the same bits); the library's changes (an optimizer step, setVar, loading a
// file) make them pack again, a write through memory does not; train mode and
// packWeights(false) drop the packs.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "containers/Sequential.h"
#include "io/Hdf5.h"
#include "training/Optimizer.h"

namespace tessera::testing {

// `net`: two layers with a weight "W" each, in the compute type under test, in any mode;
// `x`: an input; `packBytes`: the least the two layers' packs take; `tag` names a scratch
// file. Leaves the net in eval mode, unpacked.
inline void expectPackedWeightsFollowTheLibrary(Sequential& net, const Tensor& x, int64_t packBytes,
                                                const std::string& tag) {
    Backend& be = backendFor(Device::cpu());
    net.evalMode();
    const auto run = [&] { return net(x).plain().astype(DType::float32).toVector<float>(); };
    const std::vector<float> plain = run();

    net.packWeights();
    EXPECT_TRUE(net.weightsPacked() && net[1].weightsPacked());
    const size_t before = be.memoryStats().current;
    EXPECT_EQ(run(), plain);
    const size_t packed = be.memoryStats().current;
    EXPECT_GE(packed, before + static_cast<size_t>(packBytes));
    EXPECT_EQ(run(), plain);
    EXPECT_EQ(be.memoryStats().current, packed); // the second forward packs nothing new

    // A write through memory is not seen until packWeights() again.
    Tensor w0 = net[0].getVar("W")->data;
    const std::vector<float> original = w0.toVector<float>();
    w0.data<float>()[0] += 1.0f;
    EXPECT_EQ(run(), plain);
    net.packWeights();
    const std::vector<float> written = run();
    EXPECT_NE(written, plain);
    net.packWeights(false);
    EXPECT_FALSE(net.weightsPacked());
    EXPECT_LT(be.memoryStats().current, packed); // the packs are gone
    EXPECT_EQ(run(), written);
    w0.data<float>()[0] = original[0];
    net.packWeights();
    EXPECT_EQ(run(), plain);

    // Loading a file packs again.
    const std::string file = ::testing::TempDir() + "tessera_packed_" + tag + ".h5";
    saveModel(net, file);
    w0.data<float>()[0] += 1.0f;
    net.packWeights(); // the written weights are packed now
    EXPECT_EQ(run(), written);
    loadModel(net, file);
    EXPECT_EQ(run(), plain);
    std::remove(file.c_str());

    // An optimizer step packs again, as does setVar.
    SGD sgd(0.1f);
    sgd.setupOn(net, false);
    for (const auto& [name, var] : net.namedParams()) be.fill(var->grad, 0.5f); // eval mode: no backward
    sgd.update();
    const std::vector<float> stepped = run();
    EXPECT_NE(stepped, plain);
    net.packWeights(false);
    EXPECT_EQ(run(), stepped); // what unpacked weights give
    net.packWeights();
    EXPECT_EQ(run(), stepped);
    net[0].setVar("W", Variable::of(randomTensor(w0.shape(), 23)));
    const std::vector<float> replaced = run();
    net.packWeights(false);
    EXPECT_EQ(run(), replaced);
    EXPECT_NE(replaced, stepped);

    // Train mode never uses the packs, and drops them.
    net.packWeights();
    run();
    const size_t withPacks = be.memoryStats().current;
    net[0].getVar("W")->data.data<float>()[0] += 1.0f; // not seen by eval mode yet
    net.trainMode();
    EXPECT_LT(be.memoryStats().current, withPacks);
    const std::vector<float> trained = net(x).plain().astype(DType::float32).toVector<float>();
    EXPECT_NE(trained, replaced) << "train mode reads the weights as they are";
    net.evalMode();
    net.packWeights(false);
    EXPECT_EQ(run(), trained);
}

// Where the kernels read a layer's own weights as they are (CpuBackend::gemmPacksWeights
// false: float32 GEMMs on AVX2 CPUs), packWeights() keeps nothing: the same outputs, no
// memory, and a write through the weights' memory is seen at once. Leaves `net` unpacked.
inline void expectUnpackedWeightsAreReadAsTheyAre(Sequential& net, const Tensor& x) {
    Backend& be = backendFor(Device::cpu());
    net.evalMode();
    const auto run = [&] { return net(x).plain().astype(DType::float32).toVector<float>(); };
    const std::vector<float> plain = run();
    const size_t before = be.memoryStats().current;
    net.packWeights();
    EXPECT_TRUE(net.weightsPacked()); // asked for, though there is nothing to keep
    EXPECT_EQ(run(), plain);
    EXPECT_EQ(be.memoryStats().current, before) << "no copy of the weights is kept";
    Tensor w0 = net[0].getVar("W")->data;
    const float original = w0.data<float>()[0];
    w0.data<float>()[0] += 1.0f;
    EXPECT_NE(run(), plain) << "the weights are read as they are";
    w0.data<float>()[0] = original;
    EXPECT_EQ(run(), plain);
    net.packWeights(false);
}

} // namespace tessera::testing
