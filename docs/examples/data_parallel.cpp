// Data-parallel training in your own program: run it with `mpirun -np 2 ./data_parallel`.
// Every rank builds the same network, binds it to the job's ranks, reads its share of
// each global batch, and makes the same updates.
#include <tessera/tessera.h>

#include <cstdio>

using namespace tessera;

int main() {
    const CommunicatorPtr world = mpiWorld(); // MPI_COMM_WORLD: this process's rank and the job's size

    // A learnable task: the label is which of four pixels is brightest.
    Generator gen(7);
    Tensor x = Tensor::empty({512, 1, 8, 8});
    backendOf(x).fillUniform(x, 0.0f, 1.0f, gen);
    std::vector<int32_t> y(512);
    const float* px = x.data<float>();
    for (int i = 0; i < 512; ++i) {
        int best = 0;
        for (int k = 1; k < 4; ++k) best = px[i * 64 + k * 9] > px[i * 64 + best * 9] ? k : best;
        y[static_cast<size_t>(i)] = best;
    }
    const DatasetPtr data = tensorDataset(x, Tensor::fromVector({512}, y));

    auto net = std::make_shared<Sequential>("net");
    net->append(std::make_shared<Flatten>());
    net->append(std::make_shared<Linear>(64, 32));
    net->append(std::make_shared<Activation>(ActivationKind::relu));
    net->append(std::make_shared<Linear>(32, 4));
    Adam adam(1e-2f);
    adam.setupOn(*net, true); // global state: the gradients lie in one buffer, reduced in buckets

    // Checks that all ranks hold the same model and copies rank 0's weights to the others.
    DataParallel parallel(*net, adam, world);
    // 32 samples per rank and step: the global batch is 32 times the number of ranks.
    Loader loader(data, {}, {.batchsize = 32, .seed = 1, .rank = world->rank(), .ranks = world->size()});
    CrossEntropy cost;
    Trainer trainer(*net, cost, adam, {.progress = false});
    trainer.setDataParallel(&parallel);
    double first = 0, last = 0;
    for (int epoch = 0; epoch < 30; ++epoch) {
        last = trainer.train(loader); // the mean loss over this rank's share
        if (epoch == 0) first = last;
    }
    if (world->rank() == 0) {
        std::printf("%d ranks: loss %.3f -> %.3f; all-reduce %.2f s, %.2f s of it not hidden behind backward\n",
                    world->size(), first, last, parallel.reduceSeconds(), parallel.exposedSeconds());
    }
    return last < 0.5 * first ? 0 : 1;
}
