// JPEG through libjpeg-turbo (its error exits longjmp back here), PNG through libpng's
// simplified API. Both decode to 8-bit samples first (JPEG always to RGB, PNG in its own
// colour type); the conversion to the wanted channels is ours, so a JPEG and a PNG of the
// same picture give the same floats.
#include "data/Image.h"

#include <jpeglib.h>
// (after jpeglib.h, which it needs)
#include <jerror.h>
#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "backend/Errors.h"
#include "backend/Files.h"
#include "data/ReadFile.h"

namespace tessera {

std::string Image::str() const {
    return std::to_string(channels) + "x" + std::to_string(height) + "x" + std::to_string(width);
}

namespace {

bool sidesFit(int64_t height, int64_t width) {
    return height >= 1 && width >= 1 && height <= kMaxImageSide && width <= kMaxImageSide &&
           height * width <= kMaxImagePixels;
}

void checkSides(const std::string& path, int64_t height, int64_t width) {
    if (!sidesFit(height, width)) {
        throw IoError("image " + path + ": " + std::to_string(width) + "x" + std::to_string(height) +
                      " pixels; sides of 1 to " + std::to_string(kMaxImageSide) + " and up to " +
                      std::to_string(kMaxImagePixels) + " pixels are read");
    }
}

// Interleaved 8-bit pixels with `stride` bytes each: R, G, B first, or (`gray`) one gray
// value first -> `channels`.
Image fromInterleaved(const uint8_t* px, int64_t height, int64_t width, int stride, bool gray, int channels) {
    Image img(channels, height, width);
    const int64_t n = height * width;
    constexpr float k = 1.0f / 255.0f;
    if (gray) {
        for (int c = 0; c < channels; ++c) {
            float* dst = img.pixels.data() + c * n;
            for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(px[i * stride]) * k;
        }
    } else if (channels == 3) {
        for (int c = 0; c < 3; ++c) {
            float* dst = img.pixels.data() + c * n;
            for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(px[i * stride + c]) * k;
        }
    } else {
        float* dst = img.pixels.data();
        for (int64_t i = 0; i < n; ++i) {
            const uint8_t* p = px + i * stride;
            dst[i] = (0.299f * static_cast<float>(p[0]) + 0.587f * static_cast<float>(p[1]) +
                      0.114f * static_cast<float>(p[2])) *
                     k;
        }
    }
    return img;
}

struct JpegError {
    jpeg_error_mgr mgr;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

extern "C" void jpegErrorExit(j_common_ptr info) {
    auto* err = reinterpret_cast<JpegError*>(info->err);
    (*info->err->format_message)(info, err->message);
    std::longjmp(err->jump, 1);
}

// The sizes of a decode: the picture's (full), the whole decode's at the chosen scale, and
// where the decoded window (height x width) lies in that.
struct JpegSizes {
    int64_t height = 0, width = 0, fullHeight = 0, fullWidth = 0, top = 0, left = 0, decodedHeight = 0,
            decodedWidth = 0;
};

// Decoded pixels this far outside a window are decoded too: the upsampling of subsampled
// chroma and the cut to whole blocks then leave the window's own pixels as a whole decode
// has them.
constexpr int64_t kWindowMargin = 8;

// Only plain locals between setjmp and a longjmp: nothing with a destructor is skipped.
// Returns false with `err.message` set when libjpeg gives up.
// `shrink` (when set; it must not throw) picks the scale, in eighths, and the window from the
// header's size.
bool decodeJpeg(const std::vector<uint8_t>& bytes, std::vector<uint8_t>& rgb, JpegSizes& size,
                const DecodeScale* shrink, JpegError& err) {
    jpeg_decompress_struct info;
    info.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpegErrorExit;
    // Warnings of corrupt data that still decodes stay quiet, but data that ends early (a
    // truncated or lying file, whose missing rows libjpeg would fill with grey) is an error.
    err.mgr.emit_message = [](j_common_ptr c, int level) {
        if (level < 0 && (c->err->msg_code == JWRN_JPEG_EOF || c->err->msg_code == JWRN_HIT_MARKER)) jpegErrorExit(c);
    };
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&info);
        return false;
    }
    jpeg_create_decompress(&info);
    jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
    jpeg_read_header(&info, TRUE);
    size.height = size.fullHeight = info.image_height; // checked before libjpeg sizes its buffers by it
    size.width = size.fullWidth = info.image_width;
    if (!sidesFit(size.height, size.width)) {
        jpeg_destroy_decompress(&info);
        return true; // the caller reports the size
    }
    info.out_color_space = JCS_RGB;
    DecodePlan plan;
    if (shrink != nullptr && *shrink) {
        plan = (*shrink)(size.fullHeight, size.fullWidth);
        info.scale_num = 8;
        info.scale_denom = 8;
        while (info.scale_num > 1 && static_cast<double>(info.scale_num - 1) / 8.0 >= plan.least) --info.scale_num;
    }
    jpeg_start_decompress(&info);
    size.decodedHeight = info.output_height;
    size.decodedWidth = info.output_width;
    int64_t y0 = 0, y1 = size.decodedHeight;
    if (plan.height > 0 && plan.width > 0) { // the window at the decode's scale, and a margin
        const double sy = static_cast<double>(size.decodedHeight) / static_cast<double>(size.fullHeight);
        const double sx = static_cast<double>(size.decodedWidth) / static_cast<double>(size.fullWidth);
        auto below = [](double v, int64_t n) {
            return std::clamp<int64_t>(static_cast<int64_t>(std::floor(v)) - kWindowMargin, 0, n - 1);
        };
        auto above = [](double v, int64_t lo, int64_t n) {
            return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(v)) + kWindowMargin, lo + 1, n);
        };
        y0 = below(static_cast<double>(plan.top) * sy, size.decodedHeight);
        y1 = above(static_cast<double>(plan.top + plan.height) * sy, y0, size.decodedHeight);
        const int64_t x0 = below(static_cast<double>(plan.left) * sx, size.decodedWidth);
        const int64_t x1 = above(static_cast<double>(plan.left + plan.width) * sx, x0, size.decodedWidth);
        if (x0 > 0 || x1 < size.decodedWidth) { // libjpeg widens it to whole blocks
            auto offset = static_cast<JDIMENSION>(x0), cut = static_cast<JDIMENSION>(x1 - x0);
            jpeg_crop_scanline(&info, &offset, &cut);
            size.left = offset;
        }
        if (y0 > 0) jpeg_skip_scanlines(&info, static_cast<JDIMENSION>(y0));
        size.top = y0;
    }
    size.height = y1 - y0;
    size.width = info.output_width;
    rgb.resize(static_cast<size_t>(size.height * size.width * 3));
    while (info.output_scanline < y1) {
        JSAMPROW row =
            rgb.data() + static_cast<size_t>(info.output_scanline - y0) * static_cast<size_t>(size.width) * 3;
        jpeg_read_scanlines(&info, &row, 1);
    }
    // A whole decode reads on to the end (a file cut short after the last row is an error);
    // a window's stops below it.
    if (y1 == size.decodedHeight && size.width == size.decodedWidth) jpeg_finish_decompress(&info);
    jpeg_destroy_decompress(&info);
    return true;
}

