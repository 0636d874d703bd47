#include <tessera/tessera.h> // the umbrella header, as an installed project includes it

#include <cstdio>

int main() {
    using namespace tessera;
    Sequential net;
    net.append(std::make_shared<Linear>(4, 8)).append(std::make_shared<Activation>(ActivationKind::relu));
    Tensor y = net(Tensor::randn({2, 4}));
    std::printf("consumer ok: %s\n", y.shape().str().c_str());
    return y.shape() == Shape{2, 8} ? 0 : 1;
}
