#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "GradCheck.h"
#include "backend/Backend.h"
#include "backend/Random.h"
#include "backend/cpu/CpuBackend.h"
#include "backend/cpu/OpenBlas.h"

namespace tessera {
namespace {
using namespace testing;

TEST(Shape, Basics) {
    Shape s{128, 1, 28, 28};
    EXPECT_EQ(s.rank(), 4u);
    EXPECT_EQ(s.numel(), 128 * 28 * 28);
    EXPECT_EQ(s[-1], 28);
    EXPECT_EQ(s.str(), "[128, 1, 28, 28]");
    EXPECT_THROW(s[4], ShapeError);
    EXPECT_EQ(str(Shapes{Shape{1, 2}, Shape{3}}), "[[1, 2], [3]]");
}

// Sizes past 64 bits are clear errors, not wrapped counts: element counts, byte counts,
// and the parameters of a layer of 2^32 x 2^32 (which used to report "0 parameters").
TEST(Shape, CountsThatOverflowAreErrors) {
    const int64_t big = int64_t{1} << 32;
    EXPECT_TRUE(throwsShapeError([&] { Shape{big, big}.numel(); }, {"[4294967296, 4294967296]", "overflows 64 bits"}));
    EXPECT_EQ((Shape{big, big / 4}).numel(), int64_t{1} << 62);
    EXPECT_TRUE(throwsShapeError([&] { Shape{big, big / 2}.numel(); }, {"overflows 64 bits"})); // 2^63
    EXPECT_TRUE(throwsShapeError([&] { Tensor::empty({int64_t{1} << 62, 4}); }, {"overflow"}));
    EXPECT_TRUE(throwsShapeError([&] { Tensor::empty({int64_t{1} << 61, 2}); }, {"byte count overflows 64 bits"}));
    EXPECT_TRUE(throwsShapeError([&] { parseShape("1x1x28x28x"); }, {"not a shape"}));
    EXPECT_TRUE(throwsShapeError([&] { parseShape("x28"); }, {"not a shape"}));
    EXPECT_TRUE(throwsShapeError([&] { parseShape("2xx3"); }, {"not a shape"}));
}

TEST(Tensor, StorageIsAligned) {
    for (int64_t n : {1, 3, 17, 1000}) {
        Tensor t = Tensor::empty({n});
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
    }
}

TEST(Tensor, WrapSharesMemoryAndHoldsItsOwnerUntilTheLastView) {
    std::vector<float> memory(16 + 16);
    float* aligned = memory.data();
    while (reinterpret_cast<uintptr_t>(aligned) % 64 != 0) ++aligned;
    int released = 0;
    std::shared_ptr<void> owner(nullptr, [&released](void*) { ++released; });
    Tensor t = Tensor::wrap(aligned, {2, 8}, DType::float32, owner);
    owner.reset();
    EXPECT_EQ(released, 0);
    aligned[3] = 5.0f;
    EXPECT_EQ(t.data<float>()[3], 5.0f); // no copy
    EXPECT_EQ(t.raw(), static_cast<void*>(aligned));
    Tensor view = t.reshape({16});
    t = Tensor();
    EXPECT_EQ(released, 0);
    EXPECT_EQ(view.toVector<float>()[3], 5.0f);
    view = Tensor();
    EXPECT_EQ(released, 1);
    EXPECT_THROW(Tensor::wrap(aligned + 1, {4}, DType::float32, nullptr), ShapeError);
    EXPECT_THROW(Tensor::wrap(aligned, {-1}, DType::float32, nullptr), ShapeError);
}

TEST(Tensor, FactoriesAndAccess) {
    Tensor z = Tensor::zeros({2, 3});
    EXPECT_EQ(z.toVector<float>(), std::vector<float>(6, 0.0f));
    EXPECT_EQ(Tensor::full({2}, 1.5f).toVector<float>(), (std::vector<float>{1.5f, 1.5f}));
    Tensor i = Tensor::fromVector({3}, std::vector<int32_t>{1, 2, 3});
    EXPECT_EQ(i.dtype(), DType::int32);
    EXPECT_EQ(i.nbytes(), 12u);
    EXPECT_THROW(i.data<float>(), ShapeError);
    EXPECT_THROW(Tensor::fromVector({2, 2}, std::vector<float>{1, 2, 3}), ShapeError);
    EXPECT_THROW(Tensor().data<float>(), ShapeError);
}

// Large zeros come from fresh pages (no fill) or, where a freed block of the size is kept,
// from that block filled: zeros either way, also in 16 bits and for sizes never seen.
TEST(Tensor, LargeZerosAreZerosFreshOrReused) {
    const int64_t n = (3 << 20) / 4 + 5; // 3 MiB and a bit: mapped pages
    for (int round = 0; round < 3; ++round) {
        {
            Tensor dirty = Tensor::full({n}, 7.0f); // freed below: its block is kept for reuse
            EXPECT_EQ(dirty.toVector<float>()[static_cast<size_t>(n - 1)], 7.0f);
        }
        const Tensor z = Tensor::zeros({n});
        const std::vector<float> v = z.toVector<float>();
        EXPECT_EQ(std::count(v.begin(), v.end(), 0.0f), n) << "round " << round;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(z.raw()) % 64, 0u);
        const Tensor fresh = Tensor::zeros({n + 4099 * (round + 1)}, round == 2 ? DType::bfloat16 : DType::float32);
        const std::vector<float> f = fresh.toVector<float>();
        EXPECT_EQ(std::count(f.begin(), f.end(), 0.0f), fresh.numel()) << "round " << round;
        backendFor(Device::cpu()).fill(fresh, 1.0f); // writable
        EXPECT_EQ(fresh.toVector<float>()[100], 1.0f);
    }
    const MemoryStats before = backendFor(Device::cpu()).memoryStats();
    {
        const Tensor z = Tensor::zeros({n * 2});
        EXPECT_EQ(backendFor(Device::cpu()).memoryStats().current, before.current + static_cast<size_t>(n * 2 * 4));
    }
    EXPECT_EQ(backendFor(Device::cpu()).memoryStats().current, before.current);
}

TEST(Tensor, SixteenBitZerosAndFills) {
    for (DType t : {DType::float16, DType::bfloat16}) {
        Tensor z = Tensor::zeros({3}, t);
        EXPECT_EQ(z.dtype(), t);
        EXPECT_EQ(z.toVector<float>(), std::vector<float>(3, 0.0f));
        backendFor(Device::cpu()).fill(z, -2.5f);
        EXPECT_EQ(z.toVector<float>(), std::vector<float>(3, -2.5f));
    }
}

TEST(Tensor, ReshapeIsAView) {
    Tensor t = Tensor::fromVector({2, 3}, std::vector<float>{0, 1, 2, 3, 4, 5});
    Tensor v = t.reshape({3, -1});
    EXPECT_EQ(v.shape(), (Shape{3, 2}));
    EXPECT_TRUE(v.sharesStorage(t));
    v.data<float>()[0] = 9;
    EXPECT_EQ(t.data<float>()[0], 9);
    EXPECT_THROW(t.reshape({4, -1}), ShapeError);
    EXPECT_THROW(t.reshape({-1, -1}), ShapeError);
    EXPECT_THROW(t.reshape({7}), ShapeError);
}

TEST(Tensor, SliceIsABatchView) {
    Tensor t = Tensor::fromVector({4, 2}, std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});
    Tensor s = t.slice(1, 3);
    EXPECT_EQ(s.shape(), (Shape{2, 2}));
    EXPECT_EQ(s.toVector<float>(), (std::vector<float>{2, 3, 4, 5}));
    s.data<float>()[0] = -1;
    EXPECT_EQ(t.data<float>()[2], -1);
    EXPECT_THROW(t.slice(3, 5), ShapeError);
    EXPECT_THROW(t.slice(2, 1), ShapeError);
}

