// tessera-child: the program libtessera's readers start (io/ChildProcess.h) to run a
// library that may crash or hang on a bad file (libhdf5, ONNX's shape inference) outside
// the process that asked. Started as `tessera-child --serve HANDLER` with the request
// socket as descriptor 3; not meant to be run by hand.
#include <cstdio>
#include <cstring>
#include <string>

#include "io/ChildProcess.h"

int main(int argc, char** argv) {
    using namespace tessera::io_detail;
    if (argc != 3 || std::strcmp(argv[1], "--serve") != 0) {
        std::fprintf(stderr, "tessera-child: started by libtessera's readers, not by hand (usage: "
                             "tessera-child --serve HANDLER, the request socket as descriptor 3)\n");
        return 2;
    }
    const Handler handler = handlerNamed(argv[2]);
    if (!handler) {
        std::fprintf(stderr, "tessera-child: no handler named '%s'\n", argv[2]);
        return 2;
    }
    serveChild(handler, 3);
}
