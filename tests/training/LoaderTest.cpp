// Data sets, image files, transforms and the background loader (data/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>

#include "GradCheck.h"
#include "SourceDir.h"
#include "backend/Backend.h"
#include "backend/Random.h"
#include "containers/Sequential.h"
#include "data/Dataset.h"
#include "data/Image.h"
#include "data/Loader.h"
#include "data/Npy.h"
#include "data/Transform.h"
#include "modules/Activation.h"
#include "modules/Conv.h"
#include "modules/Flatten.h"
#include "modules/Linear.h"
#include "modules/Pool.h"
#include "training/CrossEntropy.h"
#include "training/Handlers.h"
#include "training/Optimizer.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string tempDir(const std::string& name) {
    const std::string dir = ::testing::TempDir() + "tessera_loader_" + name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

void writeBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> readBytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Pixel values on the 8-bit grid, so a PNG holds them exactly.
Image gridImage(int64_t c, int64_t h, int64_t w, uint64_t seed) {
    Image img(c, h, w);
    for (size_t i = 0; i < img.pixels.size(); ++i) {
        img.pixels[i] = static_cast<float>(randomBits(seed, i) % 256) / 255.0f;
    }
    return img;
}

// A picture of class k of 3: a smooth colour field where channel k is bright, with noise
// and a random bright square; JPEG keeps it recognisable.
Image classImage(int k, int64_t side, uint64_t seed) {
    Image img(3, side, side);
    const auto sq = static_cast<int64_t>(randomBits(seed, 999) % static_cast<uint64_t>(side / 2));
    for (int64_t c = 0; c < 3; ++c) {
        for (int64_t y = 0; y < side; ++y) {
            for (int64_t x = 0; x < side; ++x) {
                float v = (c == k ? 0.65f : 0.25f) +
                          0.1f * randomUniform(seed, static_cast<uint64_t>((c * side + y) * side + x));
                if (y >= sq && y < sq + side / 3 && x >= sq && x < sq + side / 3) v += 0.2f;
                img.at(c, y, x) = v;
            }
        }
    }
    return img;
}

// ---- image files ---------------------------------------------------------------------------

TEST(ImageFiles, PngRoundTripIsExactInColourAndGray) {
    const std::string dir = tempDir("png");
    for (int c : {1, 3}) {
        const Image img = gridImage(c, 7, 5, static_cast<uint64_t>(c));
        const std::string path = dir + "/a" + std::to_string(c) + ".png";
        writePng(path, img);
        const Image back = readImage(path, c);
        ASSERT_EQ(back.str(), img.str());
        for (size_t i = 0; i < img.pixels.size(); ++i) ASSERT_FLOAT_EQ(back.pixels[i], img.pixels[i]) << i;
    }
}

TEST(ImageFiles, ChannelConversions) {
    const std::string dir = tempDir("convert");
    Image rgb(3, 1, 2);
    rgb.at(0, 0, 0) = 1.0f; // red
    rgb.at(2, 0, 1) = 1.0f; // blue
    writePng(dir + "/rgb.png", rgb);
    const Image gray = readImage(dir + "/rgb.png", 1);
    ASSERT_EQ(gray.str(), "1x1x2");
    // ITU-R 601 luma of pure red and pure blue (8-bit input)
    EXPECT_NEAR(gray.at(0, 0, 0), 0.299f, 1e-6f);
    EXPECT_NEAR(gray.at(0, 0, 1), 0.114f, 1e-6f);
    const Image g1 = gridImage(1, 3, 4, 9);
    writePng(dir + "/gray.png", g1);
    const Image g3 = readImage(dir + "/gray.png", 3);
    ASSERT_EQ(g3.str(), "3x3x4");
    for (int64_t c = 0; c < 3; ++c) {
        for (int64_t y = 0; y < 3; ++y) {
            for (int64_t x = 0; x < 4; ++x) ASSERT_FLOAT_EQ(g3.at(c, y, x), g1.at(0, y, x));
        }
    }
}

TEST(ImageFiles, JpegRoundTripIsClose) {
    const std::string dir = tempDir("jpeg");
    const Image img = classImage(1, 32, 5);
    writeJpeg(dir + "/a.jpg", img, 95);
    const Image back = readImage(dir + "/a.jpg", 3);
    ASSERT_EQ(back.str(), "3x32x32");
    double err = 0;
    for (size_t i = 0; i < img.pixels.size(); ++i) err += std::abs(back.pixels[i] - img.pixels[i]);
    EXPECT_LT(err / static_cast<double>(img.pixels.size()), 0.03); // quality 95, noisy content
    // A JPEG named .png is still read as a JPEG: the first bytes decide.
    fs::copy_file(dir + "/a.jpg", dir + "/named-wrong.png");
    EXPECT_EQ(readImage(dir + "/named-wrong.png", 3).pixels, back.pixels);
}

// A smooth colour picture: a JPEG decoded at a reduced size is close to the full one shrunk.
Image smoothImage(int64_t h, int64_t w) {
    Image img(3, h, w);
    for (int64_t c = 0; c < 3; ++c) {
        for (int64_t y = 0; y < h; ++y) {
            for (int64_t x = 0; x < w; ++x) {
                const double u = static_cast<double>(x) / static_cast<double>(w),
                             v = static_cast<double>(y) / static_cast<double>(h);
                img.at(c, y, x) = static_cast<float>(0.5 + 0.35 * std::sin(6.0 * u + 2.0 * c) * std::cos(4.0 * v - c));
            }
        }
    }
    return img;
}

double meanAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double sum = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) sum += std::abs(a[i] - b[i]);
    return sum / static_cast<double>(a.size());
}

TEST(ImageFiles, JpegScaledDecodeKeepsAtLeastTheScaleAskedFor) {
    const std::string dir = tempDir("jpeg_scaled");
    writeJpeg(dir + "/a.jpg", smoothImage(240, 320), 95);
    const Image full = readImage(dir + "/a.jpg", 3);
    ASSERT_EQ(full.str(), "3x240x320");
    // The least M of 1..8 with M/8 >= the scale asked for; sides rounded up, as libjpeg does.
    for (const auto& [least, eighths] : std::vector<std::pair<double, int64_t>>{
             {2.0, 8}, {1.0, 8}, {0.9, 8}, {0.875, 7}, {0.5, 4}, {0.3, 3}, {0.125, 1}, {0.01, 1}}) {
        const Image img = readImage(dir + "/a.jpg", 3, [&](int64_t h, int64_t w) {
            EXPECT_EQ(h, 240);
            EXPECT_EQ(w, 320);
            return DecodePlan{.least = least};
        });
        EXPECT_EQ(img.height, (240 * eighths + 7) / 8) << least;
        EXPECT_EQ(img.width, (320 * eighths + 7) / 8) << least;
        if (eighths == 8) {
            EXPECT_EQ(img.pixels, full.pixels) << least;
        }
    }
    // Half size: close to the full decode shrunk (antialiased) to that size.
    const Image half = readImage(dir + "/a.jpg", 3, [](int64_t, int64_t) { return DecodePlan{.least = 0.5}; });
    const Image shrunk = Transforms().resize(120, 160).apply(full, 0, 0, 0, false);
    EXPECT_LT(meanAbsDiff(half.pixels, shrunk.pixels), 0.01);
    EXPECT_EQ(readImage(dir + "/a.jpg", 1, [](int64_t, int64_t) { return DecodePlan{.least = 0.25}; }).str(),
              "1x60x80");
    // A PNG has no scaled decoding: it is read whole.
    writePng(dir + "/b.png", smoothImage(24, 32));
    EXPECT_EQ(readImage(dir + "/b.png", 3, [](int64_t, int64_t) { return DecodePlan{.least = 0.125}; }).str(),
              "3x24x32");
}

// A picture with detail in every block (a smooth wave and noise), so that a misplaced or
// differently upsampled pixel shows.
Image wavyImage(int64_t channels, int64_t h, int64_t w) {
    Image img(channels, h, w);
    for (int64_t c = 0; c < channels; ++c) {
        for (int64_t y = 0; y < h; ++y) {
            for (int64_t x = 0; x < w; ++x) {
                img.at(c, y, x) = 0.5f + 0.35f * std::sin(0.05f * static_cast<float>(x + 2 * y + 17 * c)) +
                                  0.1f * randomUniform(7, static_cast<uint64_t>((c * h + y) * w + x));
            }
        }
    }
    return img;
}

struct Window {
    int64_t top, left, height, width;
};

// Windows of an H x W picture: at its corners and edges, one pixel, whole rows and columns,
// and 40 anywhere.
std::vector<Window> windowsOf(int64_t H, int64_t W) {
    std::vector<Window> windows = {
        {0, 0, 1, 1},       {H - 1, W - 1, 1, 1},   {0, 0, H, 5},         {0, W - 7, H, 7},       {H / 2, 0, 3, W},
        {H - 40, 0, 40, W}, {H / 3, W / 3, 61, 77}, {1, 1, H - 2, W - 2}, {H / 2, W / 2, 17, 16}, {8, 16, 64, 64}};
    for (int k = 0; k < 40; ++k) {
        const auto h = static_cast<int64_t>(1 + randomBits(3, 4 * k) % static_cast<uint64_t>(H)),
                   w = static_cast<int64_t>(1 + randomBits(3, 4 * k + 1) % static_cast<uint64_t>(W));
        windows.push_back({static_cast<int64_t>(randomBits(3, 4 * k + 2) % static_cast<uint64_t>(H - h + 1)),
                           static_cast<int64_t>(randomBits(3, 4 * k + 3) % static_cast<uint64_t>(W - w + 1)), h, w});
    }
    return windows;
}

