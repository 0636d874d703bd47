#include "backend/Files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "backend/Errors.h"

namespace tessera {

namespace {

std::string reason(int err) { return std::strerror(err); }

// fsync of a file or directory by path; the errno of what failed, else 0.
int syncPath(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    const int err = ::fsync(fd) == 0 ? 0 : errno;
    ::close(fd);
    return err;
}

} // namespace

std::string saveTarget(const std::string& path, const std::string& what) {
    namespace fs = std::filesystem;
    if (path.empty()) throw IoError(what + ": no file name given");
    std::error_code ec;
    fs::path target = path;
    if (fs::is_symlink(fs::symlink_status(target, ec))) {
        target = fs::weakly_canonical(target, ec); // every link followed, to the file named last
        if (ec) throw IoError(what + " " + path + ": cannot follow the symbolic link: " + ec.message());
    }
    const fs::file_status st = fs::status(target, ec);
    if (fs::exists(st) && !fs::is_regular_file(st)) {
        const char* kind = fs::is_directory(st)        ? "a directory"
                           : fs::is_character_file(st) ? "a character device"
                           : fs::is_block_file(st)     ? "a block device"
                           : fs::is_fifo(st)           ? "a pipe"
                           : fs::is_socket(st)         ? "a socket"
                                                       : "not a regular file";
        throw IoError(what + " " + path + (target.string() != path ? " (" + target.string() + ")" : "") + " is " +
                      kind + ": a save writes regular files only; give a file name");
    }
    return target.string();
}

void writeBytes(const std::string& tmp, const std::string& what, std::string_view bytes) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) throw IoError(what + ": cannot create " + tmp + ": " + reason(errno));
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = n < 0 ? errno : EIO;
            ::close(fd);
            throw IoError(what + ": cannot write " + tmp + " (" + std::to_string(done) + " of " +
                          std::to_string(bytes.size()) + " bytes written): " + reason(err));
        }
        done += static_cast<size_t>(n);
    }
    if (::close(fd) != 0) throw IoError(what + ": cannot write " + tmp + ": " + reason(errno));
}

void writeAtomically(const std::string& path, const std::string& what,
                     const std::function<void(const std::string& tmp)>& fill) {
    const std::string target = saveTarget(path, what);
    const std::string tmp = target + ".tmp";
    const std::string name = what + " " + path;
    auto discard = [&] {
        std::error_code ignored;
        std::filesystem::remove(tmp, ignored);
    };
    try {
        fill(tmp);
        struct stat old {};
        if (::stat(target.c_str(), &old) == 0) ::chmod(tmp.c_str(), old.st_mode & 07777); // best effort
        if (const int err = syncPath(tmp)) {
            throw IoError(name + ": cannot sync " + tmp + " to disk: " + reason(err) + "; the old file is kept");
        }
        struct stat written {};
        if (::stat(tmp.c_str(), &written) != 0) {
            throw IoError(name + ": " + tmp + " is gone after writing: " + reason(errno));
        }
        if (written.st_size == 0) throw IoError(name + ": nothing was written to " + tmp + "; the old file is kept");
        if (::rename(tmp.c_str(), target.c_str()) != 0) {
            throw IoError(name + ": cannot rename " + tmp + " over it: " + reason(errno));
        }
    } catch (const IoError&) {
        discard();
        throw;
    } catch (const std::exception& e) {
        discard();
        throw IoError(name + ": " + e.what());
    }
    const std::filesystem::path dir = std::filesystem::path(target).parent_path();
    syncPath(dir.empty() ? "." : dir.string()); // the rename itself; best effort
}

void writeFileAtomically(const std::string& path, const std::string& what, std::string_view bytes) {
    writeAtomically(path, what, [&](const std::string& tmp) { writeBytes(tmp, what + " " + path, bytes); });
}

} // namespace tessera
