// Trains a small MLP on synthetic spirals and prints the loss falling.
//   train_mlp [epochs]
#include <cstdio>
#include <cstdlib>

#include "examples/Spirals.h"

int main(int argc, char** argv) {
    tessera::examples::TrainConfig config;
    if (argc > 1) config.epochs = std::atoi(argv[1]);
    if (config.epochs <= 0) {
        std::fprintf(stderr, "usage: train_mlp [epochs > 0]\n");
        return 2;
    }
    std::printf("MLP 2-%lld-%lld-3 on 900 spiral points, batch %lld, SGD lr %.2f\n",
                static_cast<long long>(config.hidden), static_cast<long long>(config.hidden),
                static_cast<long long>(config.batch), static_cast<double>(config.lr));
    float accuracy = 0.0f;
    tessera::examples::trainMlpOnSpirals(config, accuracy, [&](int epoch, float loss, float acc) {
        if (epoch % 5 == 4 || epoch == 0 || epoch + 1 == config.epochs) {
            std::printf("epoch %3d  loss %.4f  accuracy %.1f%%\n", epoch + 1, static_cast<double>(loss),
                        100.0 * static_cast<double>(acc));
        }
    });
    std::printf("final accuracy %.1f%%\n", 100.0 * static_cast<double>(accuracy));
    return 0;
}