TEST(Tensor, CopiesAreExplicit) {
    Tensor t = Tensor::fromVector({2}, std::vector<float>{1, 2});
    Tensor c = t.clone();
    EXPECT_FALSE(c.sharesStorage(t));
    c.data<float>()[0] = 5;
    EXPECT_EQ(t.data<float>()[0], 1);
    Tensor h = t.toHost();
    EXPECT_FALSE(h.sharesStorage(t));
    Tensor dst = Tensor::empty({2});
    dst.copyFrom(t);
    EXPECT_EQ(dst.toVector<float>(), t.toVector<float>());
    EXPECT_THROW(dst.copyFrom(Tensor::zeros({3})), ShapeError);
}

// Without a CUDA build, or without a GPU, asking for CUDA memory names the device.
TEST(Tensor, CudaWithoutBackendIsAClearError) {
    if (cudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
    try {
        Tensor::empty({2}, DType::float32, Device::cuda(0));
        FAIL() << "expected BackendError";
    } catch (const BackendError& e) {
        EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    }
}

TEST(CpuBackend, GemmAllTransposes) {
    Backend& be = backendFor(Device::cpu());
    // A = [[1, 2], [3, 4]], B = [[5, 6], [7, 8]]
    Tensor A = Tensor::fromVector({2, 2}, std::vector<float>{1, 2, 3, 4});
    Tensor B = Tensor::fromVector({2, 2}, std::vector<float>{5, 6, 7, 8});
    Tensor C = Tensor::full({2, 2}, 1.0f);
    be.gemm(false, false, 1.0f, A, B, 0.0f, C);
    EXPECT_TRUE(allClose(C, {19, 22, 43, 50}));
    be.gemm(true, false, 1.0f, A, B, 0.0f, C); // A^T B
    EXPECT_TRUE(allClose(C, {26, 30, 38, 44}));
    be.gemm(false, true, 1.0f, A, B, 0.0f, C); // A B^T
    EXPECT_TRUE(allClose(C, {17, 23, 39, 53}));
    be.gemm(true, true, 2.0f, A, B, 1.0f, C); // 2 A^T B^T + C
    EXPECT_TRUE(allClose(C, {2 * 23 + 17, 2 * 31 + 23, 2 * 34 + 39, 2 * 46 + 53}));
    EXPECT_THROW(be.gemm(false, false, 1.0f, A, Tensor::zeros({3, 2}), 0.0f, C), ShapeError);
}

// gemmBatched gives each product what gemm gives it, for every transpose, alpha and beta,
// on both float32 engines (oneDNN's batched matmul and OpenBLAS's per product), and the
// default one-gemm-per-product path agrees.
TEST(CpuBackend, GemmBatchedIsGemmPerProduct) {
    CpuBackend& be = static_cast<CpuBackend&>(backendFor(Device::cpu()));
    const Float32Gemm before = CpuBackend::float32Gemm();
    const int64_t batch = 5, M = 7, N = 6, K = 9;
    for (Float32Gemm engine : {Float32Gemm::onednn, Float32Gemm::openblas}) {
        CpuBackend::setFloat32Gemm(engine);
        for (int t = 0; t < 4; ++t) {
            const bool ta = t & 1, tb = t & 2;
            SCOPED_TRACE(std::to_string(static_cast<int>(engine)) + " transA " + std::to_string(ta) + " transB " +
                         std::to_string(tb));
            const Tensor A = randomTensor(ta ? Shape{batch, K, M} : Shape{batch, M, K}, 1);
            const Tensor B = randomTensor(tb ? Shape{batch, N, K} : Shape{batch, K, N}, 2);
            const Tensor C0 = randomTensor({batch, M, N}, 3);
            Tensor C = C0.clone(), want = C0.clone(), viaDefault = C0.clone();
            be.gemmBatched(ta, tb, 0.5f, A, B, 2.0f, C);
            be.Backend::gemmBatched(ta, tb, 0.5f, A, B, 2.0f, viaDefault);
            for (int64_t i = 0; i < batch; ++i) {
                auto at = [i](const Tensor& x) { return x.slice(i, i + 1).reshape({x.shape()[1], x.shape()[2]}); };
                be.gemm(ta, tb, 0.5f, at(A), at(B), 2.0f, at(want));
            }
            EXPECT_TRUE(allClose(C, want.toVector<float>(), 1e-5f));
            EXPECT_TRUE(allClose(viaDefault, want.toVector<float>(), 1e-5f));
        }
        EXPECT_THROW(be.gemmBatched(false, false, 1.0f, Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 5, 6}), 0.0f,
                                    Tensor::zeros({2, 3, 6})),
                     ShapeError);
        EXPECT_THROW(be.gemmBatched(false, false, 1.0f, Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 6}), 0.0f,
                                    Tensor::zeros({2, 3, 6})),
                     ShapeError);
    }
    CpuBackend::setFloat32Gemm(before);
}