Image readJpeg(const std::string& path, const std::vector<uint8_t>& bytes, int channels, const DecodeScale& shrink) {
    std::vector<uint8_t> rgb;
    JpegSizes size;
    JpegError err{};
    if (!decodeJpeg(bytes, rgb, size, &shrink, err)) {
        throw IoError("image " + path + ": malformed JPEG (" + err.message + ")");
    }
    checkSides(path, size.height, size.width);
    Image img = fromInterleaved(rgb.data(), size.height, size.width, 3, false, channels);
    if (size.height != size.fullHeight || size.width != size.fullWidth) {
        img.fullHeight = size.fullHeight, img.fullWidth = size.fullWidth;
    }
    if (size.height != size.decodedHeight || size.width != size.decodedWidth) {
        img.windowTop = size.top, img.windowLeft = size.left;
        img.decodedHeight = size.decodedHeight, img.decodedWidth = size.decodedWidth;
    }
    return img;
}

Image readPng(const std::string& path, const std::vector<uint8_t>& bytes, int channels) {
    png_image png;
    std::memset(&png, 0, sizeof png);
    png.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) {
        throw IoError("image " + path + ": malformed PNG (" + png.message + ")");
    }
    const int64_t height = png.height, width = png.width;
    if (!sidesFit(height, width)) {
        png_image_free(&png);
        checkSides(path, height, width);
    }
    // 8-bit samples in the file's own colour type; an alpha channel is read and then
    // dropped, not composited.
    const bool gray = !(png.format & PNG_FORMAT_FLAG_COLOR), alpha = png.format & PNG_FORMAT_FLAG_ALPHA;
    png.format = (gray ? 0 : PNG_FORMAT_FLAG_COLOR) | (alpha ? PNG_FORMAT_FLAG_ALPHA : 0);
    std::vector<uint8_t> px(PNG_IMAGE_SIZE(png));
    if (!png_image_finish_read(&png, nullptr, px.data(), 0, nullptr)) {
        throw IoError("image " + path + ": malformed PNG (" + png.message + ")");
    }
    return fromInterleaved(px.data(), height, width, (gray ? 1 : 3) + (alpha ? 1 : 0), gray, channels);
}

