#include "io/Checksum.h"

#include <algorithm>

namespace tessera::io_detail {

uint32_t fletcher32(const unsigned char* data, size_t n) {
    // A block's sums at once: every word adds to sum1, and sum2 adds sum1 after every word,
    // so word i (from 0) counts block - i times in it. Sixteen lanes take words 16t + j:
    // lane j's a sums them, its b counts word t T - t times (T steps), so the words of the
    // steps count 16 b - j a times, and r more (the r words after the steps). All in 32 bits,
    // wrapping as libhdf5's running sums wrap: the block ends with the same bits.
    constexpr size_t lanes = 16;
    auto word = [](const unsigned char* p) { return (static_cast<uint32_t>(p[0]) << 8) | p[1]; };
    uint32_t sum1 = 0, sum2 = 0;
    for (size_t words = n / 2; words > 0;) {
        const size_t block = std::min<size_t>(words, 360), steps = block / lanes, rest = block - steps * lanes;
        words -= block;
        uint32_t a[lanes] = {}, b[lanes] = {};
        for (size_t t = 0; t < steps; ++t, data += 2 * lanes) {
            for (size_t j = 0; j < lanes; ++j) {
                a[j] += word(data + 2 * j);
                b[j] += a[j];
            }
        }
        uint32_t plain = 0, weighted = 0;
        for (size_t j = 0; j < lanes; ++j) {
            plain += a[j];
            weighted += static_cast<uint32_t>(lanes) * b[j] - static_cast<uint32_t>(j) * a[j];
        }
        weighted += static_cast<uint32_t>(rest) * plain;
        for (size_t k = 0; k < rest; ++k, data += 2) {
            plain += word(data);
            weighted += static_cast<uint32_t>(rest - k) * word(data);
        }
        sum2 += static_cast<uint32_t>(block) * sum1 + weighted;
        sum1 += plain;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    if (n % 2) {
        sum1 += static_cast<uint32_t>(data[0]) << 8;
        sum2 += sum1;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    return (sum2 << 16) | sum1;
}

} // namespace tessera::io_detail
