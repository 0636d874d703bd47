#include "data/Npy.h"

#include <sys/resource.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "GradCheck.h"

namespace tessera {
namespace {
using namespace testing;

TEST(Npy, RoundTripsFloatAndInt) {
    const std::string dir = ::testing::TempDir();
    const Tensor f = randomTensor({2, 3, 4}, 1);
    writeNpy(f, dir + "f.npy");
    const Tensor g = readNpy(dir + "f.npy");
    EXPECT_EQ(g.shape(), f.shape());
    EXPECT_EQ(g.toVector<float>(), f.toVector<float>());
    const Tensor i = Tensor::fromVector({5}, std::vector<int32_t>{3, -1, 0, 7, 2});
    writeNpy(i, dir + "i.npy");
    const Tensor j = readNpy(dir + "i.npy");
    EXPECT_EQ(j.dtype(), DType::int32);
    EXPECT_EQ(j.toVector<int32_t>(), i.toVector<int32_t>());
}

// NumPy reads what Tessera writes and the other way round (float64, int64 and bool convert).
TEST(Npy, InteroperatesWithNumpy) {
    if (std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") != 0) GTEST_SKIP() << "no numpy";
    const std::string dir = ::testing::TempDir();
    writeNpy(Tensor::arange(6).reshape({2, 3}), dir + "mine.npy");
    const std::string script = "import numpy as np, sys; d = sys.argv[1]; a = np.load(d + 'mine.npy'); "
                               "assert a.dtype == np.float32 and a.shape == (2, 3) and a[1, 2] == 5, a; "
                               "np.save(d + 'theirs64.npy', np.arange(6, dtype=np.float64).reshape(3, 2) / 2); "
                               "np.save(d + 'labels.npy', np.array([1, 2, 3], dtype=np.int64)); "
                               "np.save(d + 'mask.npy', np.array([[True, False, True]]))";
    ASSERT_EQ(std::system(("/usr/bin/python3 -c \"" + script + "\" '" + dir + "'").c_str()), 0);
    const Tensor t = readNpy(dir + "theirs64.npy");
    EXPECT_EQ(t.shape(), (Shape{3, 2}));
    EXPECT_TRUE(allClose(t, {0, 0.5f, 1, 1.5f, 2, 2.5f}));
    EXPECT_EQ(readNpy(dir + "labels.npy").toVector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
    // bool (a padding mask) as int32 0 and 1
    std::string dtype;
    const Tensor mask = readNpy(dir + "mask.npy", &dtype);
    EXPECT_EQ(dtype, "bool");
    EXPECT_EQ(mask.shape(), (Shape{1, 3}));
    EXPECT_EQ(mask.toVector<int32_t>(), (std::vector<int32_t>{1, 0, 1}));
}

// uint8 arrays (images) read as bytes, one per element, with their shape; the header alone
// gives the type; another type is an error naming the file and both types.
TEST(Npy, Uint8ArraysReadAsBytes) {
    if (std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") != 0) GTEST_SKIP() << "no numpy";
    const std::string dir = ::testing::TempDir();
    const std::string script = "import numpy as np, sys; d = sys.argv[1]; "
                               "np.save(d + 'bytes.npy', (np.arange(24) * 11 % 256).astype(np.uint8).reshape(2, 3, 4))";
    ASSERT_EQ(std::system(("/usr/bin/python3 -c \"" + script + "\" '" + dir + "'").c_str()), 0);
    Shape shape;
    EXPECT_EQ(npyDtype(dir + "bytes.npy", &shape), "uint8");
    EXPECT_EQ(shape, (Shape{2, 3, 4}));
    shape = Shape{};
    const std::vector<uint8_t> bytes = readNpyBytes(dir + "bytes.npy", shape);
    EXPECT_EQ(shape, (Shape{2, 3, 4}));
    ASSERT_EQ(bytes.size(), 24u);
    for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(bytes[i], i * 11 % 256) << i;
    // readNpy gives the same values as int32
    const std::vector<int32_t> wide = readNpy(dir + "bytes.npy").toVector<int32_t>();
    EXPECT_TRUE(std::equal(wide.begin(), wide.end(), bytes.begin()));

    writeNpy(randomTensor({2, 2}, 3), dir + "floats.npy");
    EXPECT_EQ(npyDtype(dir + "floats.npy"), "float32");
    const std::string error = errorOf([&] { readNpyBytes(dir + "floats.npy", shape); });
    EXPECT_NE(error.find("floats.npy: holds float32 data, not uint8"), std::string::npos) << error;
    std::filesystem::resize_file(dir + "bytes.npy", std::filesystem::file_size(dir + "bytes.npy") - 1);
    EXPECT_NE(errorOf([&] { readNpyBytes(dir + "bytes.npy", shape); }).find("bytes.npy: truncated"), std::string::npos);
    std::filesystem::create_directories(dir + "adir.npy");
    EXPECT_NE(errorOf([&] { readNpy(dir + "adir.npy"); }).find("adir.npy: is a directory"), std::string::npos);
}

TEST(Npy, BadFilesAreIoErrorsNamingThem) {
    const std::string dir = ::testing::TempDir();
    EXPECT_THROW(readNpy(dir + "missing.npy"), IoError);
    std::ofstream(dir + "junk.npy") << "hello";
    EXPECT_NE(errorOf([&] { readNpy(dir + "junk.npy"); }).find("junk.npy: not a .npy file"), std::string::npos);
    writeNpy(randomTensor({4, 4}, 2), dir + "cut.npy");
    std::filesystem::resize_file(dir + "cut.npy", std::filesystem::file_size(dir + "cut.npy") - 8);
    EXPECT_NE(errorOf([&] { readNpy(dir + "cut.npy"); }).find("cut.npy: truncated"), std::string::npos);

    // A header's shape is read as written: a negative or malformed dim is an error, not a
    // number whose sign is skipped ("(-4, 4)" once read as [4, 4]).
    const auto withShape = [&](const std::string& name, const std::string& shape) {
        std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
        header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
        header += '\n';
        std::string bytes("\x93NUMPY\x01\x00", 8);
        bytes += static_cast<char>(header.size() & 0xff);
        bytes += static_cast<char>(header.size() >> 8);
        bytes += header;
        bytes.append(64, '\0'); // 16 float32 zeros
        std::ofstream(dir + name, std::ios::binary) << bytes;
        return dir + name;
    };
    for (const char* shape : {"(-4, 4)", "(4, -4)", "(4, 4.5)", "(4,, 4)", "(a, 4)"}) {
        const std::string e = errorOf([&] { readNpy(withShape("bad_shape.npy", shape)); });
        EXPECT_NE(e.find("is not a whole number >= 0"), std::string::npos) << shape << ": " << e;
    }
    EXPECT_EQ(readNpy(withShape("py2.npy", "(4L, 4L)")).shape(), (Shape{4, 4})); // Python 2's longs
    EXPECT_EQ(readNpy(withShape("trailing.npy", "(16,)")).shape(), (Shape{16}));
}

// A write that fails part-way (a file-size limit here: writes fail with EFBIG as they do
// with ENOSPC on a full disk) keeps the old file whole, leaves no temporary, and says why
// with the system's reason.
TEST(Npy, AFailedWriteKeepsTheOldFileAndSaysWhy) {
    const std::string path = ::testing::TempDir() + "tessera_kept.npy";
    writeNpy(Tensor::fromVector(Shape{2}, std::vector<float>{1.0f, 2.0f}), path);
    const auto bytes = [&] {
        std::ifstream in(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    const std::string before = bytes();
    struct sigaction ignore {
    }, old{};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGXFSZ, &ignore, &old);
    rlimit limit{};
    getrlimit(RLIMIT_FSIZE, &limit);
    const rlimit saved = limit;
    limit.rlim_cur = 1000;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
    const std::string e = errorOf([&] { writeNpy(Tensor::zeros({4000}), path); });
    setrlimit(RLIMIT_FSIZE, &saved);
    sigaction(SIGXFSZ, &old, nullptr);
    EXPECT_NE(e.find("npy file " + path), std::string::npos) << e;
    EXPECT_NE(e.find(std::strerror(EFBIG)), std::string::npos) << e;
    EXPECT_EQ(bytes(), before);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    EXPECT_EQ(readNpy(path).toVector<float>(), (std::vector<float>{1.0f, 2.0f}));
}

} // namespace
} // namespace tessera
