#pragma once
/// \file What Trainer needs of data-parallel training: a hook around each backward that
/// makes the gradients the global batch's. distributed/DataParallel.h implements it over a
/// Communicator; training/ knows only this interface, so it does not depend on distributed/.

#include <cstdint>

namespace tessera {

class GradientSync {
public:
    virtual ~GradientSync() = default;
    /// Right before backward: this rank's samples in the batch and the batch's samples over
    /// all ranks. `reduce` false keeps this backward's gradients on this rank (a group's
    /// earlier batches under gradient accumulation); `weighted` false makes the reduction
    /// only sum (the caller then weighs each backward by share() itself).
    virtual void beginBackward(int64_t samples, int64_t globalSamples, bool reduce = true, bool weighted = true) = 0;
    /// This rank's share of the batch begun last: samples / globalSamples.
    virtual float share() const = 0;
    /// Right after backward: the gradients are then the global batch's, the same on every
    /// rank (after a backward that does not reduce: this rank's, added up so far).
    virtual void finishBackward() = 0;
    /// After a backward that threw: stop waiting on the others (the job is failing).
    virtual void abandonBackward() noexcept = 0;
};

} // namespace tessera
