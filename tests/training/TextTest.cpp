// Character-level text corpora (data/Text.h): entries split the fortune way and by
// paragraphs, every 10th held out, bytes outside the vocabulary dropped, binary files and
// links skipped, next-id windows, and clear errors.
#include "data/Text.h"

#include <filesystem>
#include <fstream>

#include "GradCheck.h"

namespace tessera {
namespace {
using namespace testing;
namespace fs = std::filesystem;

std::string folder(const std::string& name) {
    const std::string dir = ::testing::TempDir() + "tessera_text_" + name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string asText(const std::vector<int32_t>& ids) { return std::string(ids.begin(), ids.end()); }

TEST(TextCorpus, FortuneEntriesParagraphsAndTheHeldOutTenth) {
    const std::string dir = folder("entries");
    // b: fortune format (entries between '%' lines); a: paragraphs; c: binary (an index); d: a link.
    std::string fortunes;
    for (int i = 0; i < 12; ++i) fortunes += "fortune " + std::to_string(i) + "\nline two\n%\n";
    write(dir + "/b", fortunes);
    write(dir + "/a", "\n\nfirst paragraph\nstill first\n\n\nsecond \xe9t\xe9\n");
    write(dir + "/c", std::string("\0\1\2binary", 9));
    fs::create_symlink(dir + "/a", dir + "/d");
    const TextCorpus c = readTextCorpus(dir);
    EXPECT_EQ(c.files, 2);    // a and b; not the binary c nor the link d
    EXPECT_EQ(c.entries, 14); // 2 paragraphs of a, then b's 12 fortunes
    EXPECT_EQ(c.dropped, 2);  // the two bytes 0xe9
    // Entries 10 and 20, ... (1-based: i + 1 divisible by 10) are held out: b's fortune 7.
    EXPECT_EQ(asText(c.heldOut), "fortune 7\nline two\n");
    std::string want = "first paragraph\nstill first\n\nsecond t\n";
    for (int i = 0; i < 12; ++i) {
        if (i != 7) want += "\nfortune " + std::to_string(i) + "\nline two\n";
    }
    EXPECT_EQ(asText(c.train), want);
    EXPECT_NE(c.what.find("2 files in " + dir), std::string::npos) << c.what;

    const TextCorpus none = readTextCorpus(dir + "/b", {.heldOutEvery = 0});
    EXPECT_EQ(none.files, 1);
    EXPECT_TRUE(none.heldOut.empty());
    EXPECT_EQ(none.entries, 12);
    const TextCorpus small = readTextCorpus(dir + "/b", {.vocabulary = 'f'}); // 'f' and above dropped
    EXPECT_EQ(asText(small.train).find('f'), std::string::npos);
    EXPECT_GT(small.dropped, 0);
}

TEST(TextCorpus, NextIdWindows) {
    const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
    const auto [x, y] = nextIdWindows(ids, 3); // (8 - 1) / 3 = 2 windows
    EXPECT_EQ(x.shape(), (Shape{2, 3}));
    EXPECT_EQ(x.dtype(), DType::int32);
    EXPECT_EQ(x.toVector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(y.toVector<int32_t>(), (std::vector<int32_t>{2, 3, 4, 5, 6, 7}));
    EXPECT_TRUE(throwsShapeError([&] { nextIdWindows({1, 2, 3}, 3); }, {"3 ids make no window of 3", "needs 4"}));
    EXPECT_TRUE(throwsShapeError([&] { nextIdWindows(ids, 0); }, {"window length must be >= 1"}));
    EXPECT_EQ(textIds("AB\n"), (std::vector<int32_t>{65, 66, 10}));
    EXPECT_TRUE(throwsShapeError([&] { textIds("ok\x80"); }, {"byte 128 at position 2", "vocabulary of 128"}));
}

TEST(TextCorpus, BadInput) {
    EXPECT_THROW(readTextCorpus("/nonexistent/corpus"), IoError);
    const std::string empty = folder("empty");
    EXPECT_THROW(readTextCorpus(empty), IoError); // no text file
    write(empty + "/blank", "\n\n%\n\n");
    try {
        readTextCorpus(empty);
        ADD_FAILURE() << "a corpus of no entries was read";
    } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find("holds no text"), std::string::npos) << e.what();
    }
    EXPECT_THROW(readTextCorpus(empty, {.vocabulary = 300}), ShapeError);
}

} // namespace
} // namespace tessera
