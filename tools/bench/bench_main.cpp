// tessera_bench: Google Benchmark runner that also prints a summary of ratios between
// benchmarks of the same run (medians over the repetitions).
//
//   tessera_bench                        every benchmark, 7 interleaved repetitions
//   tessera_bench --benchmark_filter=Linear|sgemm
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace {

// Keeps the median of each benchmark's counters while printing as usual.
class MedianReporter : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run>& runs) override {
        for (const Run& r : runs) {
            if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median") {
                for (const auto& [name, counter] : r.counters) medians_[r.run_name.str()][name] = counter.value;
                timesMs_[r.run_name.str()] = r.GetAdjustedRealTime() * toMs(r.time_unit);
            }
        }
        ConsoleReporter::ReportRuns(runs);
    }
    double median(const std::string& bench, const std::string& counter) const {
        auto b = medians_.find(bench);
        if (b == medians_.end()) return 0.0;
        auto c = b->second.find(counter);
        return c == b->second.end() ? 0.0 : c->second;
    }

    /// Median real time of `bench` in milliseconds (0 when it did not run).
    double medianTime(const std::string& bench) const {
        auto t = timesMs_.find(bench);
        return t == timesMs_.end() ? 0.0 : t->second;
    }

private:
    static double toMs(benchmark::TimeUnit unit) {
        switch (unit) {
        case benchmark::kNanosecond: return 1e-6;
        case benchmark::kMicrosecond: return 1e-3;
        case benchmark::kMillisecond: return 1.0;
        case benchmark::kSecond: return 1e3;
        }
        return 1.0;
    }

    std::map<std::string, std::map<std::string, double>> medians_;
    std::map<std::string, double> timesMs_;
};

void printRatio(const MedianReporter& rep, const char* what, const std::string& a, const std::string& b,
                const std::string& counter) {
    const double va = rep.median(a, counter), vb = rep.median(b, counter);
    if (va > 0 && vb > 0) {
        std::printf("%-44s %9.2f / %9.2f %s = %5.1f%%\n", what, va, vb, counter.c_str(), 100.0 * va / vb);
    }
}

} // namespace

int main(int argc, char** argv) {
    // Defaults: several repetitions, interleaved so that machine noise hits all alike.
    std::vector<char*> args(argv, argv + argc);
    std::string reps = "--benchmark_repetitions=7", interleave = "--benchmark_enable_random_interleaving=true",
                aggregates = "--benchmark_report_aggregates_only=true";
    bool hasReps = false;
    for (int i = 1; i < argc; ++i) hasReps |= std::string(argv[i]).starts_with("--benchmark_repetitions");
    if (!hasReps) {
        args.push_back(reps.data());
        args.push_back(interleave.data());
        args.push_back(aggregates.data());
    }
    int n = static_cast<int>(args.size());
    benchmark::Initialize(&n, args.data());
    if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;

    MedianReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();

    std::printf("\nSummary (medians, same run):\n");
    printRatio(reporter, "Linear(784,1024) fwd+bwd vs sgemm, batch 128", "Linear/784x1024/batch128/fwd+bwd/real_time",
               "sgemm/784x1024/batch128/fwd+bwd/real_time", "GFLOP/s");
    printRatio(reporter, "Linear(784,1024) fwd+bwd vs oneDNN matmul", "Linear/784x1024/batch128/fwd+bwd/real_time",
               "dnnl_matmul/784x1024/batch128/fwd+bwd/real_time", "GFLOP/s");
    printRatio(reporter, "Linear(784,1024) fwd+bwd vs oneDNN sgemm", "Linear/784x1024/batch128/fwd+bwd/real_time",
               "dnnl_sgemm/784x1024/batch128/fwd+bwd/real_time", "GFLOP/s");
    printRatio(reporter, "ResNet-18 32x32 convs fwd+bwd vs sgemm 1024",
               "Conv/ResNet18-32x32/batch64/all-convs/fwd+bwd/real_time", "sgemm/1024x1024x1024/real_time", "GFLOP/s");
    for (const char* act : {"relu", "sigmoid"}) {
        for (const char* n : {"131072", "4194304"}) {
            printRatio(reporter, (std::string(act) + " n=" + n + ": oneDNN vs loop").c_str(),
                       std::string("BM_BackendActivation/") + act + "/onednn/" + n + "/real_time",
                       std::string("BM_LoopActivation/") + act + "/loop/" + n + "/real_time", "GB/s");
        }
    }
    const double shapeMs = reporter.median("Graph/shapeCheck+gradShapeCheck/10000/real_time", "nodes") > 0
                               ? reporter.medianTime("Graph/shapeCheck+gradShapeCheck/10000/real_time")
                               : 0.0;
    if (shapeMs > 0)
        std::printf("%-44s %9.2f ms (data + gradient shapes)\n", "shape check, 10 000-node graph", shapeMs);
    for (const char* mode : {"1", "0"}) {
        const std::string b = std::string("Graph/chain50/inferencePeak/") + mode + "/real_time";
        const double peak = reporter.median(b, "peakMiB"), value = reporter.median(b, "valueMiB");
        if (value > 0) {
            std::printf("%-44s %9.2f MiB = %.1f values of %.2f MiB\n",
                        (std::string("50-layer chain inference peak, ") + (mode[0] == '1' ? "eval" : "train")).c_str(),
                        peak, peak / value, value);
        }
    }
    return 0;
}
