#include "io/Pages.h"

#include <sys/mman.h>

namespace tessera::io_detail {

std::shared_ptr<char> mapPages(std::size_t n) {
    if (n == 0) return nullptr;
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    if (n >= (std::size_t{2} << 20)) ::madvise(p, n, MADV_HUGEPAGE);
    return std::shared_ptr<char>(static_cast<char*>(p), [n](char* q) { ::munmap(q, n); });
}

} // namespace tessera::io_detail
