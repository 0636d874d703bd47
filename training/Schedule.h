#pragma once
/// \file Learning-rate schedules: the rate for an epoch (0-based).

#include <cstdint>
#include <memory>
#include <string>

namespace tessera {

class Schedule {
public:
    virtual ~Schedule() = default;
    virtual float at(int64_t epoch) const = 0;
};

/// base * gamma^floor(epoch / stepSize).
class StepSchedule : public Schedule {
public:
    StepSchedule(float base, int64_t stepSize, float gamma);
    float at(int64_t epoch) const override;

private:
    float base_;
    int64_t stepSize_;
    float gamma_;
};

/// base * gamma^epoch.
class ExponentialSchedule : public Schedule {
public:
    ExponentialSchedule(float base, float gamma) : base_(base), gamma_(gamma) {}
    float at(int64_t epoch) const override;

private:
    float base_, gamma_;
};

/// min + (base - min) (1 + cos(pi epoch / epochs)) / 2, held at min after `epochs`.
class CosineSchedule : public Schedule {
public:
    CosineSchedule(float base, int64_t epochs, float min = 0.0f);
    float at(int64_t epoch) const override;

private:
    float base_;
    int64_t epochs_;
    float min_;
};

/// A schedule from its text, starting at the rate `base`, for a run of `epochs`:
/// "step:N:G" (times G every N epochs), "exp:G" (times G every epoch), "cosine" or
/// "cosine:MIN" (from base down to MIN, 0 by default, over the `epochs`). ModuleError
/// naming the accepted forms for anything else.
std::unique_ptr<Schedule> parseSchedule(const std::string& text, float base, int64_t epochs);

} // namespace tessera
