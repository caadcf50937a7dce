public import Foundation

/// File-system calls that keep `errno`, so a file this user may not read is reported as exactly that
/// (``LedgerStoreError/fileAccess(path:operation:errno:)``, naming the path), never as a missing,
/// malformed or corrupt one.
public enum FileAccess {
    /// Whether `path` exists. False only when it does not (`ENOENT`, or a component that is not a
    /// directory); any other failure, such as a directory on the way this user may not search, is thrown.
    public static func exists(_ path: String) throws -> Bool {
        var info = stat()
        if stat(path, &info) == 0 { return true }
        let code = errno
        if code == ENOENT || code == ENOTDIR { return false }
        throw failure("look up", path, code)
    }

    /// Creates the directory `url` and its missing parents, each with mode 0700 (`mkdir -p`); an existing
    /// directory is fine, an existing file in the way is `ENOTDIR` naming it.
    public static func createDirectories(_ url: URL) throws {
        var prefix = ""
        for component in url.standardizedFileURL.path.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o700) == 0 { continue }
            let code = errno
            var info = stat()
            if code == EEXIST, stat(prefix, &info) == 0, info.st_mode & S_IFMT == S_IFDIR { continue }
            throw failure("create the directory", prefix, code == EEXIST ? ENOTDIR : code)
        }
    }

    /// The size of `path` in bytes.
    public static func size(_ path: String) throws -> Int {
        var info = stat()
        guard stat(path, &info) == 0 else { throw failure("read the size of", path, errno) }
        return Int(info.st_size)
    }

    /// The whole content of the regular file `path`; a file longer than `limit` bytes is refused with
    /// `EFBIG` rather than read.
    public static func read(_ path: String, limit: Int) throws -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw failure("read", path, errno) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw failure("read", path, errno) }
        guard info.st_mode & S_IFMT != S_IFDIR else { throw failure("read", path, EISDIR) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            if count == 0 { return bytes }
            if count < 0 {
                if errno == EINTR { continue }
                throw failure("read", path, errno)
            }
            guard bytes.count + count <= limit else { throw failure("read (more than \(limit) bytes)", path, EFBIG) }
            bytes.append(contentsOf: chunk[0..<count])
        }
    }

    /// The bytes of the key file `url`. A missing file is ``LedgerStoreError/missingKey(path:)``, one others
    /// may read ``LedgerStoreError/keyReadableByOthers(path:mode:)``; any other failure (a file or directory
    /// this user may not read) is reported as what it is.
    static func readKeyFile(_ url: URL) throws -> [UInt8] {
        var info = stat()
        guard stat(url.path, &info) == 0 else {
            let code = errno
            if code == ENOENT { throw LedgerStoreError.missingKey(path: url.path) }
            throw failure("look up", url.path, code)
        }
        let mode = UInt16(info.st_mode & 0o777)
        guard mode & 0o077 == 0 else { throw LedgerStoreError.keyReadableByOthers(path: url.path, mode: mode) }
        return try read(url.path, limit: 1 << 16)
    }

    /// Creates the key file `url` with mode 0600 holding `contents`, synced to disk. An existing file is
    /// ``LedgerStoreError/alreadyInitialized(directory:)``.
    static func createKeyFile(_ url: URL, contents: [UInt8]) throws {
        let fd = open(url.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let code = errno
            if code == EEXIST { throw LedgerStoreError.alreadyInitialized(directory: url.deletingLastPathComponent().path) }
            throw failure("create", url.path, code)
        }
        defer { close(fd) }
        var written = 0
        while written < contents.count {
            let count = contents.withUnsafeBytes { Foundation.write(fd, $0.baseAddress.map { $0 + written }, $0.count - written) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw failure("write", url.path, count < 0 ? errno : EIO) }
            written += count
        }
        guard fsync(fd) == 0 else { throw failure("sync", url.path, errno) }
    }

    /// What to report when LMDB could not open the environment in `directory` for lack of permission
    /// (LMDB does not say which file): the first of `data.mdb` and `lock.mdb` this user may not open for
    /// reading and writing, or the directory when `lock.mdb` cannot be created in it.
    static func deniedEnvironment(in directory: URL, code: Int32) -> LedgerStoreError {
        for name in ["data.mdb", "lock.mdb"] {
            let path = directory.appendingPathComponent(name).path
            let fd = open(path, O_RDWR | O_CLOEXEC)
            if fd >= 0 {
                close(fd)
                continue
            }
            let reason = errno
            if reason == ENOENT { return failure("create \(name) in", directory.path, code) }
            return failure("open (read-write)", path, reason)
        }
        return failure("open the LMDB environment in", directory.path, code)
    }

    /// The error for `operation` on `path` failing with `code`. When this user may not search a directory on
    /// the way to `path`, that directory is named instead: it is the one whose owner or mode must change.
    public static func failure(_ operation: String, _ path: String, _ code: Int32) -> LedgerStoreError {
        if code == EACCES, let directory = unsearchableDirectory(on: path) {
            return .fileAccess(path: directory, operation: "search the directory", errno: code)
        }
        return .fileAccess(path: path, operation: operation, errno: code)
    }

    /// The first directory on the way to `path`, from the root down, that this process may not search.
    static func unsearchableDirectory(on path: String) -> String? {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var prefix = ""
        for component in absolute.split(separator: "/").dropLast() {
            prefix += "/" + component
            if access(prefix, X_OK) != 0 { return prefix }
        }
        return nil
    }

    /// `EACCES`, `ENOENT`… for the codes a store meets, else `errno N`.
    static func name(of code: Int32) -> String {
        let names: [Int32: String] = [
            EACCES: "EACCES", EPERM: "EPERM", ENOENT: "ENOENT", ENOTDIR: "ENOTDIR", EISDIR: "EISDIR", EROFS: "EROFS",
            ENOSPC: "ENOSPC", EDQUOT: "EDQUOT", EIO: "EIO", EFBIG: "EFBIG", EEXIST: "EEXIST", EMFILE: "EMFILE", ENFILE: "ENFILE",
            EBUSY: "EBUSY", ETXTBSY: "ETXTBSY", ELOOP: "ELOOP", ENAMETOOLONG: "ENAMETOOLONG",
        ]
        return names[code] ?? "errno \(code)"
    }

    /// "uid 65534 (nobody)".
    static var currentUser: String {
        let uid = geteuid()
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 1024)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name else {
            return "uid \(uid)"
        }
        return "uid \(uid) (\(String(cString: name)))"
    }
}
