#include "modules/MatMul.h"

#include <algorithm>

#include "backend/Backend.h"
#include "modules/BatchUtil.h"

namespace tessera {

using batch::matrices;
using batch::matrix;

namespace {
// Neither input broadcast: batch n of the result reads batch n of each.
bool oneToOne(const batch::Batches& batches, const Tensor& a3, const Tensor& b3) {
    const auto count = static_cast<int64_t>(batches.ofA.size());
    if (a3.shape()[0] != count || b3.shape()[0] != count) return false;
    for (int64_t n = 0; n < count; ++n) {
        if (batches.ofA[static_cast<size_t>(n)] != n || batches.ofB[static_cast<size_t>(n)] != n) return false;
    }
    return true;
}
} // namespace

MatMul::MatMul(const MatMulOptions& options) : Module(options.name), options_(options) {}

void MatMul::checkDataShape(const Shapes& inShapes) const {
    requireCount(inShapes, 2, "input");
    const Shape &a = inShapes[0], &b = inShapes[1];
    if (a.rank() < 2 || b.rank() < 2) {
        throw shapeError("expects inputs of rank 2 or more, [..., M, K] and [..., K, N], got " + a.str() + " and " +
                         b.str());
    }
    const int64_t k = a[a.rank() - 1], kb = options_.transB ? b[b.rank() - 1] : b[b.rank() - 2];
    if (k != kb) {
        throw shapeError("the inner dims differ: " + a.str() + " times " + b.str() +
                         (options_.transB ? " transposed" : "") + " (" + std::to_string(k) + " and " +
                         std::to_string(kb) + ")");
    }
    std::string why;
    batch::of(a, b, why, false);
    if (!why.empty()) throw shapeError(why);
}

Shapes MatMul::dataShapeFrom(const Shapes& inShapes) const {
    checkDataShape(inShapes); // the ranks it reads (callers such as the ONNX import's inference ask first)
    const Shape &a = inShapes[0], &b = inShapes[1];
    std::string why;
    std::vector<int64_t> d = batch::of(a, b, why, false).dims;
    d.push_back(a[a.rank() - 2]);
    d.push_back(options_.transB ? b[b.rank() - 2] : b[b.rank() - 1]);
    return {Shape(d)};
}

Shapes MatMul::gradShapeFrom(const Shapes&) const { return lastInShapes("gradShapeFrom"); } // each input's

// y[n] = alpha a[ofA[n]] b[ofB[n]] for every batch n
Tensors MatMul::updateData(const Tensors& data) {
    const Tensor a = matrices(data[0]), b = matrices(data[1]);
    std::string why;
    const batch::Batches batches = batch::of(data[0].shape(), data[1].shape(), why);
    const Shape out = dataShapeFrom(Shapes{data[0].shape(), data[1].shape()})[0];
    Tensor y = Tensor::empty(out, DType::float32, a.device());
    const Tensor y3 = matrices(y);
    Backend& be = backendOf(a);
    if (oneToOne(batches, a, b) && computeDType() == DType::float32) { // every batch its own pair: one call
        be.gemmBatched(false, options_.transB, options_.alpha, a, b, 0.0f, y3);
        return {y};
    }
    for (size_t n = 0; n < batches.ofA.size(); ++n) {
        be.gemm(false, options_.transB, options_.alpha, matrix(a, batches.ofA[n]), matrix(b, batches.ofB[n]), 0.0f,
                matrix(y3, static_cast<int64_t>(n)), computeDType());
    }
    return {y};
}

// da[ofA[n]] += alpha dy[n] op(b)^T, db[ofB[n]] += alpha a^T dy[n] (or its transpose with
// transB): a batch read by several outputs sums their gradients.
Tensors MatMul::updateGrad(const Tensors& grad) {
    const Tensors& x = inDataList();
    const Tensor a = matrices(x[0]), b = matrices(x[1]), dy = matrices(grad[0]);
    std::string why;
    const batch::Batches batches = batch::of(x[0].shape(), x[1].shape(), why);
    Tensor da = Tensor::zeros(x[0].shape(), DType::float32, a.device());
    Tensor db = Tensor::zeros(x[1].shape(), DType::float32, b.device());
    const Tensor da3 = matrices(da), db3 = matrices(db);
    Backend& be = backendOf(dy);
    const float alpha = options_.alpha;
    if (oneToOne(batches, a, b) && computeDType() == DType::float32) {
        // y = a b: da = dy b^T, db = a^T dy; y = a b^T: da = dy b, db = dy^T a
        be.gemmBatched(false, !options_.transB, alpha, dy, b, 0.0f, da3);
        if (options_.transB) {
            be.gemmBatched(true, false, alpha, dy, a, 0.0f, db3);
        } else {
            be.gemmBatched(true, false, alpha, a, dy, 0.0f, db3);
        }
        return {da, db};
    }
    for (size_t n = 0; n < batches.ofA.size(); ++n) {
        const Tensor g = matrix(dy, static_cast<int64_t>(n));
        const Tensor am = matrix(a, batches.ofA[n]), bm = matrix(b, batches.ofB[n]);
        // y = a b: da = dy b^T, db = a^T dy; y = a b^T: da = dy b, db = dy^T a
        be.gemm(false, !options_.transB, alpha, g, bm, 1.0f, matrix(da3, batches.ofA[n]), computeDType());
        if (options_.transB) {
            be.gemm(true, false, alpha, g, am, 1.0f, matrix(db3, batches.ofB[n]), computeDType());
        } else {
            be.gemm(true, false, alpha, am, g, 1.0f, matrix(db3, batches.ofB[n]), computeDType());
        }
    }
    return {da, db};
}

Blueprint MatMul::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("transB", options_.transB);
    bp.scheme.emplace_back("alpha", static_cast<double>(options_.alpha));
    return bp;
}

} // namespace tessera
