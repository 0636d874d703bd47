#include "training/Schedule.h"
#include "backend/Errors.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera {

StepSchedule::StepSchedule(float base, int64_t stepSize, float gamma)
    : base_(base), stepSize_(stepSize), gamma_(gamma) {
    if (stepSize < 1) throw ModuleError("StepSchedule: stepSize must be at least 1, got " + std::to_string(stepSize));
}

float StepSchedule::at(int64_t epoch) const { return base_ * std::pow(gamma_, static_cast<float>(epoch / stepSize_)); }

float ExponentialSchedule::at(int64_t epoch) const { return base_ * std::pow(gamma_, static_cast<float>(epoch)); }

CosineSchedule::CosineSchedule(float base, int64_t epochs, float min) : base_(base), epochs_(epochs), min_(min) {
    if (epochs < 1) throw ModuleError("CosineSchedule: epochs must be at least 1, got " + std::to_string(epochs));
}

float CosineSchedule::at(int64_t epoch) const {
    if (epoch >= epochs_) return min_;
    const double phase = M_PI * static_cast<double>(epoch) / static_cast<double>(epochs_);
    return static_cast<float>(min_ + (base_ - min_) * (1.0 + std::cos(phase)) / 2.0);
}

namespace {
// The numbers after "name:" in `text`, split at ':'; false when one is not a whole number.
bool numbersAfter(const std::string& text, size_t from, std::vector<double>& out) {
    while (from <= text.size()) {
        const size_t end = std::min(text.find(':', from), text.size());
        const std::string part = text.substr(from, end - from);
        char* stop = nullptr;
        const double v = part.empty() ? 0.0 : std::strtod(part.c_str(), &stop);
        if (part.empty() || stop != part.c_str() + part.size() || !std::isfinite(v)) return false;
        out.push_back(v);
        from = end + 1;
    }
    return true;
}
} // namespace

std::unique_ptr<Schedule> parseSchedule(const std::string& text, float base, int64_t epochs) {
    const std::string forms = "expected step:N:G, exp:G, cosine or cosine:MIN";
    const size_t colon = text.find(':');
    const std::string name = text.substr(0, colon);
    std::vector<double> v;
    if (colon != std::string::npos && !numbersAfter(text, colon + 1, v)) {
        throw ModuleError("schedule '" + text + "': " + forms + " (with numbers after the colons)");
    }
    if (name == "step" && v.size() == 2) {
        if (v[0] < 1 || v[0] != std::floor(v[0])) {
            throw ModuleError("schedule '" + text + "': the step N must be a whole number of epochs >= 1");
        }
        if (!(v[1] > 0)) throw ModuleError("schedule '" + text + "': the factor G must be positive");
        return std::make_unique<StepSchedule>(base, static_cast<int64_t>(v[0]), static_cast<float>(v[1]));
    }
    if (name == "exp" && v.size() == 1) {
        if (!(v[0] > 0)) throw ModuleError("schedule '" + text + "': the factor G must be positive");
        return std::make_unique<ExponentialSchedule>(base, static_cast<float>(v[0]));
    }
    if (name == "cosine" && v.size() <= 1) {
        const double min = v.empty() ? 0.0 : v[0];
        if (min < 0 || min > base) {
            throw ModuleError("schedule '" + text + "': MIN must lie between 0 and the starting rate " +
                              std::to_string(base));
        }
        return std::make_unique<CosineSchedule>(base, epochs, static_cast<float>(min));
    }
    throw ModuleError("schedule '" + text + "': " + forms);
}

} // namespace tessera
