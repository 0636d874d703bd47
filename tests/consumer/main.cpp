#include <containers/Sequential.h>
#include <modules/Activation.h>
#include <modules/Linear.h>

#include <cstdio>

int main() {
    using namespace tessera;
    Sequential net;
    net.append(std::make_shared<Linear>(4, 8)).append(std::make_shared<Activation>(ActivationKind::relu));
    Tensor y = net(Tensor::full({2, 4}, 1.0f));
    std::printf("consumer ok: %s\n", y.shape().str().c_str());
    return y.shape() == Shape{2, 8} ? 0 : 1;
}