TEST(ImageFiles, JpegWindowDecodeHasTheWholeDecodesPixels) {
    const std::string dir = tempDir("jpeg_window");
    writeJpeg(dir + "/colour.jpg", wavyImage(3, 301, 411), 90); // baseline, chroma subsampled 2x2; not whole blocks
    writeJpeg(dir + "/gray.jpg", wavyImage(1, 301, 411), 90);
    // Progressive, and chroma at full and half horizontal resolution (157x213:
    // tests/data/images/make_jpegs.py).
    const std::string kinds = tessera::testing::sourceDir() + "/tests/data/images/";
    for (const std::string& path : {dir + "/colour.jpg", dir + "/gray.jpg", kinds + "progressive.jpg",
                                    kinds + "subsampled-444.jpg", kinds + "subsampled-422.jpg"}) {
        const std::string name = fs::path(path).filename().string();
        const Image full = readImage(path, 3);
        const int64_t H = full.height, W = full.width;
        for (int channels : {3, 1}) {
            for (double least : {1.0, 0.6, 0.3, 0.125}) {
                const Image whole =
                    readImage(path, channels, [&](int64_t, int64_t) { return DecodePlan{.least = least}; });
                bool cut = false;
                for (const Window& v : windowsOf(H, W)) {
                    const std::string what = name + " at " + std::to_string(least) + ", window " +
                                             std::to_string(v.height) + "x" + std::to_string(v.width) + " at " +
                                             std::to_string(v.top) + ", " + std::to_string(v.left);
                    const Image win = readImage(path, channels, [&](int64_t h, int64_t w) {
                        EXPECT_EQ(h, H);
                        EXPECT_EQ(w, W);
                        return DecodePlan{
                            .least = least, .top = v.top, .left = v.left, .height = v.height, .width = v.width};
                    });
                    // The window's rows and columns at the decode's scale, as a transform maps them.
                    const int64_t DH = whole.height, DW = whole.width;
                    const double sy = static_cast<double>(DH) / static_cast<double>(H),
                                 sx = static_cast<double>(DW) / static_cast<double>(W);
                    const auto y0 = static_cast<int64_t>(std::floor(static_cast<double>(v.top) * sy));
                    const auto x0 = static_cast<int64_t>(std::floor(static_cast<double>(v.left) * sx));
                    const int64_t y1 = std::min<int64_t>(
                        DH, static_cast<int64_t>(std::ceil(static_cast<double>(v.top + v.height) * sy)));
                    const int64_t x1 = std::min<int64_t>(
                        DW, static_cast<int64_t>(std::ceil(static_cast<double>(v.left + v.width) * sx)));
                    const bool partial = win.height != DH || win.width != DW;
                    cut = cut || partial;
                    if (partial) { // where the pixels lie
                        EXPECT_EQ(win.decodedHeight, DH) << what;
                        EXPECT_EQ(win.decodedWidth, DW) << what;
                        EXPECT_EQ(win.fullHeight, H) << what;
                        EXPECT_EQ(win.fullWidth, W) << what;
                    } else {
                        EXPECT_EQ(win.pixels, whole.pixels) << what;
                        EXPECT_EQ(win.decodedHeight, 0) << what;
                    }
                    ASSERT_LE(win.windowTop, y0) << what;
                    ASSERT_LE(win.windowLeft, x0) << what;
                    ASSERT_GE(win.windowTop + win.height, y1) << what;
                    ASSERT_GE(win.windowLeft + win.width, x1) << what;
                    int64_t differ = 0;
                    for (int64_t c = 0; c < channels; ++c) {
                        for (int64_t y = y0; y < y1; ++y) {
                            for (int64_t x = x0; x < x1; ++x) {
                                differ += win.at(c, y - win.windowTop, x - win.windowLeft) != whole.at(c, y, x);
                            }
                        }
                    }
                    EXPECT_EQ(differ, 0) << what;
                }
                EXPECT_TRUE(cut) << name << ": no window was decoded alone";
            }
        }
    }
    // A window of a PNG: the whole picture.
    writePng(dir + "/c.png", wavyImage(3, 24, 32));
    const Image png = readImage(
        dir + "/c.png", 3, [](int64_t, int64_t) { return DecodePlan{.top = 3, .left = 4, .height = 5, .width = 6}; });
    EXPECT_EQ(png.str(), "3x24x32");
    EXPECT_EQ(png.decodedHeight, 0);
}

TEST(ImageFiles, BadFilesAreIoErrorsNamingTheFile) {
    const std::string dir = tempDir("bad_images");
    writePng(dir + "/good.png", gridImage(3, 16, 16, 1));
    writeJpeg(dir + "/good.jpg", classImage(0, 16, 1));
    const std::vector<uint8_t> png = readBytes(dir + "/good.png"), jpg = readBytes(dir + "/good.jpg");
    writeBytes(dir + "/empty.png", {});
    writeBytes(dir + "/text.jpg", {'h', 'e', 'l', 'l', 'o'});
    writeBytes(dir + "/cut.png", std::vector<uint8_t>(png.begin(), png.begin() + static_cast<long>(png.size() / 2)));
    writeBytes(dir + "/cut.jpg", std::vector<uint8_t>(jpg.begin(), jpg.begin() + 20));
    // Whole headers, then the scan data ends early (a truncated download, or a file whose
    // header claims more rows than it holds): libjpeg would fill the rest with grey.
    writeBytes(dir + "/truncated.jpg",
               std::vector<uint8_t>(jpg.begin(), jpg.begin() + static_cast<long>(jpg.size() * 3 / 4)));
    for (const std::string name : {"missing.png", "empty.png", "text.jpg", "cut.png", "cut.jpg", "truncated.jpg"}) {
        const std::string path = dir + "/" + name;
        try {
            readImage(path, 3);
            ADD_FAILURE() << name << " was read";
        } catch (const IoError& e) {
            EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        }
    }
    EXPECT_THROW(readImage(dir + "/good.png", 2), IoError);
    EXPECT_THROW(writeJpeg(dir + "/q.jpg", gridImage(3, 2, 2, 1), 0), IoError);
    EXPECT_THROW(writePng(dir + "/four.png", Image(4, 2, 2)), IoError);
}

// ---- data sets -----------------------------------------------------------------------------

// CIFAR-style records: `labelBytes` label bytes then 3072 pixel bytes, pixel p of record r
// being (r * 7 + p) % 256.
std::vector<uint8_t> cifarRecords(const std::vector<std::vector<uint8_t>>& labels) {
    std::vector<uint8_t> out;
    for (size_t r = 0; r < labels.size(); ++r) {
        out.insert(out.end(), labels[r].begin(), labels[r].end());
        for (int p = 0; p < 3072; ++p) out.push_back(static_cast<uint8_t>((r * 7 + static_cast<size_t>(p)) % 256));
    }
    return out;
}

TEST(Datasets, Cifar10ReadsEveryBatchFileInOrder) {
    const std::string dir = tempDir("cifar10");
    fs::create_directories(dir + "/cifar-10-batches-bin");
    for (int b = 1; b <= 5; ++b) {
        writeBytes(dir + "/cifar-10-batches-bin/data_batch_" + std::to_string(b) + ".bin",
                   cifarRecords({{static_cast<uint8_t>(b)}, {static_cast<uint8_t>(9 - b)}}));
    }
    writeBytes(dir + "/cifar-10-batches-bin/test_batch.bin", cifarRecords({{3}}));
    const DatasetPtr train = cifar10(dir, "train"); // finds the archive's sub-folder
    ASSERT_EQ(train->size(), 10);
    EXPECT_EQ(train->classes(), 10);
    EXPECT_EQ(train->classNames().at(3), "cat");
    EXPECT_THROW(withClassNames(train, {"a", "b"}), ShapeError); // one name per class
    EXPECT_EQ(train->get(0).label, 1);
    EXPECT_EQ(train->get(3).label, 7); // file 2, record 1
    const Sample s = train->get(3);
    ASSERT_EQ(s.image.str(), "3x32x32");
    EXPECT_FLOAT_EQ(s.image.at(0, 0, 0), 7.0f / 255.0f);               // record 1 of its file, pixel 0
    EXPECT_FLOAT_EQ(s.image.at(1, 0, 1), ((7 + 1025) % 256) / 255.0f); // green plane starts at byte 1024
    EXPECT_NE(train->where(3).find("data_batch_2.bin (record 1)"), std::string::npos) << train->where(3);
    EXPECT_EQ(cifar10(dir + "/cifar-10-batches-bin", "test")->size(), 1);
    EXPECT_THROW(cifar10(dir, "valid"), IoError);

    // A truncated file and a label over 9 are named.
    writeBytes(dir + "/cifar-10-batches-bin/test_batch.bin", std::vector<uint8_t>(3073 + 100, 0));
    try {
        cifar10(dir, "test");
        ADD_FAILURE() << "a truncated file was read";
    } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find("test_batch.bin"), std::string::npos) << e.what();
    }
    writeBytes(dir + "/cifar-10-batches-bin/test_batch.bin", cifarRecords({{10}}));
    EXPECT_THROW(cifar10(dir, "test"), IoError);
    fs::remove(dir + "/cifar-10-batches-bin/data_batch_4.bin");
    try {
        cifar10(dir, "train");
        ADD_FAILURE() << "a missing file went unnoticed";
    } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find("data_batch_4.bin"), std::string::npos) << e.what();
    }
    EXPECT_THROW(cifar10(tempDir("cifar_empty"), "train"), IoError);
}

TEST(Datasets, Cifar100FineAndCoarseLabels) {
    const std::string dir = tempDir("cifar100");
    writeBytes(dir + "/train.bin", cifarRecords({{3, 77}, {19, 99}}));
    const DatasetPtr fine = cifar100(dir, "train"), coarse = cifar100(dir, "train", false);
    EXPECT_EQ(fine->classes(), 100);
    EXPECT_EQ(coarse->classes(), 20);
    EXPECT_EQ(fine->get(1).label, 99);
    EXPECT_EQ(coarse->get(1).label, 19);
    EXPECT_FLOAT_EQ(fine->get(1).image.at(0, 0, 0), 7.0f / 255.0f);
    writeBytes(dir + "/test.bin", cifarRecords({{20, 1}}));
    EXPECT_THROW(cifar100(dir, "test", false), IoError); // coarse label 20
}

// A class folder without images is an error naming it (the model would still get an
// output for it); hidden folders (.ipynb_checkpoints) are not classes.
TEST(Datasets, ImageFolderRefusesEmptyClassFoldersAndSkipsHiddenOnes) {
    const std::string dir = tempDir("folder_empty_class");
    for (const std::string cls : {"cat", "dog", "emu", ".ipynb_checkpoints"}) fs::create_directories(dir + "/" + cls);
    writePng(dir + "/cat/a.png", gridImage(3, 4, 4, 1));
    writePng(dir + "/dog/a.png", gridImage(3, 4, 4, 2));
    writePng(dir + "/.ipynb_checkpoints/a.png", gridImage(3, 4, 4, 3));
    const std::string e = testing::errorOf([&] { imageFolder(dir); });
    EXPECT_NE(e.find("class folder emu holds no .jpg, .jpeg or .png file"), std::string::npos) << e;
    fs::remove(dir + "/emu");
    const DatasetPtr d = imageFolder(dir);
    EXPECT_EQ(d->classNames(), (std::vector<std::string>{"cat", "dog"}));
    EXPECT_EQ(d->size(), 2);
}

