// Runs a fuzz harness over files, without libFuzzer: the regression inputs under
// tests/data/fuzz/ (every finding of the fuzzers, kept) are replayed this way in the test
// suite, in every build. usage: fuzz_replay_X FILE|DIR...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
    namespace fs = std::filesystem;
    int files = 0;
    auto run = [&](const fs::path& p) {
        std::ifstream in(p, std::ios::binary);
        const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        std::printf("%s (%zu bytes)\n", p.c_str(), bytes.size());
        std::fflush(stdout);
        LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
        ++files;
    };
    for (int i = 1; i < argc; ++i) {
        const fs::path arg = argv[i];
        if (fs::is_directory(arg)) {
            std::vector<fs::path> entries;
            for (const auto& e : fs::recursive_directory_iterator(arg)) {
                if (e.is_regular_file()) entries.push_back(e.path());
            }
            std::sort(entries.begin(), entries.end());
            for (const fs::path& p : entries) run(p);
        } else {
            run(arg);
        }
    }
    if (files == 0) {
        std::fprintf(stderr, "no input files\n");
        return 1;
    }
    std::printf("%d input(s) handled: no crash, every error a clean one\n", files);
    return 0;
}
