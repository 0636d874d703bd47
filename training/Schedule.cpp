#include "training/Schedule.h"
#include "backend/Errors.h"

#include <cmath>
#include <stdexcept>
#include <string>

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

} // namespace tessera
