// libFuzzer harness: the checkpoint loader, into the model, optimizer and trainer that
// fuzz_seeds saved its checkpoints from, with and without a weight average.
#include "FuzzInput.h"
#include "FuzzModels.h"
#include "training/Checkpoint.h"

namespace {
struct Run {
    std::shared_ptr<tessera::Sequential> net = tessera::fuzz::smallNet();
    tessera::Adam adam{0.01f};
    tessera::CrossEntropy cost;
    tessera::Trainer trainer{*net, cost, adam, tessera::fuzz::trainerOptions()};
    tessera::WeightAverage average{*net, 0.9f};
    Run() { adam.setupOn(*net, true); }
};
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace tessera;
    fuzz::InputFile file(data, size, ".h5");
    static Run* run = new Run(); // lives for the process: no teardown order to worry about
    fuzz::expectCleanFailure([&] { loadCheckpoint(file.path(), *run->net, run->adam, run->trainer); });
    fuzz::expectCleanFailure([&] { loadCheckpoint(file.path(), *run->net, run->adam, run->trainer, &run->average); });
    return 0;
}