TEST(Datasets, ImageFolderLabelsBySortedClassNames) {
    const std::string dir = tempDir("folder");
    for (const std::string cls : {"zebra", "ant", "mole"}) fs::create_directories(dir + "/" + cls + "/sub");
    writePng(dir + "/zebra/b.png", gridImage(3, 4, 4, 1));
    writeJpeg(dir + "/zebra/a.JPG", classImage(0, 4, 2));
    writePng(dir + "/ant/x.png", gridImage(1, 4, 4, 3));
    writePng(dir + "/mole/sub/deep.png", gridImage(3, 4, 4, 4)); // found recursively
    writeBytes(dir + "/mole/notes.txt", {'x'});                  // not an image: skipped
    const DatasetPtr d = imageFolder(dir);
    ASSERT_EQ(d->size(), 4);
    EXPECT_EQ(d->classes(), 3);
    EXPECT_EQ(d->classNames(), (std::vector<std::string>{"ant", "mole", "zebra"}));
    EXPECT_EQ(firstSamples(d, 2)->classNames(), d->classNames()); // views keep the names
    EXPECT_EQ(d->get(0).label, 0);                                // ant
    EXPECT_EQ(d->get(1).label, 1);                                // mole
    EXPECT_EQ(d->get(2).label, 2);                                // zebra/a.JPG before zebra/b.png
    EXPECT_NE(d->where(2).find("a.JPG"), std::string::npos);
    EXPECT_EQ(d->get(0).image.channels, 3); // a gray file, asked for in colour
    EXPECT_EQ(imageFolder(dir, 1)->get(3).image.channels, 1);
    // A corrupt image is an error of get, naming it.
    writeBytes(dir + "/zebra/b.png", {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0});
    try {
        d->get(3);
        ADD_FAILURE() << "a corrupt PNG was read";
    } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find("zebra/b.png"), std::string::npos) << e.what();
    }
    EXPECT_THROW(imageFolder(dir + "/nothing-here"), IoError);
    EXPECT_THROW(imageFolder(tempDir("folder_flat")), IoError); // no class folders
    const std::string empty = tempDir("folder_empty");
    fs::create_directories(empty + "/cls");
    EXPECT_THROW(imageFolder(empty), IoError); // classes without images
    EXPECT_THROW(imageFolder(dir, 2), IoError);
}

TEST(Datasets, NpyPairsInUint8AndFloat) {
    const std::string dir = tempDir("npy");
    // uint8 [N, H, W] images via int32 tensor written as... the writer writes float32 and
    // int32 only, so the uint8 file is written by hand.
    std::vector<uint8_t> u8 = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    std::string header = "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2, 3), }";
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    u8.push_back(static_cast<uint8_t>(header.size()));
    u8.push_back(0);
    u8.insert(u8.end(), header.begin(), header.end());
    for (int i = 0; i < 12; ++i) u8.push_back(static_cast<uint8_t>(i * 20));
    writeBytes(dir + "/u8.npy", u8);
    writeNpy(Tensor::fromVector({2}, std::vector<int32_t>{4, 1}), dir + "/labels.npy");
    const DatasetPtr a = npyDataset(dir + "/u8.npy", dir + "/labels.npy");
    EXPECT_EQ(a->size(), 2);
    EXPECT_EQ(a->classes(), 5);
    const Sample s = a->get(1);
    EXPECT_EQ(s.image.str(), "1x2x3");
    EXPECT_FLOAT_EQ(s.image.at(0, 1, 2), 220.0f / 255.0f);
    EXPECT_EQ(s.label, 1);

    const Tensor f = Tensor::rand({2, 3, 2, 2});
    writeNpy(f, dir + "/f.npy");
    const DatasetPtr b = npyDataset(dir + "/f.npy", dir + "/labels.npy");
    EXPECT_FLOAT_EQ(b->get(1).image.at(2, 1, 1), f.toVector<float>()[23]);

    writeNpy(Tensor::fromVector({3}, std::vector<int32_t>{0, 1, 2}), dir + "/three.npy");
    EXPECT_THROW(npyDataset(dir + "/f.npy", dir + "/three.npy"), IoError); // 2 images, 3 labels
    writeNpy(Tensor::rand({2, 4}), dir + "/flat.npy");
    EXPECT_THROW(npyDataset(dir + "/flat.npy", dir + "/labels.npy"), IoError); // rank 2
    EXPECT_THROW(npyDataset(dir + "/f.npy", dir + "/f.npy"), IoError);         // float labels
    // Images without pixels (a zero height, as fuzzing found): an IoError, not a zero-length copy.
    writeNpy(Tensor::empty({2, 1, 0, 3}), dir + "/empty.npy");
    EXPECT_THROW(npyDataset(dir + "/empty.npy", dir + "/labels.npy"), IoError);
    EXPECT_THROW(tensorDataset(Tensor::empty({2, 1, 0, 3}), Tensor::fromVector({2}, std::vector<int32_t>{0, 1})),
                 ShapeError);
    writeNpy(Tensor::fromVector({2}, std::vector<int32_t>{0, -1}), dir + "/neg.npy");
    EXPECT_THROW(npyDataset(dir + "/f.npy", dir + "/neg.npy"), IoError);
}

// firstOfEachClass: classes in turn (a data set sorted by class gives every class its
// share), in the data's order; the counts per class; all of it when asked for as many.
TEST(Datasets, FirstOfEachClassTakesTheClassesInTurn) {
    const std::vector<int32_t> labels = {0, 0, 0, 0, 1, 1, 2}; // sorted by class, as a folder
    std::vector<float> pixels(labels.size());
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i);
    const DatasetPtr data = tensorDataset(Tensor::fromVector({7, 1, 1, 1}, pixels), Tensor::fromVector({7}, labels), 3);
    std::vector<int64_t> counts;
    const DatasetPtr four = firstOfEachClass(data, 4, &counts);
    ASSERT_EQ(four->size(), 4);
    std::vector<float> got;
    for (int64_t i = 0; i < 4; ++i) got.push_back(four->get(i).image.pixels[0]);
    EXPECT_EQ(got, (std::vector<float>{0, 1, 4, 6})); // rounds: 0, 4, 6 then 1
    EXPECT_EQ(counts, (std::vector<int64_t>{2, 1, 1}));
    EXPECT_EQ(firstOfEachClass(data, 6, &counts)->size(), 6);
    EXPECT_EQ(counts, (std::vector<int64_t>{3, 2, 1})); // class 2 ran out after one
    EXPECT_EQ(firstOfEachClass(data, 7, &counts), data);
    EXPECT_EQ(counts, (std::vector<int64_t>{4, 2, 1}));
    EXPECT_EQ(firstOfEachClass(data, 0), data);
}

// holdOut: two disjoint parts that make up the data, in its order, drawn by the seed.
TEST(Datasets, HoldOutSplitsBySeed) {
    std::vector<float> pixels(50);
    std::vector<int32_t> labels(50);
    for (int i = 0; i < 50; ++i)
        pixels[static_cast<size_t>(i)] = static_cast<float>(i), labels[static_cast<size_t>(i)] = i % 5;
    const DatasetPtr data = tensorDataset(Tensor::fromVector({50, 1, 1, 1}, pixels), Tensor::fromVector({50}, labels));
    auto indices = [](const DatasetPtr& part) {
        std::vector<int64_t> out;
        for (int64_t i = 0; i < part->size(); ++i) out.push_back(static_cast<int64_t>(part->get(i).image.pixels[0]));
        return out;
    };
    const auto [rest, held] = holdOut(data, 12, 7);
    ASSERT_EQ(rest->size(), 38);
    ASSERT_EQ(held->size(), 12);
    EXPECT_EQ(held->classes(), 5);
    const std::vector<int64_t> r = indices(rest), h = indices(held);
    EXPECT_TRUE(std::is_sorted(r.begin(), r.end()));
    EXPECT_TRUE(std::is_sorted(h.begin(), h.end()));
    std::set<int64_t> all(r.begin(), r.end());
    all.insert(h.begin(), h.end());
    EXPECT_EQ(all.size(), 50u); // disjoint, and together every sample
    EXPECT_EQ(held->get(3).label, data->get(h[3]).label);
    EXPECT_EQ(held->where(0), data->where(h[0]));
    EXPECT_EQ(indices(holdOut(data, 12, 7).second), h); // the same seed, the same part
    EXPECT_NE(indices(holdOut(data, 12, 8).second), h); // another seed, another
    EXPECT_NE(h, (std::vector<int64_t>{38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49})); // not the last ones
    EXPECT_THROW(holdOut(data, 0, 7), ShapeError);
    EXPECT_THROW(holdOut(data, 50, 7), ShapeError);
    EXPECT_THROW(held->get(12), ShapeError);
}

// ---- transforms ----------------------------------------------------------------------------

TEST(Transforms, ResizeIsBilinearWithHalfPixelCentres) {
    Image img(1, 1, 2);
    img.at(0, 0, 0) = 0.0f;
    img.at(0, 0, 1) = 1.0f;
    const Image out = Transforms().resize(1, 4).apply(img, 0, 0, 0, true);
    ASSERT_EQ(out.str(), "1x1x4");
    // Output centres 0.5, 1.5, 2.5, 3.5 map to input -0.25 (clamped), 0.25, 0.75, 1.25 (edge).
    EXPECT_FLOAT_EQ(out.at(0, 0, 0), 0.0f);
    EXPECT_FLOAT_EQ(out.at(0, 0, 1), 0.25f);
    EXPECT_FLOAT_EQ(out.at(0, 0, 2), 0.75f);
    EXPECT_FLOAT_EQ(out.at(0, 0, 3), 1.0f);
    // Shrinking antialiases: output x of 2 from 4 weighs inputs by 1 - |j + 0.5 - centre| / 2
    // (centres 1 and 3), normalised: (0.75, 0.75, 0.25) and (0.25, 0.75, 0.75) over 1.75.
    Image ramp(1, 1, 4);
    for (int64_t x = 0; x < 4; ++x) ramp.at(0, 0, x) = static_cast<float>(x);
    const Image shrunk = Transforms().resize(1, 2).apply(ramp, 0, 0, 0, true);
    EXPECT_FLOAT_EQ(shrunk.at(0, 0, 0), 1.25f / 1.75f);
    EXPECT_FLOAT_EQ(shrunk.at(0, 0, 1), 4.0f / 1.75f);
    // Shorter side to 16, aspect kept.
    EXPECT_EQ(Transforms().resize(16).apply(Image(3, 40, 20), 0, 0, 0, true).str(), "3x32x16");
    EXPECT_EQ(Transforms().resize(16).apply(Image(3, 20, 40), 0, 0, 0, true).str(), "3x16x32");
}

// Resampling a white picture gives white, not 1.0000001 (float rounding of the filter's
// weights): the ImageNet-style recipe of a resize or random-resized crop followed by colour
// jitter or an augmentation policy takes ordinary white-background images of any size.
TEST(Transforms, ResampledPixelsStayWithinTheInputsRange) {
    for (int64_t side : {48, 100, 37, 21}) {
        SCOPED_TRACE(side);
        Image white(3, side, side);
        std::fill(white.pixels.begin(), white.pixels.end(), 1.0f);
        for (const Transforms& t :
             {Transforms().resize(32, 32), Transforms().randomResizedCrop(32, 32), Transforms().rotate(30)}) {
            for (uint64_t seed = 0; seed < 4; ++seed) {
                const Image out = t.apply(white, seed, 0, 0, true);
                for (float v : out.pixels) ASSERT_LE(v, 1.0f);
                for (float v : out.pixels) ASSERT_GE(v, 0.0f);
            }
        }
        const Transforms recipe = Transforms().randomResizedCrop(32, 32).flip().jitter(0.4, 0.4, 0.4).trivialAugment();
        for (uint64_t seed = 0; seed < 8; ++seed) EXPECT_NO_THROW(recipe.apply(white, seed, 0, 0, true));
    }
}

