// Writes a small image folder (PNG and JPEG files, one sub-folder per class), then trains
// a convolutional network on it through a Loader with two background workers and
// augmentation, and checks the accuracy on a held-out folder.
#include <tessera/tessera.h>

#include <cstdio>
#include <filesystem>

using namespace tessera;

// A 24x24 picture of class k: channel k bright, plus noise and a bright square somewhere.
Image picture(int k, uint64_t seed) {
    Image img(3, 24, 24);
    const auto corner = static_cast<int64_t>(randomBits(seed, 0) % 16);
    for (int64_t c = 0; c < 3; ++c) {
        for (int64_t y = 0; y < 24; ++y) {
            for (int64_t x = 0; x < 24; ++x) {
                float v = (c == k ? 0.6f : 0.2f) + 0.2f * randomUniform(seed, 1 + (c * 24 + y) * 24 + x);
                if (y >= corner && y < corner + 8 && x >= corner && x < corner + 8) v += 0.2f;
                img.at(c, y, x) = v;
            }
        }
    }
    return img;
}

void writeFolder(const std::string& root, int perClass, uint64_t seed) {
    const char* names[] = {"blue", "green", "red"}; // sorted: class 0 is "blue"
    const int channel[] = {2, 1, 0};
    for (int k = 0; k < 3; ++k) {
        const std::string dir = root + "/" + names[k];
        std::filesystem::create_directories(dir);
        for (int i = 0; i < perClass; ++i) {
            const Image img = picture(channel[k], seed + static_cast<uint64_t>(k * 1000 + i));
            if (i % 2 == 0) {
                writePng(dir + "/" + std::to_string(i) + ".png", img);
            } else {
                writeJpeg(dir + "/" + std::to_string(i) + ".jpg", img, 90);
            }
        }
    }
}

int main() {
    const std::string root = (std::filesystem::temp_directory_path() / "tessera_image_folder").string();
    std::filesystem::remove_all(root);
    writeFolder(root + "/train", 40, 1);
    writeFolder(root + "/test", 10, 2);

    // Random crops (after 2 pixels of padding) and flips in training; evaluation sees the
    // same geometry without them. Two workers read and transform ahead of the steps.
    const Transforms augment = Transforms::parse("crop:24:2,flip,normalize:0.5:0.25");
    Loader train(imageFolder(root + "/train"), augment, {.batchsize = 16, .seed = 1, .workers = 2});
    Loader test(imageFolder(root + "/test"), augment, {.batchsize = 30, .shuffle = false, .train = false});
    std::printf("%lld training images of %s in %lld classes\n", static_cast<long long>(train.size()),
                train.sampleShape().str().c_str(), static_cast<long long>(train.dataset().classes()));

    manualSeed(1);
    auto net = std::make_shared<Sequential>("net");
    net->append(std::make_shared<Conv2D>(3, 8, 3, ConvOptions{.pad = {1}}));
    net->append(std::make_shared<Activation>(ActivationKind::relu));
    net->append(std::make_shared<MaxPool2D>(2));
    net->append(std::make_shared<Flatten>());
    net->append(std::make_shared<Linear>(8 * 12 * 12, 3));

    Adam adam(3e-3f);
    adam.setupOn(*net, true);
    CrossEntropy cost;
    Trainer trainer(*net, cost, adam, {.progress = false});
    double first = 0, last = 0;
    for (int epoch = 0; epoch < 5; ++epoch) {
        last = trainer.train(train);
        if (epoch == 0) first = last;
        std::printf("epoch %d: loss %.4f, %.1f%% of the time waiting for data\n", epoch + 1, last,
                    100.0 * trainer.dataSeconds() / trainer.epochSeconds());
    }
    CrossEntropy validation;
    const double accuracy = 1.0 - Validator(*net, validation, {.progress = false}).validate(test);
    std::printf("test accuracy %.1f%%\n", 100.0 * accuracy);
    std::filesystem::remove_all(root);
    return last < 0.5 * first && accuracy > 0.9 ? 0 : 1;
}
