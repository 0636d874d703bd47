#include "models/LeNet.h"

#include <stdexcept>

#include "modules/Activation.h"
#include "modules/Conv.h"
#include "modules/Flatten.h"
#include "modules/Linear.h"
#include "modules/Pool.h"
#include "modules/RNN.h"
#include "modules/Reshape.h"

namespace tessera {

std::shared_ptr<Sequential> loadLeNet(int64_t classes) {
    auto net = std::make_shared<Sequential>("lenet");
    net->append(std::make_shared<Conv2D>(1, 16, 3, ConvOptions{.name = "conv1"}));
    net->append(std::make_shared<MaxPool2D>(2, PoolOptions{.name = "pool1"}));
    net->append(std::make_shared<Activation>(ActivationKind::relu, ActivationOptions{.name = "relu1"}));
    net->append(std::make_shared<Conv2D>(16, 32, 4, ConvOptions{.name = "conv2"}));
    net->append(std::make_shared<MaxPool2D>(2, PoolOptions{.name = "pool2"}));
    net->append(std::make_shared<Activation>(ActivationKind::relu, ActivationOptions{.name = "relu2"}));
    net->append(std::make_shared<Flatten>("flatten"));
    net->append(std::make_shared<Linear>(800, 1024, LinearOptions{.name = "fc1"}));
    net->append(std::make_shared<Activation>(ActivationKind::relu, ActivationOptions{.name = "relu3"}));
    net->append(std::make_shared<Linear>(1024, classes, LinearOptions{.name = "fc2"}));
    return net;
}

std::shared_ptr<Sequential> loadMLP(const std::vector<int64_t>& sizes) {
    if (sizes.size() < 2) throw ModuleError("loadMLP: needs at least an input and an output size");
    auto net = std::make_shared<Sequential>("mlp");
    net->append(std::make_shared<Flatten>("flatten"));
    for (size_t i = 0; i + 1 < sizes.size(); ++i) {
        net->append(
            std::make_shared<Linear>(sizes[i], sizes[i + 1], LinearOptions{.name = "fc" + std::to_string(i + 1)}));
        if (i + 2 < sizes.size()) {
            net->append(std::make_shared<Activation>(ActivationKind::relu,
                                                     ActivationOptions{.name = "relu" + std::to_string(i + 1)}));
        }
    }
    return net;
}

std::shared_ptr<Sequential> loadLSTM(int64_t hidden, int64_t classes) {
    auto net = std::make_shared<Sequential>("lstm");
    net->append(std::make_shared<Reshape>(Shape{0, 28, 28}, "rows"))
        .append(std::make_shared<RNN>(
            28, hidden, RNNOptions{.layers = 2, .mode = RnnMode::lstm, .batchFirst = true, .name = "lstm"}))
        .append(std::make_shared<Linear>(hidden, classes, LinearOptions{.name = "fc"}));
    return net;
}

} // namespace tessera