// Tessera picks OpenBLAS's kernel set from the CPU's instruction sets as oneDNN's cap
// leaves them (unless OPENBLAS_CORETYPE is set, which ctest does not): under
// ONEDNN_MAX_CPU_ISA=AVX2 an AVX-512 CPU runs the Haswell kernels an AVX2-only CPU runs, so
// the capped legs test OpenBLAS's AVX2 path too (ctest runs this once with the cap:
// CpuBackend.openblas_follows_the_isa_cap).
TEST(CpuBackend, OpenBlasKernelsFollowTheIsaCap) {
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) { // the user's (or an earlier load's) choice wins
        GTEST_SKIP() << "OPENBLAS_CORETYPE=" << forced << " is set";
    }
    const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
    const std::string capped = cap ? cap : "";
    const std::string core = cpu::openBlas().coreName;
    EXPECT_FALSE(core.empty());
    if (avx512 && (capped == "AVX2" || capped == "avx2")) {
        EXPECT_EQ(core, "Haswell");
    } else if (avx512 && capped.empty()) {
        EXPECT_EQ(core, "SkylakeX");
    }
}

TEST(CpuBackend, RowOps) {
    Backend& be = backendFor(Device::cpu());
    Tensor y = Tensor::empty({3, 2});
    be.broadcastRows(Tensor::fromVector({2}, std::vector<float>{1, -1}), y);
    EXPECT_TRUE(allClose(y, {1, -1, 1, -1, 1, -1}));
    Tensor s = Tensor::full({2}, 10.0f);
    be.sumRows(Tensor::fromVector({3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6}), 2.0f, 0.5f, s);
    EXPECT_TRUE(allClose(s, {2 * 9 + 5, 2 * 12 + 5}));
    // Wide rows cross the 256-column blocks.
    Tensor wide = Tensor::full({5, 700}, 1.0f);
    Tensor ws = Tensor::empty({700});
    be.sumRows(wide, 1.0f, 0.0f, ws);
    EXPECT_TRUE(allClose(ws, std::vector<float>(700, 5.0f)));
}