TEST(Transforms, RandomCropIsAWindowOfThePaddedImageSeededBySample) {
    const Image img = gridImage(2, 6, 6, 3);
    const Transforms t = Transforms().randomCrop(6, 6, 2);
    // Each result is one of the 25 windows of the zero-padded 10x10 image.
    auto window = [&](const Image& out) {
        for (int64_t top = 0; top <= 4; ++top) {
            for (int64_t left = 0; left <= 4; ++left) {
                bool same = true;
                for (int64_t c = 0; c < 2 && same; ++c) {
                    for (int64_t y = 0; y < 6 && same; ++y) {
                        for (int64_t x = 0; x < 6 && same; ++x) {
                            const int64_t sy = top + y - 2, sx = left + x - 2;
                            const float want = sy >= 0 && sy < 6 && sx >= 0 && sx < 6 ? img.at(c, sy, sx) : 0.0f;
                            same = out.at(c, y, x) == want;
                        }
                    }
                }
                if (same) return top * 5 + left;
            }
        }
        return int64_t{-1};
    };
    std::set<int64_t> seen;
    for (int64_t index = 0; index < 40; ++index) {
        const Image a = t.apply(img, 7, 0, index, true);
        const int64_t w = window(a);
        ASSERT_GE(w, 0) << "sample " << index << " is no window of the padded image";
        seen.insert(w);
        EXPECT_EQ(t.apply(img, 7, 0, index, true).pixels, a.pixels); // the same again
    }
    EXPECT_GT(seen.size(), 10u); // and not always the same place
    // Another epoch draws anew; evaluation cuts the centre without padding.
    int differ = 0;
    for (int64_t index = 0; index < 20; ++index) {
        differ += t.apply(img, 7, 1, index, true).pixels != t.apply(img, 7, 0, index, true).pixels;
    }
    EXPECT_GT(differ, 10);
    EXPECT_EQ(t.apply(img, 7, 0, 0, false).pixels, img.pixels);
    EXPECT_EQ(Transforms().centerCrop(2, 2).apply(img, 0, 0, 0, true).at(1, 0, 0), img.at(1, 2, 2));
    EXPECT_THROW(Transforms().randomCrop(8, 8, 0).apply(img, 0, 0, 0, true), ShapeError);
}

TEST(Transforms, FlipAndNormalize) {
    const Image img = gridImage(3, 2, 3, 4);
    const Image flipped = Transforms().flip(1.0).apply(img, 0, 0, 0, true);
    EXPECT_EQ(flipped.at(2, 1, 0), img.at(2, 1, 2));
    EXPECT_EQ(Transforms().flip(0.0).apply(img, 0, 0, 0, true).pixels, img.pixels);
    EXPECT_EQ(Transforms().flip(1.0).apply(img, 0, 0, 0, false).pixels, img.pixels); // not in evaluation
    int mirrored = 0;
    for (int64_t i = 0; i < 200; ++i) mirrored += Transforms().flip().apply(img, 1, 0, i, true).pixels != img.pixels;
    EXPECT_GT(mirrored, 70);
    EXPECT_LT(mirrored, 130);
    const Image n = Transforms().normalize({0.5f, 0.25f, 0.0f}, {0.5f, 0.25f, 2.0f}).apply(img, 0, 0, 0, true);
    EXPECT_FLOAT_EQ(n.at(1, 1, 1), (img.at(1, 1, 1) - 0.25f) / 0.25f);
    EXPECT_FLOAT_EQ(n.at(2, 0, 2), img.at(2, 0, 2) / 2.0f);
    EXPECT_THROW(Transforms().normalize({0.5f, 0.5f}, {1.0f, 1.0f}).apply(img, 0, 0, 0, true), ShapeError);
    EXPECT_THROW(Transforms().normalize({0.5f}, {0.0f}), ModuleError);
    EXPECT_THROW(Transforms().flip(1.5), ModuleError);
}

TEST(Transforms, RotatedTurnsAboutTheCentre) {
    const Image img = gridImage(2, 6, 6, 5);
    EXPECT_EQ(Transforms::rotated(img, 0).pixels, img.pixels);
    const Image quarter = Transforms::rotated(img, 90), half = Transforms::rotated(img, 180);
    for (int64_t c = 0; c < 2; ++c) {
        for (int64_t y = 0; y < 6; ++y) {
            for (int64_t x = 0; x < 6; ++x) {
                // Counter-clockwise on screen: NumPy's rot90; half a turn reverses both axes.
                EXPECT_NEAR(quarter.at(c, y, x), img.at(c, x, 5 - y), 1e-5) << c << " " << y << " " << x;
                EXPECT_NEAR(half.at(c, y, x), img.at(c, 5 - y, 5 - x), 1e-5) << c << " " << y << " " << x;
            }
        }
    }
    // A bright dot 7 pixels right of the centre: a random rotation keeps its distance and
    // turns it by an angle within the range, a different one per sample; evaluation leaves it.
    Image dot(1, 21, 21);
    dot.at(0, 10, 17) = 1.0f;
    const Transforms t = Transforms().rotate(30);
    std::set<int> angles;
    bool negative = false, positive = false;
    for (int64_t index = 0; index < 30; ++index) {
        const Image out = t.apply(dot, 3, 0, index, true);
        double mass = 0, mx = 0, my = 0;
        for (int64_t y = 0; y < 21; ++y) {
            for (int64_t x = 0; x < 21; ++x) {
                mass += out.at(0, y, x);
                mx += out.at(0, y, x) * (static_cast<double>(x) - 10.0);
                my += out.at(0, y, x) * (static_cast<double>(y) - 10.0);
            }
        }
        mx /= mass, my /= mass;
        const double degrees = std::atan2(-my, mx) * 180.0 / 3.14159265358979323846; // y points down
        EXPECT_NEAR(std::hypot(mx, my), 7.0, 0.3) << "sample " << index;
        EXPECT_LE(std::abs(degrees), 31.0) << "sample " << index;
        angles.insert(static_cast<int>(std::lround(degrees)));
        negative |= degrees<-5, positive |= degrees> 5;
        EXPECT_EQ(t.apply(dot, 3, 0, index, true).pixels, out.pixels);
    }
    EXPECT_GT(angles.size(), 15u);
    EXPECT_TRUE(negative && positive);
    EXPECT_EQ(t.apply(dot, 3, 0, 0, false).pixels, dot.pixels);
    EXPECT_THROW(Transforms().rotate(181), ModuleError);
    EXPECT_THROW(Transforms().rotate(-1), ModuleError);
}

TEST(Transforms, RandomResizedCropTakesWindowsOfTheAllowedAreaAndShape) {
    // Channel 0 holds each pixel's x, channel 1 its y (as fractions): an output's extremes
    // tell the window it was resized from.
    const int64_t H = 40, W = 60, S = 16;
    Image coords(2, H, W);
    for (int64_t y = 0; y < H; ++y) {
        for (int64_t x = 0; x < W; ++x) {
            coords.at(0, y, x) = (static_cast<float>(x) + 0.5f) / W;
            coords.at(1, y, x) = (static_cast<float>(y) + 0.5f) / H;
        }
    }
    const Transforms t = Transforms().randomResizedCrop(S, S, 0.2);
    std::set<int64_t> widths;
    for (int64_t index = 0; index < 60; ++index) {
        const Image out = t.apply(coords, 9, 0, index, true);
        ASSERT_EQ(out.str(), "2x16x16");
        auto extent = [&](int64_t c, int64_t side) {
            const auto [lo, hi] =
                std::minmax_element(out.pixels.begin() + c * S * S, out.pixels.begin() + (c + 1) * S * S);
            return static_cast<double>(*hi - *lo) * static_cast<double>(side) * S / (S - 1); // the window's side
        };
        const double w = extent(0, W), h = extent(1, H);
        EXPECT_GE(w * h, 0.2 * H * W * 0.85) << "sample " << index;
        EXPECT_LE(w * h, H * W * 1.05) << "sample " << index;
        EXPECT_GE(w / h, 0.75 * 0.9) << "sample " << index;
        EXPECT_LE(w / h, 4.0 / 3.0 * 1.1) << "sample " << index;
        widths.insert(std::lround(w));
        EXPECT_EQ(t.apply(coords, 9, 0, index, true).pixels, out.pixels);
    }
    EXPECT_GT(widths.size(), 10u);
    // Evaluation: the shorter side to 16, then the centre 16 x 16.
    EXPECT_EQ(t.apply(coords, 9, 0, 0, false).pixels,
              Transforms().resize(S).centerCrop(S, S).apply(coords, 0, 0, 0, true).pixels);
    // The whole area of a square image can only be taken whole: a resize.
    const Image square = gridImage(3, 20, 20, 2);
    EXPECT_EQ(Transforms().randomResizedCrop(8, 8, 1.0).apply(square, 1, 0, 4, true).pixels,
              Transforms().resize(8, 8).apply(square, 0, 0, 0, true).pixels);
    // No window of 90% of a 100 x 10 image has an allowed ratio: the centre 13 x 10 is taken.
    const Image tall = gridImage(1, 100, 10, 3);
    EXPECT_EQ(Transforms().randomResizedCrop(8, 8, 0.9).apply(tall, 1, 0, 0, true).pixels,
              Transforms().centerCrop(13, 10).resize(8, 8).apply(tall, 0, 0, 0, true).pixels);
    EXPECT_THROW(Transforms().randomResizedCrop(8, 8, 0.0), ModuleError);
    EXPECT_THROW(Transforms().randomResizedCrop(8, 8, 1.5), ModuleError);
    EXPECT_EQ(Transforms().randomResizedCrop(8, 8).apply(Image(3, 6, 6), 0, 0, 0, false).str(), "3x8x8"); // scaled up
}