// `image` as interleaved 8-bit samples (1 or 3 per pixel).
std::vector<uint8_t> toInterleaved(const std::string& path, const Image& image) {
    if (image.channels != 1 && image.channels != 3) {
        throw IoError("writing image " + path + ": 1 or 3 channels are written, the image has " +
                      std::to_string(image.channels));
    }
    checkSides(path, image.height, image.width);
    if (image.pixels.size() != static_cast<size_t>(image.channels * image.height * image.width)) {
        throw IoError("writing image " + path + ": " + std::to_string(image.pixels.size()) + " values for " +
                      image.str());
    }
    const int64_t n = image.height * image.width, c = image.channels;
    std::vector<uint8_t> out(static_cast<size_t>(n * c));
    for (int64_t ch = 0; ch < c; ++ch) {
        for (int64_t i = 0; i < n; ++i) {
            const float v = std::clamp(image.pixels[static_cast<size_t>(ch * n + i)], 0.0f, 1.0f);
            out[static_cast<size_t>(i * c + ch)] = static_cast<uint8_t>(v * 255.0f + 0.5f);
        }
    }
    return out;
}

bool encodeJpeg(std::FILE* f, const uint8_t* px, const Image& image, int quality, JpegError& err) {
    jpeg_compress_struct info;
    info.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpegErrorExit;
    if (setjmp(err.jump)) {
        jpeg_destroy_compress(&info);
        return false;
    }
    jpeg_create_compress(&info);
    jpeg_stdio_dest(&info, f);
    info.image_width = static_cast<JDIMENSION>(image.width);
    info.image_height = static_cast<JDIMENSION>(image.height);
    info.input_components = static_cast<int>(image.channels);
    info.in_color_space = image.channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&info);
    jpeg_set_quality(&info, quality, TRUE);
    jpeg_start_compress(&info, TRUE);
    while (info.next_scanline < info.image_height) {
        auto row = const_cast<JSAMPROW>(px + static_cast<size_t>(info.next_scanline) *
                                                 static_cast<size_t>(image.width * image.channels));
        jpeg_write_scanlines(&info, &row, 1);
    }
    jpeg_finish_compress(&info);
    jpeg_destroy_compress(&info);
    return true;
}

} // namespace

Image readImage(const std::string& path, int channels, const DecodeScale& shrink) {
    if (channels != 1 && channels != 3) {
        throw IoError("image " + path + ": 1 or 3 channels can be asked for, got " + std::to_string(channels));
    }
    return decodeImage(data_detail::readFile(path, "image"), path, channels, shrink);
}

Image decodeImage(const std::vector<uint8_t>& bytes, const std::string& path, int channels, const DecodeScale& shrink) {
    if (channels != 1 && channels != 3) {
        throw IoError("image " + path + ": 1 or 3 channels can be asked for, got " + std::to_string(channels));
    }
    if (bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
        return readJpeg(path, bytes, channels, shrink);
    }
    static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return readPng(path, bytes, channels);
    throw IoError("image " + path + ": not a JPEG or PNG file (" +
                  (bytes.empty() ? std::string("empty") : "unknown first bytes") + ")");
}

void writePng(const std::string& path, const Image& image) {
    const std::vector<uint8_t> px = toInterleaved(path, image);
    writeAtomically(path, "image", [&](const std::string& tmp) {
        png_image png;
        std::memset(&png, 0, sizeof png);
        png.version = PNG_IMAGE_VERSION;
        png.width = static_cast<png_uint_32>(image.width);
        png.height = static_cast<png_uint_32>(image.height);
        png.format = image.channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
        if (!png_image_write_to_file(&png, tmp.c_str(), 0, px.data(), 0, nullptr)) {
            throw IoError("writing image " + path + ": " + png.message);
        }
    });
}

void writeJpeg(const std::string& path, const Image& image, int quality) {
    if (quality < 1 || quality > 100) {
        throw IoError("writing image " + path + ": JPEG quality must be 1..100, got " + std::to_string(quality));
    }
    const std::vector<uint8_t> px = toInterleaved(path, image);
    writeAtomically(path, "image", [&](const std::string& tmp) {
        std::FILE* f = std::fopen(tmp.c_str(), "wb");
        if (!f) throw IoError("writing image " + path + ": cannot open " + tmp + " (" + std::strerror(errno) + ")");
        JpegError err{};
        const bool ok = encodeJpeg(f, px.data(), image, quality, err);
        const bool closed = std::fclose(f) == 0;
        if (!ok || !closed) {
            std::remove(tmp.c_str());
            throw IoError("writing image " + path + ": " + (ok ? std::string("write error") : err.message));
        }
    });
}

} // namespace tessera