TEST(CpuBackend, RandomIsSeededAndThreadIndependent) {
    Backend& be = backendFor(Device::cpu());
    Generator g1(123), g2(123);
    Tensor a = Tensor::empty({100000}), b = Tensor::empty({100000});
    be.fillUniform(a, -1.0f, 1.0f, g1);
    be.fillUniform(b, -1.0f, 1.0f, g2);
    EXPECT_EQ(a.toVector<float>(), b.toVector<float>());
    // The generator advances: the next draw differs.
    be.fillUniform(b, -1.0f, 1.0f, g2);
    EXPECT_NE(a.toVector<float>(), b.toVector<float>());
    // Moments of N(0.5, 2^2).
    Tensor n = Tensor::empty({200000});
    be.fillNormal(n, 0.5f, 2.0f, g1);
    double sum = 0, sq = 0;
    for (float v : n.toVector<float>()) {
        sum += v;
        sq += static_cast<double>(v) * v;
    }
    const double mean = sum / 200000, var = sq / 200000 - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.02);
    EXPECT_NEAR(std::sqrt(var), 2.0, 0.02);
}

} // namespace
} // namespace tessera

namespace tessera {
namespace {

Tensor iota(const Shape& s) {
    std::vector<float> v(static_cast<size_t>(s.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    return Tensor::fromVector(s, v);
}

TEST(TensorLayout, BlockedRoundTripKeepsValuesAndPadsChannels) {
    Tensor x = iota({2, 20, 3, 2});
    for (Layout l : {Layout::blocked8, Layout::blocked16}) {
        SCOPED_TRACE(str(l));
        Tensor b = x.toLayout(l);
        EXPECT_EQ(b.layout(), l);
        EXPECT_EQ(b.shape(), x.shape());
        // 20 channels pad to 24 (blocks of 8) or 32 (blocks of 16).
        EXPECT_EQ(b.nbytes(), static_cast<size_t>(2 * (l == Layout::blocked8 ? 24 : 32) * 6 * 4));
        EXPECT_EQ(b.toVector<float>(), x.toVector<float>());
        EXPECT_EQ(b.plain().toVector<float>(), x.toVector<float>());
        // A batch slice of a blocked tensor is still whole rows.
        EXPECT_EQ(b.slice(1, 2).toVector<float>(), x.slice(1, 2).toVector<float>());
        // Copies keep the layout; copyFrom across layouts reorders.
        EXPECT_EQ(b.clone().layout(), l);
        Tensor back = Tensor::empty(x.shape());
        back.copyFrom(b);
        EXPECT_EQ(back.toVector<float>(), x.toVector<float>());
    }
    EXPECT_TRUE(x.plain().sharesStorage(x));
}

// float16 tensors take the channels-last layout (the CUDA backend's 16-bit NHWC
// activations) and no blocked one; conversions between the floating types keep it, and a
// reorder back to plain gives the values in order.
TEST(TensorLayout, Float16TakesChannelsLastOnly) {
    const Tensor x = iota({2, 5, 3, 4}); // small integers: exact in every floating type
    for (DType from : {DType::float32, DType::bfloat16}) {
        SCOPED_TRACE(str(from));
        const Tensor last = x.convertedTo(from).toLayout(Layout::channelsLast);
        const Tensor h = last.convertedTo(DType::float16);
        EXPECT_EQ(h.dtype(), DType::float16);
        EXPECT_EQ(h.layout(), Layout::channelsLast);
        EXPECT_EQ(h.nbytes(), x.nbytes() / 2); // no padding
        EXPECT_EQ(h.toVector<float>(), x.toVector<float>());
        EXPECT_EQ(h.plain().toVector<float>(), x.toVector<float>());
        const Tensor back = h.convertedTo(from);
        EXPECT_EQ(back.layout(), Layout::channelsLast);
        EXPECT_EQ(back.toVector<float>(), x.toVector<float>());
    }
    // Elements in channels-last storage: [N, H, W, C].
    const Tensor h = x.convertedTo(DType::float16).toLayout(Layout::channelsLast);
    const Tensor raw = Tensor::empty({2 * 5 * 3 * 4}, DType::float16);
    std::memcpy(raw.raw(), h.raw(), h.nbytes());
    EXPECT_EQ(raw.toVector<float>()[1], x.toVector<float>()[12]); // n 0, h 0, w 0, c 1
    EXPECT_THROW(Tensor::empty({1, 16, 2, 2}, DType::float16, {}, Layout::blocked16), ShapeError);
    EXPECT_THROW(Tensor::empty({1, 16, 2, 2}, DType::int32, {}, Layout::channelsLast), ShapeError);
    // Blocked data asked for in float16 becomes plain.
    EXPECT_EQ(x.toLayout(Layout::blocked8).convertedTo(DType::float16).layout(), Layout::plain);
}

TEST(TensorLayout, PlainOnlyAccessThrowsOnBlockedData) {
    Tensor b = iota({1, 16, 2, 2}).toLayout(Layout::blocked16);
    try {
        b.data<float>();
        FAIL() << "no throw";
    } catch (const ShapeError& e) {
        EXPECT_NE(std::string(e.what()).find("blocked16 layout; call plain() first"), std::string::npos) << e.what();
    }
    EXPECT_THROW(b.reshape({16, 4}), ShapeError);
    EXPECT_NO_THROW(b.storageData<float>());
    EXPECT_THROW(Tensor::empty({4, 16}, DType::float32, {}, Layout::blocked16), ShapeError);
    EXPECT_THROW(Tensor::empty({1, 16, 2, 2}, DType::int32, {}, Layout::blocked16), ShapeError);
}

TEST(TensorLayout, AxpbyAcrossLayoutsReordersTheSource) {
    Tensor x = iota({2, 20, 2, 2});
    Tensor y = Tensor::full({2, 20, 2, 2}, 1.0f).toLayout(Layout::blocked16);
    backendOf(y).axpby(2.0f, x, 1.0f, y);
    const auto got = y.toVector<float>(), xs = x.toVector<float>();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_FLOAT_EQ(got[i], 2.0f * xs[i] + 1.0f);
}

TEST(TensorLayout, AxpbyzInOneLayoutOrAcrossLayouts) {
    const Tensor x = iota({2, 20, 2, 2});
    const Tensor y = Tensor::full({2, 20, 2, 2}, 1.5f);
    const auto xs = x.toVector<float>(), ys = y.toVector<float>();
    // All plain, all blocked (the padded channels included), and mixed (reordered first).
    const std::pair<Layout, Layout> cases[] = {
        {Layout::plain, Layout::plain}, {Layout::blocked16, Layout::blocked16}, {Layout::plain, Layout::blocked16}};
    for (const auto& [in, out] : cases) {
        const Tensor z = Tensor::empty(x.shape(), DType::float32, {}, out);
        backendOf(z).axpbyz(2.0f, x.toLayout(in), -0.5f, y.toLayout(out), z);
        const auto got = z.toVector<float>();
        for (size_t i = 0; i < got.size(); ++i) ASSERT_FLOAT_EQ(got[i], 2.0f * xs[i] - 0.5f * ys[i]) << i;
    }
}

} // namespace
} // namespace tessera