TEST(Transforms, JitterScalesAndBlendsAsColorJitterDoes) {
    Image img(3, 5, 4);
    for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = 0.1f + 0.5f * static_cast<float>(i % 7) / 7.0f;
    const int64_t plane = 20;
    auto grey = [&](const Image& m, int64_t i) {
        return 0.2989f * m.pixels[i] + 0.587f * m.pixels[plane + i] + 0.114f * m.pixels[2 * plane + i];
    };
    std::set<int> factors;
    for (int64_t index = 0; index < 20; ++index) {
        // Brightness: every pixel times one factor in [0.5, 1.5].
        const Image b = Transforms().jitter(0.5).apply(img, 4, 0, index, true);
        const float f = b.pixels[0] / img.pixels[0];
        EXPECT_GE(f, 0.5f);
        EXPECT_LE(f, 1.5f);
        factors.insert(static_cast<int>(std::lround(f * 100)));
        for (size_t i = 0; i < img.pixels.size(); ++i)
            EXPECT_NEAR(b.pixels[i], std::min(1.0f, img.pixels[i] * f), 1e-6);
        // Contrast: a blend with the mean grey level.
        const Image c = Transforms().jitter(0, 0.5).apply(img, 4, 0, index, true);
        double sum = 0;
        for (int64_t i = 0; i < plane; ++i) sum += grey(img, i);
        const auto mean = static_cast<float>(sum / plane);
        const float fc = (c.pixels[3] - mean) / (img.pixels[3] - mean);
        EXPECT_GE(fc, 0.5f - 1e-4f);
        EXPECT_LE(fc, 1.5f + 1e-4f);
        for (size_t i = 0; i < img.pixels.size(); ++i) {
            EXPECT_NEAR(c.pixels[i], std::clamp(fc * img.pixels[i] + (1 - fc) * mean, 0.0f, 1.0f), 1e-5);
        }
        // Saturation: a blend with each pixel's own grey.
        const Image s = Transforms().jitter(0, 0, 0.5).apply(img, 4, 0, index, true);
        const float g0 = grey(img, 1);
        const float fs = (s.pixels[1] - g0) / (img.pixels[1] - g0);
        for (int64_t i = 0; i < plane; ++i) {
            const float g = grey(img, i);
            for (int64_t ch = 0; ch < 3; ++ch) {
                const size_t k = static_cast<size_t>(ch * plane + i);
                EXPECT_NEAR(s.pixels[k], std::clamp(fs * img.pixels[k] + (1 - fs) * g, 0.0f, 1.0f), 1e-5);
            }
        }
    }
    EXPECT_GT(factors.size(), 10u);
    // Not in evaluation; no saturation for one channel; pixels outside [0, 1] are refused.
    EXPECT_EQ(Transforms().jitter(0.5, 0.5, 0.5).apply(img, 4, 0, 0, false).pixels, img.pixels);
    const Image grey1 = gridImage(1, 4, 4, 1);
    EXPECT_EQ(Transforms().jitter(0, 0, 0.9).apply(grey1, 4, 0, 0, true).pixels, grey1.pixels);
    Image wide = img;
    wide.pixels[5] = 2.0f;
    EXPECT_THROW(Transforms().jitter(0.2).apply(wide, 4, 0, 0, true), ShapeError);
    EXPECT_THROW(Transforms().normalize({0.5f}, {0.1f}).jitter(0.2).apply(img, 4, 0, 0, true), ShapeError);
    EXPECT_THROW(Transforms().jitter(-0.5), ModuleError);
}

// Hue: turning by a third of the circle maps red to green and green to blue; every pixel
// keeps its value (max) and chroma (max - min); turning back restores the image.
TEST(Transforms, HueShiftTurnsTheColourCircle) {
    Image primaries(3, 1, 3);
    for (int64_t x = 0; x < 3; ++x) primaries.at(x, 0, x) = 1.0f; // red, green, blue
    const Image turned = Transforms::hueShifted(primaries, 1.0 / 3.0);
    for (int64_t x = 0; x < 3; ++x) {
        for (int64_t c = 0; c < 3; ++c) EXPECT_NEAR(turned.at(c, 0, x), c == (x + 1) % 3 ? 1.0f : 0.0f, 1e-6) << x;
    }
    const Image img = gridImage(3, 5, 6, 8);
    EXPECT_EQ(Transforms::hueShifted(img, 0.0).pixels.size(), img.pixels.size());
    for (size_t i = 0; i < img.pixels.size(); ++i)
        EXPECT_NEAR(Transforms::hueShifted(img, 0.0).pixels[i], img.pixels[i], 1e-6);
    const Image shifted = Transforms::hueShifted(img, 0.21), back = Transforms::hueShifted(shifted, -0.21);
    int changed = 0;
    for (int64_t i = 0; i < 30; ++i) {
        auto at = [&](const Image& m, int64_t c) { return m.pixels[static_cast<size_t>(c * 30 + i)]; };
        const float hi0 = std::max({at(img, 0), at(img, 1), at(img, 2)}),
                    lo0 = std::min({at(img, 0), at(img, 1), at(img, 2)});
        const float hi1 = std::max({at(shifted, 0), at(shifted, 1), at(shifted, 2)});
        const float lo1 = std::min({at(shifted, 0), at(shifted, 1), at(shifted, 2)});
        EXPECT_NEAR(hi1, hi0, 1e-6);
        EXPECT_NEAR(hi1 - lo1, hi0 - lo0, 1e-6);
        for (int64_t c = 0; c < 3; ++c) EXPECT_NEAR(at(back, c), at(img, c), 1e-5);
        changed += std::abs(at(shifted, 0) - at(img, 0)) > 1e-3f;
    }
    EXPECT_GT(changed, 10);
    // jitter's hue: a random turn in training, none in evaluation or on grey images.
    const Transforms t = Transforms().jitter(0, 0, 0, 0.3);
    EXPECT_NE(t.apply(img, 2, 0, 0, true).pixels, img.pixels);
    EXPECT_NE(t.apply(img, 2, 0, 0, true).pixels, t.apply(img, 2, 0, 1, true).pixels);
    EXPECT_EQ(t.apply(img, 2, 0, 0, false).pixels, img.pixels);
    const Image grey1 = gridImage(1, 4, 4, 1);
    EXPECT_EQ(t.apply(grey1, 2, 0, 0, true).pixels, grey1.pixels);
    EXPECT_THROW(Transforms().jitter(0, 0, 0, 0.6), ModuleError);
    EXPECT_THROW(Transforms::hueShifted(grey1, 0.1), ShapeError);
}

// Random erasing: one zeroed box, the same in every channel, of an area and aspect ratio in
// the allowed ranges, at places that vary; with its probability; never in evaluation.
TEST(Transforms, EraseZeroesOneBoxOfTheAllowedAreaAndShape) {
    const Transforms t = Transforms::parse("erase:1:0.05:0.25");
    std::set<std::pair<int64_t, int64_t>> corners;
    int boxes = 0;
    for (int64_t index = 0; index < 200; ++index) {
        Image img(3, 40, 50);
        std::fill(img.pixels.begin(), img.pixels.end(), 1.0f);
        const Image out = t.apply(img, 3, 0, index, true);
        int64_t y0 = 40, y1 = -1, x0 = 50, x1 = -1, zeros = 0;
        for (int64_t y = 0; y < 40; ++y) {
            for (int64_t x = 0; x < 50; ++x) {
                const bool zero = out.at(0, y, x) == 0.0f;
                ASSERT_EQ(zero, out.at(1, y, x) == 0.0f);
                ASSERT_EQ(zero, out.at(2, y, x) == 0.0f);
                if (!zero) continue;
                ++zeros, y0 = std::min(y0, y), y1 = std::max(y1, y), x0 = std::min(x0, x), x1 = std::max(x1, x);
            }
        }
        if (zeros == 0) continue; // ten tries that did not fit: rare
        ++boxes;
        const int64_t h = y1 - y0 + 1, w = x1 - x0 + 1;
        EXPECT_EQ(zeros, h * w); // one full rectangle
        const double share = static_cast<double>(zeros) / 2000.0, ratio = static_cast<double>(h) / w;
        EXPECT_GE(share, 0.05 * 0.8) << h << "x" << w; // rounding of the sides
        EXPECT_LE(share, 0.25 * 1.25) << h << "x" << w;
        EXPECT_GE(ratio, 0.3 * 0.8) << h << "x" << w;
        EXPECT_LE(ratio, 3.3 * 1.25) << h << "x" << w;
        corners.insert({y0, x0});
        Image again(3, 40, 50);
        std::fill(again.pixels.begin(), again.pixels.end(), 1.0f);
        EXPECT_EQ(t.apply(again, 3, 0, index, true).pixels, out.pixels);    // seeded by (seed, epoch, index)
        EXPECT_EQ(t.apply(again, 3, 0, index, false).pixels, again.pixels); // evaluation: left out
    }
    EXPECT_GE(boxes, 190);
    EXPECT_GE(corners.size(), 100u);
    // With probability 0.3, about 30% of the images.
    const Transforms some = Transforms::parse("erase:0.3");
    int erased = 0;
    for (int64_t index = 0; index < 1000; ++index) {
        Image img(1, 30, 30);
        std::fill(img.pixels.begin(), img.pixels.end(), 1.0f);
        const Image out = some.apply(img, 5, 1, index, true);
        erased += std::find(out.pixels.begin(), out.pixels.end(), 0.0f) != out.pixels.end();
    }
    EXPECT_NEAR(erased, 300, 60);
}

TEST(Transforms, DecodeScaleIsWhatTheFirstStepLeaves) {
    auto scale = [](const std::string& spec, bool train, int64_t h, int64_t w) {
        const DecodeScale s = Transforms::parse(spec).decodeScale(train);
        return s ? s(h, w).least : -1.0;
    };
    EXPECT_DOUBLE_EQ(scale("resize:256,center:224", true, 3024, 4032), 256.0 / 3024.0);
    EXPECT_DOUBLE_EQ(scale("resize:256,center:224", false, 4032, 3024), 256.0 / 3024.0);
    EXPECT_DOUBLE_EQ(scale("resize:100x50", true, 400, 300), 0.25);
    EXPECT_DOUBLE_EQ(scale("resize:100x90", true, 400, 300), 0.3);
    EXPECT_DOUBLE_EQ(scale("resize:64", true, 32, 48), 2.0); // enlarging: no shrinking
    // A random-resized crop's smallest window, an area of 0.08 at aspect 3/4 or 4/3, keeps 224
    // pixels a side; evaluation's shorter side keeps the crop's.
    EXPECT_DOUBLE_EQ(scale("rrc:224", true, 3024, 4032), 224.0 / std::sqrt(3024.0 * 4032.0 * 0.08 * 0.75));
    EXPECT_DOUBLE_EQ(scale("rrc:224:0.5", true, 3024, 4032), 224.0 / std::sqrt(3024.0 * 4032.0 * 0.5 * 0.75));
    EXPECT_DOUBLE_EQ(scale("rrc:224x160", false, 3024, 4032), 224.0 / 3024.0);
    EXPECT_DOUBLE_EQ(scale("rrc:32", true, 100, 4000), 0.32); // a window never taller than the image
    for (const char* other : {"", "flip,resize:32", "crop:24:4", "center:24", "normalize:mnist"}) {
        EXPECT_EQ(scale(other, true, 300, 400), -1.0) << other;
    }
}

