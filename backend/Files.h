#pragma once
// Saving files whole or not at all. Every writer of the library and the `tessera` program
// (model files, checkpoints, ONNX, .npy, CSV, images and plots) goes through here: the
// bytes go to a temporary beside the target, are flushed to disk and checked, and only
// then renamed over it, so a full disk, a failed write or a kill leaves the old file (or
// none) and never an empty or half-written one.
#include <functional>
#include <string>
#include <string_view>

namespace tessera {

/// The file a save to `path` writes: `path` itself, or the file a symbolic link there
/// names (a save writes through links, it does not replace them). Throws IoError, naming
/// `what` and the path, when the target exists and is not a regular file (a device such
/// as /dev/null, a directory, a pipe): a save never replaces those.
std::string saveTarget(const std::string& path, const std::string& what);

/// Writes saveTarget(`path`) whole: `fill(tmp)` writes the new contents to a temporary
/// file beside it (`TARGET.tmp`, replacing one a kill left behind), which is then synced to
/// disk and renamed over the target (keeping an existing target's permission bits). On any
/// failure, the temporary is removed, the target is left as it was, and IoError says what
/// failed with the system's reason ("No space left on device"). `fill` reports its own
/// failures by throwing. `what` names the file in messages ("npy file", "model file").
void writeAtomically(const std::string& path, const std::string& what,
                     const std::function<void(const std::string& tmp)>& fill);

/// writeAtomically of `bytes`, every write checked.
void writeFileAtomically(const std::string& path, const std::string& what, std::string_view bytes);

/// Writes all of `bytes` to the file at `tmp` (created or truncated), checking every write
/// and the close; throws IoError with the system's reason. For `fill` functions.
void writeBytes(const std::string& tmp, const std::string& what, std::string_view bytes);

} // namespace tessera
