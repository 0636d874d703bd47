#include "modules/ToList.h"

namespace tessera {

ToList::ToList(int64_t count, std::string name) : Module(std::move(name)), count_(count) {
    if (count < 1) throw ModuleError("ToList: count must be positive, got " + std::to_string(count));
}

MemoryUse ToList::memoryUse(const Shapes& inShapes, const std::vector<Layout>& inLayouts, bool train,
                            Device device) const {
    MemoryUse use = Module::memoryUse(inShapes, inLayouts, train, device);
    for (size_t i = 0; i < inShapes.size(); ++i) {
        use.outLayouts[i] = i < inLayouts.size() ? inLayouts[i] : Layout::plain;
        use.outputViews[i] = static_cast<int>(i); // output i is input i
        use.gradViews[i] = static_cast<int>(i);
    }
    return use;
}

Blueprint ToList::blueprint() const {
    Blueprint bp = Module::blueprint();
    bp.scheme.emplace_back("count", count_);
    return bp;
}

} // namespace tessera