TEST(Transforms, RandomResizedCropDecodesItsOwnWindowOnly) {
    const std::string dir = tempDir("rrc_window");
    writeJpeg(dir + "/a.jpg", wavyImage(3, 600, 800), 90);
    const std::string path = dir + "/a.jpg";
    const Transforms t = Transforms::parse("rrc:64,flip");
    const DecodeScale smallest = t.decodeScale(true);
    int64_t smaller = 0, decodedPixels = 0, wholePixels = 0;
    for (int64_t index = 0; index < 24; ++index) {
        const DecodeScale plan = t.decodeScale(true, 5, 2, index);
        const DecodePlan p = plan(600, 800);
        // The window apply() draws, kept at the crop's size: never more shrinking than the
        // plan without a sample allows for the smallest window, mostly less.
        ASSERT_GT(p.height, 0);
        EXPECT_LE(p.top + p.height, 600);
        EXPECT_LE(p.left + p.width, 800);
        EXPECT_DOUBLE_EQ(p.least, std::max(64.0 / static_cast<double>(p.height), 64.0 / static_cast<double>(p.width)));
        EXPECT_LE(p.least, smallest(600, 800).least);
        smaller += p.least < smallest(600, 800).least / 1.5;
        // Decoding the window alone, or the whole picture at the same scale, gives the same crop.
        const Image win = readImage(path, 3, plan);
        const Image whole =
            readImage(path, 3, [&](int64_t h, int64_t w) { return DecodePlan{.least = plan(h, w).least}; });
        EXPECT_EQ(t.apply(win, 5, 2, index, true).pixels, t.apply(whole, 5, 2, index, true).pixels) << index;
        decodedPixels += win.height * win.width;
        wholePixels += whole.height * whole.width;
    }
    EXPECT_GE(smaller, 12); // most windows are far larger than the smallest
    EXPECT_LT(decodedPixels, wholePixels * 3 / 4);
    // Evaluation, and other first steps, decode as without a sample.
    EXPECT_DOUBLE_EQ(t.decodeScale(false, 5, 2, 0)(600, 800).least, t.decodeScale(false)(600, 800).least);
    EXPECT_EQ(t.decodeScale(false, 5, 2, 0)(600, 800).height, 0);
    EXPECT_EQ(Transforms::parse("resize:64").decodeScale(true, 5, 2, 0)(600, 800).height, 0);
    EXPECT_FALSE(Transforms::parse("flip,rrc:64").decodeScale(true, 5, 2, 0));
    // A window decoded for one sample is no other sample's: an error, not a wrong crop.
    const Image first = readImage(path, 3, t.decodeScale(true, 5, 2, 0));
    int refused = 0;
    for (int64_t index = 1; index < 24; ++index) {
        try {
            (void)t.apply(first, 5, 2, index, true);
        } catch (const ShapeError& e) {
            ++refused;
            EXPECT_NE(std::string(e.what()).find("decoded for another sample"), std::string::npos) << e.what();
        }
    }
    EXPECT_GT(refused, 0);
}

TEST(Loader, ScaledDecodingGivesBatchesCloseToFullDecoding) {
    const std::string dir = tempDir("scaled_decode");
    for (int k = 0; k < 2; ++k) {
        fs::create_directories(dir + "/c" + std::to_string(k));
        for (int i = 0; i < 3; ++i) {
            writeJpeg(dir + "/c" + std::to_string(k) + "/" + std::to_string(i) + ".jpg", smoothImage(300 + 20 * i, 400),
                      95);
        }
    }
    const DatasetPtr data = imageFolder(dir);
    for (const char* spec : {"resize:64,center:60", "rrc:40:0.5,flip", "resize:75x100"}) {
        const Transforms t = Transforms::parse(spec);
        Loader scaled(data, t, {.batchsize = 6, .shuffle = false, .seed = 2});
        Loader full(data, t, {.batchsize = 6, .shuffle = false, .seed = 2, .scaledDecode = false});
        EXPECT_EQ(scaled.sampleShape(), full.sampleShape()) << spec;
        const DataBatch a = scaled.make(0, 0), b = full.make(0, 0);
        ASSERT_EQ(a.images.shape(), b.images.shape()) << spec;
        const double diff = meanAbsDiff(a.images.toVector<float>(), b.images.toVector<float>());
        EXPECT_LT(diff, 0.01) << spec;
        EXPECT_GT(diff, 0.0) << spec << ": not decoded smaller";
    }
}

TEST(Transforms, ParseReadsTheCommandLineSyntax) {
    const Transforms t = Transforms::parse("resize:36,crop:32:4,center:30x28,flip,flip:0.25,normalize:1/2/3:4/5/6");
    EXPECT_EQ(t.str(), "resize:36,crop:32:4,center:30x28,flip,flip:0.25,normalize:1/2/3:4/5/6");
    EXPECT_EQ(Transforms::parse("resize:20x10").str(), "resize:20x10");
    EXPECT_EQ(Transforms::parse("normalize:cifar10").steps().at(0).mean.size(), 3u);
    EXPECT_TRUE(Transforms::parse("").empty());
    const std::string more =
        "rrc:224,rrc:32x24:0.35,rotate:15,jitter:0.4,jitter:0.4:0.3:0.2,jitter:0:0.5,jitter:0.4:0."
        "3:0.2:0.1,jitter:0:0:0:0.5,erase,erase:0.25,erase:1:0.1:0.2,affine:15,affine:0:0.25,"
        "affine:10:0:0.75/1.25,affine:10:0.1:0.5/2:30,trivial,randaugment,randaugment:3,randaugment:1:20";
    EXPECT_EQ(Transforms::parse(more).str(), more);
    for (const std::string bad : {"crop",
                                  "crop:a",
                                  "crop:32:-1",
                                  "spin:3",
                                  "normalize:mars",
                                  "flip,,crop:3",
                                  "normalize:1/2:1",
                                  "resize:0",
                                  "flip:2",
                                  "rrc:0",
                                  "rrc:32:0",
                                  "rrc:32:1.5",
                                  "rotate:-1",
                                  "rotate:x",
                                  "jitter",
                                  "jitter:1:2:3:0.6",
                                  "jitter:1:2:3:0.1:5",
                                  "jitter:-0.5",
                                  "erase:2",
                                  "erase:0.5:0.1",
                                  "erase:0.5:0.3:0.2",
                                  "erase:0.5:0:0.2",
                                  "erase:0.5:0.1:1",
                                  "affine",
                                  "affine:-5",
                                  "affine:5:2",
                                  "affine:5:0:1.5",
                                  "affine:5:0:1.5/1",
                                  "affine:5:0:0/1",
                                  "affine:5:0:1/1:-3",
                                  "affine:5:0:1/1:90",
                                  "affine:5:0:1/1:3:4",
                                  "trivial:1",
                                  "randaugment:0",
                                  "randaugment:17",
                                  "randaugment:2:31",
                                  "randaugment:x"}) {
        try {
            Transforms::parse(bad);
            ADD_FAILURE() << "'" << bad << "' was accepted";
        } catch (const ModuleError& e) {
            EXPECT_NE(std::string(e.what()).find("expected a comma-separated list"), std::string::npos) << e.what();
        }
    }
}

// ---- the loader ----------------------------------------------------------------------------

// An image folder of `perClass` images per class of 3 classes, PNG and JPEG alternating.
std::string makeFolder(const std::string& name, int perClass, int64_t side) {
    const std::string dir = tempDir(name);
    for (int k = 0; k < 3; ++k) {
        const std::string cls = dir + "/class" + std::to_string(k);
        fs::create_directories(cls);
        for (int i = 0; i < perClass; ++i) {
            const Image img = classImage(k, side, static_cast<uint64_t>(k * 1000 + i));
            if (i % 2) {
                writeJpeg(cls + "/" + std::to_string(i) + ".jpg", img, 90);
            } else {
                writePng(cls + "/" + std::to_string(i) + ".png", img);
            }
        }
    }
    return dir;
}

std::vector<DataBatch> epochOf(Loader& loader, int64_t epoch, int64_t first = 0) {
    std::vector<DataBatch> out;
    loader.start(epoch, first);
    while (std::optional<DataBatch> b = loader.next()) out.push_back(*b);
    return out;
}

void expectSameBatches(const std::vector<DataBatch>& a, const std::vector<DataBatch>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].index, b[i].index) << what;
        EXPECT_EQ(a[i].images.shape(), b[i].images.shape()) << what;
        EXPECT_EQ(a[i].images.toVector<float>(), b[i].images.toVector<float>()) << what << ", batch " << i;
        EXPECT_EQ(a[i].labels.toVector<int32_t>(), b[i].labels.toVector<int32_t>()) << what << ", batch " << i;
    }
}

TEST(Loader, TheSameBatchesWithZeroOneAndTwoWorkers) {
    const DatasetPtr data = imageFolder(makeFolder("determinism", 7, 12));
    const Transforms t = Transforms::parse("resize:10,crop:8:2,flip,normalize:0.5:0.25");
    std::vector<std::vector<DataBatch>> runs;
    for (int workers : {0, 1, 2}) {
        Loader loader(data, t, {.batchsize = 4, .seed = 3, .workers = workers});
        std::vector<DataBatch> both = epochOf(loader, 0);
        const std::vector<DataBatch> second = epochOf(loader, 1);
        both.insert(both.end(), second.begin(), second.end());
        runs.push_back(both);
        EXPECT_EQ(loader.batches(), 6);
        EXPECT_EQ(loader.sampleShape(), Shape({3, 8, 8}));
    }
    ASSERT_EQ(runs[0].size(), 12u);
    EXPECT_EQ(runs[0][5].images.shape(), Shape({1, 3, 8, 8})); // 21 samples: a last batch of 1
    expectSameBatches(runs[0], runs[1], "1 worker");
    expectSameBatches(runs[0], runs[2], "2 workers");
    // Epochs differ (order and augmentation), and every sample comes once per epoch.
    EXPECT_NE(runs[0][0].images.toVector<float>(), runs[0][6].images.toVector<float>());
    std::vector<int> count(3, 0);
    for (size_t b = 0; b < 6; ++b) {
        for (int32_t l : runs[0][b].labels.toVector<int32_t>()) ++count[static_cast<size_t>(l)];
    }
    EXPECT_EQ(count, std::vector<int>({7, 7, 7}));
    // A batch made on its own equals the loader's; starting in the middle gives the rest.
    Loader two(data, t, {.batchsize = 4, .seed = 3, .workers = 2});
    expectSameBatches({two.make(1, 2)}, {runs[0][8]}, "make(1, 2)");
    const std::vector<DataBatch> rest = epochOf(two, 1, 4);
    expectSameBatches(rest, {runs[0][10], runs[0][11]}, "epoch 1 from batch 4");
}

TEST(Loader, BalancedEpochsDrawEveryClassEquallyOften) {
    // 900 samples of class 0, 90 of class 1, 10 of class 2.
    std::vector<int32_t> labels(1000, 0);
    for (size_t i = 900; i < 1000; ++i) labels[i] = i < 990 ? 1 : 2;
    std::vector<int64_t> drawn(3, 0);
    std::set<int64_t> seen;
    for (int64_t epoch = 0; epoch < 6; ++epoch) {
        const std::vector<int64_t> order = balancedOrder(labels, 4, epoch);
        ASSERT_EQ(order.size(), labels.size());
        EXPECT_EQ(order, balancedOrder(labels, 4, epoch)); // a function of (seed, epoch)
        EXPECT_NE(order, balancedOrder(labels, 4, epoch + 1));
        EXPECT_NE(order, balancedOrder(labels, 5, epoch));
        for (int64_t i : order) {
            ASSERT_TRUE(i >= 0 && i < 1000);
            ++drawn[static_cast<size_t>(labels[static_cast<size_t>(i)])];
            seen.insert(i);
        }
    }
    for (int64_t k = 0; k < 3; ++k) EXPECT_NEAR(static_cast<double>(drawn[k]) / 6000.0, 1.0 / 3.0, 0.03) << k;
    EXPECT_EQ(std::count_if(seen.begin(), seen.end(), [](int64_t i) { return i >= 990; }), 10); // every rare one drawn
    // The loader takes that order with `balanced`, the same for any number of workers.
    std::vector<float> pixels(1000);
    std::iota(pixels.begin(), pixels.end(), 0.0f);
    const DatasetPtr data =
        tensorDataset(Tensor::fromVector({1000, 1, 1, 1}, pixels), Tensor::fromVector({1000}, labels));
    Loader one(data, {}, {.batchsize = 100, .seed = 4, .balanced = true});
    Loader two(data, {}, {.batchsize = 100, .seed = 4, .workers = 2, .balanced = true});
    const std::vector<DataBatch> a = epochOf(one, 3), b = epochOf(two, 3);
    expectSameBatches(a, b, "balanced, 0 and 2 workers");
    const std::vector<int64_t> order = balancedOrder(labels, 4, 3);
    ASSERT_EQ(a.size(), 10u);
    for (size_t k = 0; k < 100; ++k) EXPECT_EQ(a[0].images.toVector<float>()[k], static_cast<float>(order[k]));
}

