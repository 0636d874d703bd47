#include "backend/Errors.h"

namespace tessera {

void rethrowWithContext(const std::string& prefix) {
    // Most derived first: each handler rebuilds the type it caught.
    try {
        throw;
    } catch (const ShapeError& e) {
        throw ShapeError(prefix + e.what());
    } catch (const ModuleError& e) {
        throw ModuleError(prefix + e.what());
    } catch (const ContainerError& e) {
        throw ContainerError(prefix + e.what());
    } catch (const GraphError& e) {
        throw GraphError(prefix + e.what());
    } catch (const BackendError& e) {
        throw BackendError(prefix + e.what());
    } catch (const IoError& e) {
        throw IoError(prefix + e.what());
    } catch (const NumericsError& e) {
        throw NumericsError(prefix + e.what());
    } catch (const Error& e) {
        throw Error(prefix + e.what());
    }
}

} // namespace tessera