TEST(Loader, OrderMatchesTheTrainersOrderForTensors) {
    const Tensor images = Tensor::rand({10, 1, 2, 2});
    const Tensor labels = Tensor::fromVector({10}, std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0});
    Loader loader(tensorDataset(images, labels), {}, {.batchsize = 3, .seed = 11, .workers = 1});
    const std::vector<int64_t> order = epochOrder(10, 11, 2, true);
    const std::vector<DataBatch> got = epochOf(loader, 2);
    ASSERT_EQ(got.size(), 4u);
    for (size_t b = 0; b < got.size(); ++b) {
        const int64_t begin = static_cast<int64_t>(b) * 3, end = std::min<int64_t>(10, begin + 3);
        EXPECT_EQ(got[b].images.toVector<float>(), gatherBatch(images, order, begin, end, {}).toVector<float>());
        EXPECT_EQ(got[b].labels.toVector<int32_t>(), gatherBatch(labels, order, begin, end, {}).toVector<int32_t>());
    }
    Loader flat(tensorDataset(images, labels), {}, {.batchsize = 3, .shuffle = false, .flatten = true});
    flat.start(0);
    EXPECT_EQ(flat.next()->images.shape(), Shape({3, 4}));
}

// Batches in page-locked memory (for GPU training) are the same batches; the memory is
// page-locked exactly when a CUDA device is present, and blocks come back for reuse.
TEST(Loader, PinnedBatchesAreTheSameBatches) {
    const Tensor images = Tensor::rand({50, 3, 4, 4});
    std::vector<int32_t> y(50);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(i % 5);
    const Tensor labels = Tensor::fromVector({50}, y);
    Loader plain(tensorDataset(images, labels), {}, {.batchsize = 8, .seed = 3, .workers = 2});
    Loader pinned(tensorDataset(images, labels), {}, {.batchsize = 8, .seed = 3, .workers = 2, .pinned = true});
    for (int64_t epoch = 0; epoch < 3; ++epoch) { // later epochs reuse the blocks earlier ones freed
        const std::vector<DataBatch> a = epochOf(plain, epoch), b = epochOf(pinned, epoch);
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) {
            EXPECT_EQ(b[i].images.toVector<float>(), a[i].images.toVector<float>());
            EXPECT_EQ(b[i].labels.toVector<int32_t>(), a[i].labels.toVector<int32_t>());
            EXPECT_EQ(isPinned(b[i].images), cudaDeviceCount() > 0);
            EXPECT_EQ(isPinned(b[i].labels), cudaDeviceCount() > 0);
            EXPECT_FALSE(isPinned(a[i].images));
        }
    }
}

TEST(Loader, AWorkersErrorReachesTheLoopInOrderNamingTheFile) {
    const std::string dir = makeFolder("broken", 4, 8);
    writeBytes(dir + "/class1/2.png", {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
    for (int workers : {0, 2}) {
        Loader loader(imageFolder(dir), {}, {.batchsize = 2, .shuffle = false, .workers = workers});
        loader.start(0);
        // Sorted: class0 (4 files), then class1's 0.png, 1.jpg, 2.png: batches 0, 1 and 2 are
        // good, batch 3 holds the broken file.
        for (int b = 0; b < 3; ++b) ASSERT_TRUE(loader.next().has_value());
        try {
            loader.next();
            ADD_FAILURE() << "the broken file went unnoticed with " << workers << " workers";
        } catch (const IoError& e) {
            EXPECT_NE(std::string(e.what()).find("class1/2.png"), std::string::npos) << e.what();
        }
        // The loader goes on: a new epoch starts cleanly (and fails at the same place).
        loader.start(1, 4);
        EXPECT_TRUE(loader.next().has_value());
    }
}

TEST(Loader, ImagesOfDifferentSizesNeedATransform) {
    const std::string dir = tempDir("sizes");
    fs::create_directories(dir + "/a");
    writePng(dir + "/a/1.png", gridImage(3, 8, 8, 1));
    writePng(dir + "/a/2.png", gridImage(3, 9, 7, 2));
    Loader loose(imageFolder(dir), {}, {.batchsize = 2, .shuffle = false});
    loose.start(0);
    try {
        loose.next();
        ADD_FAILURE() << "a 9x7 image went into a batch of 8x8 ones";
    } catch (const ShapeError& e) {
        EXPECT_NE(std::string(e.what()).find("a/2.png"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("resize"), std::string::npos) << e.what();
    }
    Loader fixed(imageFolder(dir), Transforms().resize(6, 6), {.batchsize = 2, .shuffle = false});
    fixed.start(0);
    EXPECT_EQ(fixed.next()->images.shape(), Shape({2, 3, 6, 6}));
    // A transform error names the sample's file too.
    Loader small(imageFolder(dir), Transforms().centerCrop(9, 9), {.batchsize = 1, .shuffle = false});
    small.start(0);
    try {
        small.next();
        ADD_FAILURE() << "a 9x9 crop of an 8x8 image";
    } catch (const ShapeError& e) {
        EXPECT_NE(std::string(e.what()).find("a/1.png"), std::string::npos) << e.what();
    }
}

TEST(Loader, BadUseIsAClearError) {
    const DatasetPtr d =
        tensorDataset(Tensor::rand({4, 1, 2, 2}), Tensor::fromVector({4}, std::vector<int32_t>{0, 1, 0, 1}));
    EXPECT_THROW(Loader(d, {}, {.batchsize = 0}), ShapeError);
    EXPECT_THROW(Loader(d, {}, {.workers = -1}), ModuleError);
    EXPECT_THROW(Loader(nullptr, {}, {}), ModuleError);
    Loader l(d, {}, {.batchsize = 2});
    EXPECT_THROW(l.next(), ModuleError); // before start
    EXPECT_THROW(l.start(0, 3), ModuleError);
    EXPECT_THROW(l.start(-1), ModuleError);
    // An epoch abandoned half way, with workers busy, gives way to the next one.
    Loader busy(d, {}, {.batchsize = 1, .workers = 2});
    busy.start(0);
    ASSERT_TRUE(busy.next().has_value());
    EXPECT_EQ(epochOf(busy, 1).size(), 4u);
    EXPECT_THROW(tensorDataset(Tensor::rand({4, 2}), Tensor::fromVector({4}, std::vector<int32_t>{0, 1, 0, 1})),
                 ShapeError);
    EXPECT_EQ(firstSamples(d, 3)->size(), 3);
    EXPECT_EQ(firstSamples(d, 30)->size(), 4);
}

// ---- training on files ---------------------------------------------------------------------

std::shared_ptr<Sequential> smallConvNet(int64_t side, int64_t classes) {
    auto net = std::make_shared<Sequential>("small");
    net->append(std::make_shared<Conv2D>(3, 8, 3, ConvOptions{.pad = {1}}));
    net->append(std::make_shared<Activation>(ActivationKind::relu));
    net->append(std::make_shared<MaxPool2D>(2));
    net->append(std::make_shared<Flatten>());
    net->append(std::make_shared<Linear>(8 * (side / 2) * (side / 2), classes));
    return net;
}

// Trains `epochs` epochs; returns the first epoch's loss, the last one's and the accuracy
// on `test`.
std::tuple<double, double, double> trainOn(Loader& train, Loader& test, int64_t side, int epochs) {
    manualSeed(5);
    auto net = smallConvNet(side, train.dataset().classes());
    Adam adam(3e-3f);
    adam.setupOn(*net, true);
    CrossEntropy cost;
    Trainer trainer(*net, cost, adam, {.progress = false});
    double first = 0, last = 0;
    for (int e = 0; e < epochs; ++e) {
        last = trainer.train(train);
        if (e == 0) first = last;
    }
    CrossEntropy vcost;
    Validator validator(*net, vcost, {.progress = false});
    return {first, last, 1.0 - validator.validate(test)};
}

// ---- mixing of samples ----------------------------------------------------------------------

TEST(Loader, BetaSamplesHaveBetasMeanAndVariance) {
    for (double alpha : {0.2, 1.0, 4.0}) {
        const int n = 40000;
        double sum = 0, sq = 0;
        for (int i = 0; i < n; ++i) {
            const double x = betaSample(alpha, 17, static_cast<uint64_t>(i));
            ASSERT_TRUE(x >= 0.0 && x <= 1.0) << x;
            sum += x, sq += x * x;
        }
        const double mean = sum / n, var = sq / n - mean * mean, want = 1.0 / (4.0 * (2.0 * alpha + 1.0));
        EXPECT_NEAR(mean, 0.5, 0.01) << alpha;
        EXPECT_NEAR(var, want, 0.03 * want) << alpha;
    }
    EXPECT_EQ(betaSample(0.4, 3, 9), betaSample(0.4, 3, 9));
    EXPECT_NE(betaSample(0.4, 3, 9), betaSample(0.4, 3, 10));
}

// Samples of n classes whose pixels are all different: images[i] = i + pixel / 1000.
std::pair<Tensor, Tensor> distinctSamples(int64_t count, int64_t c, int64_t h, int64_t w, int32_t classes) {
    std::vector<float> v(static_cast<size_t>(count * c * h * w));
    for (size_t k = 0; k < v.size(); ++k) {
        v[k] = static_cast<float>(k / static_cast<size_t>(c * h * w)) + static_cast<float>(k % (c * h * w)) / 1000.0f;
    }
    std::vector<int32_t> y(static_cast<size_t>(count));
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(i % static_cast<size_t>(classes));
    return {Tensor::fromVector({count, c, h, w}, v), Tensor::fromVector({count}, y)};
}

TEST(Loader, MixupBlendsEachSampleWithItsPartnerAndItsLabels) {
    const auto [images, labels] = distinctSamples(14, 2, 3, 4, 4);
    const DatasetPtr data = tensorDataset(images, labels);
    Loader plain(data, {}, {.batchsize = 5, .seed = 8});
    Loader mixed(data, {}, {.batchsize = 5, .seed = 8, .mixup = 0.4f});
    std::set<float> weights;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
        const std::vector<DataBatch> a = epochOf(plain, epoch), b = epochOf(mixed, epoch);
        ASSERT_EQ(a.size(), 3u);
        for (size_t k = 0; k < a.size(); ++k) {
            const int64_t n = a[k].labels.numel(), size = 24;
            ASSERT_EQ(b[k].labels.dtype(), DType::float32);
            ASSERT_EQ(b[k].labels.shape(), Shape({n, 4}));
            const std::vector<int32_t> y = a[k].labels.toVector<int32_t>();
            const std::vector<float> t = b[k].labels.toVector<float>(), x = a[k].images.toVector<float>(),
                                     m = b[k].images.toVector<float>();
            // The weight l of the batch, from the first pair's first pixels (they differ by n - 1).
            ASSERT_GE(n, 2);
            const float x0 = x[0], xp = x[static_cast<size_t>((n - 1) * size)];
            const float l = (m[0] - xp) / (x0 - xp);
            for (int64_t i = 0; i < n; ++i) {
                const int64_t p = n - 1 - i;
                float rowSum = 0;
                for (int c = 0; c < 4; ++c) rowSum += t[static_cast<size_t>(i * 4 + c)];
                EXPECT_NEAR(rowSum, 1.0f, 1e-6f);
                if (y[i] != y[p]) {
                    EXPECT_NEAR(t[static_cast<size_t>(i * 4 + y[p])], 1.0f - l, 1e-6f);
                    EXPECT_NEAR(t[static_cast<size_t>(i * 4 + y[i])], l, 1e-6f);
                }
                for (int64_t j = 0; j < size; ++j) {
                    const float want =
                        l * x[static_cast<size_t>(i * size + j)] + (1.0f - l) * x[static_cast<size_t>(p * size + j)];
                    ASSERT_NEAR(m[static_cast<size_t>(i * size + j)], want, 1e-5f) << "batch " << k << " sample " << i;
                }
            }
            weights.insert(l);
        }
    }
    EXPECT_GE(weights.size(), 8u); // a fresh weight per batch
    // Not in evaluation: the same batches as without mixing, with int32 labels.
    Loader eval(data, {}, {.batchsize = 5, .seed = 8, .train = false, .mixup = 0.4f});
    Loader evalPlain(data, {}, {.batchsize = 5, .seed = 8, .train = false});
    expectSameBatches(epochOf(eval, 0), epochOf(evalPlain, 0), "evaluation");
}

TEST(Loader, CutMixPastesABoxOfThePartnerAndWeighsLabelsByItsArea) {
    const auto [images, labels] = distinctSamples(24, 3, 8, 10, 6);
    const DatasetPtr data = tensorDataset(images, labels);
    Loader plain(data, {}, {.batchsize = 6, .seed = 5});
    Loader mixed(data, {}, {.batchsize = 6, .seed = 5, .cutmix = 1.0f});
    int boxes = 0;
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
        const std::vector<DataBatch> a = epochOf(plain, epoch), b = epochOf(mixed, epoch);
        for (size_t k = 0; k < a.size(); ++k) {
            const int64_t n = 6, plane = 80, size = 240;
            const std::vector<int32_t> y = a[k].labels.toVector<int32_t>();
            const std::vector<float> t = b[k].labels.toVector<float>(), x = a[k].images.toVector<float>(),
                                     m = b[k].images.toVector<float>();
            for (int64_t i = 0; i < n; ++i) {
                const int64_t p = n - 1 - i;
                // Each pixel is its own or its partner's; the partner's form one box, the same in
                // every channel.
                int64_t y0 = 8, y1 = -1, x0 = 10, x1 = -1, from = 0;
                for (int64_t c = 0; c < 3; ++c) {
                    for (int64_t r = 0; r < 8; ++r) {
                        for (int64_t q = 0; q < 10; ++q) {
                            const int64_t j = c * plane + r * 10 + q;
                            const float got = m[static_cast<size_t>(i * size + j)];
                            const bool own = got == x[static_cast<size_t>(i * size + j)];
                            ASSERT_TRUE(own || got == x[static_cast<size_t>(p * size + j)]);
                            if (!own && c == 0) {
                                ++from;
                                y0 = std::min(y0, r), y1 = std::max(y1, r), x0 = std::min(x0, q), x1 = std::max(x1, q);
                            }
                            if (c > 0) {
                                ASSERT_EQ(own, m[static_cast<size_t>(i * size + r * 10 + q)] ==
                                                   x[static_cast<size_t>(i * size + r * 10 + q)]);
                            }
                        }
                    }
                }
                if (i == p) {
                    EXPECT_EQ(from, 0);
                    continue;
                }
                if (from > 0) {
                    EXPECT_EQ(from, (y1 - y0 + 1) * (x1 - x0 + 1)); // a full rectangle
                    ++boxes;
                }
                const float share = static_cast<float>(from) / static_cast<float>(plane);
                if (y[i] != y[p]) {
                    EXPECT_NEAR(t[static_cast<size_t>(i * 6 + y[p])], share, 1e-6f) << "batch " << k << " " << i;
                    EXPECT_NEAR(t[static_cast<size_t>(i * 6 + y[i])], 1.0f - share, 1e-6f);
                }
            }
        }
    }
    EXPECT_GE(boxes, 20);
}

TEST(Loader, MixedBatchesAreTheSameForAnyWorkersAndBadAlphasAreRefused) {
    const DatasetPtr data = imageFolder(makeFolder("mixing", 5, 12));
    const Transforms t = Transforms::parse("resize:10,crop:8:2,flip");
    std::vector<std::vector<DataBatch>> runs;
    for (int workers : {0, 1, 2}) {
        Loader loader(data, t, {.batchsize = 4, .seed = 3, .workers = workers, .mixup = 0.2f, .cutmix = 1.0f});
        runs.push_back(epochOf(loader, 1));
    }
    for (size_t w = 1; w < 3; ++w) {
        ASSERT_EQ(runs[w].size(), runs[0].size());
        for (size_t i = 0; i < runs[0].size(); ++i) {
            EXPECT_EQ(runs[w][i].images.toVector<float>(), runs[0][i].images.toVector<float>());
            EXPECT_EQ(runs[w][i].labels.toVector<float>(), runs[0][i].labels.toVector<float>());
        }
    }
    // Labels as wide as a model's scores, which may outnumber the classes (3 here), not fewer.
    Loader wide(data, t, {.batchsize = 4, .mixup = 0.2f, .classes = 10});
    wide.start(0);
    const DataBatch w = *wide.next();
    EXPECT_EQ(w.labels.shape(), Shape({4, 10}));
    const std::vector<float> tw = w.labels.toVector<float>();
    EXPECT_NEAR(std::accumulate(tw.begin(), tw.end(), 0.0f), 4.0f, 1e-5f);
    EXPECT_TRUE(testing::throwsModuleError([&] { Loader(data, t, {.mixup = 0.2f, .classes = 2}); },
                                           {"classes 2 is fewer than the data set's 3"}));
    for (float bad : {-0.5f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
        EXPECT_TRUE(
            testing::throwsModuleError([&] { Loader(data, t, {.mixup = bad}); }, {"Loader: mixup", "Beta alpha"}));
        EXPECT_TRUE(testing::throwsModuleError([&] { Loader(data, t, {.cutmix = bad}); }, {"Loader: cutmix"}));
    }
}

TEST(LoaderTraining, ASmallNetworkLearnsFromMixedBatches) {
    const std::string dir = makeFolder("train_mixed", 24, 16);
    const Transforms t = Transforms::parse("crop:16:2,flip");
    Loader train(imageFolder(dir), t, {.batchsize = 8, .seed = 1, .workers = 2, .mixup = 0.2f, .cutmix = 1.0f});
    Loader test(imageFolder(dir), t, {.batchsize = 16, .shuffle = false, .train = false});
    const auto [first, last, accuracy] = trainOn(train, test, 16, 8);
    EXPECT_LT(last, 0.7 * first) << "first epoch " << first << ", last " << last;
    EXPECT_GT(accuracy, 0.9);
}

TEST(LoaderTraining, ASmallNetworkLearnsFromAnImageFolderOfJpegsAndPngs) {
    const std::string dir = makeFolder("train_folder", 24, 16);
    const Transforms t = Transforms::parse("crop:16:2,flip");
    Loader train(imageFolder(dir), t, {.batchsize = 8, .seed = 1, .workers = 2});
    Loader test(imageFolder(dir), t, {.batchsize = 16, .shuffle = false, .train = false});
    const auto [first, last, accuracy] = trainOn(train, test, 16, 6);
    EXPECT_LT(last, 0.5 * first) << "first epoch " << first << ", last " << last;
    EXPECT_GT(accuracy, 0.9);
}

TEST(LoaderTraining, ASmallNetworkLearnsFromCifarFormatFiles) {
    const std::string dir = tempDir("train_cifar");
    // 3 classes of CIFAR-10's 10, 30 images each, spread over the five batch files.
    std::vector<std::vector<uint8_t>> files(5);
    for (int i = 0; i < 90; ++i) {
        const int k = i % 3;
        const Image img = classImage(k, 32, static_cast<uint64_t>(i));
        std::vector<uint8_t>& f = files[static_cast<size_t>(i % 5)];
        f.push_back(static_cast<uint8_t>(k * 3)); // labels 0, 3 and 6
        for (float v : img.pixels) f.push_back(static_cast<uint8_t>(std::clamp(v, 0.0f, 1.0f) * 255.0f + 0.5f));
    }
    for (int b = 0; b < 5; ++b) writeBytes(dir + "/data_batch_" + std::to_string(b + 1) + ".bin", files[size_t(b)]);
    writeBytes(dir + "/test_batch.bin", files[0]);
    Loader train(cifar10(dir, "train"), Transforms::parse("crop:32:4,flip,normalize:cifar10"),
                 {.batchsize = 10, .seed = 2, .workers = 1});
    Loader test(cifar10(dir, "test"), Transforms::parse("crop:32:4,flip,normalize:cifar10"),
                {.batchsize = 18, .shuffle = false, .train = false});
    const auto [first, last, accuracy] = trainOn(train, test, 32, 6);
    EXPECT_LT(last, 0.5 * first) << "first epoch " << first << ", last " << last;
    EXPECT_GT(accuracy, 0.9);
}

TEST(LoaderTraining, ALoaderOverTensorsTrainsLikeTheTensors) {
    manualSeed(9);
    const Tensor images = Tensor::rand({40, 3, 4, 4});
    std::vector<int32_t> l(40);
    for (int i = 0; i < 40; ++i) l[size_t(i)] = i % 3;
    const Tensor labels = Tensor::fromVector({40}, l);
    auto run = [&](bool loader) {
        manualSeed(4);
        auto net = smallConvNet(4, 3);
        Adam adam(1e-2f);
        adam.setupOn(*net, true);
        CrossEntropy cost;
        Trainer trainer(*net, cost, adam, {.batchsize = 8, .seed = 6, .progress = false});
        Loader data(tensorDataset(images, labels), {}, {.batchsize = 8, .seed = 6, .workers = 2});
        std::vector<double> losses;
        for (int e = 0; e < 3; ++e) losses.push_back(loader ? trainer.train(data) : trainer.train(images, labels));
        return losses;
    };
    EXPECT_EQ(run(true), run(false)); // bit for bit: the same batches in the same order
}

} // namespace
} // namespace tessera
