public import Foundation
import LedgerCrypto

/// File-system calls that keep `errno`, so a file this user may not read is reported as exactly that
/// (``LedgerStoreError/fileAccess(path:operation:errno:)``, naming the path), never as a missing,
/// malformed or corrupt one.
public enum FileAccess {
    /// Whether `path` exists. False only when it does not (`ENOENT`, or a component that is not a
    /// directory); any other failure, such as a directory on the way this user may not search, is thrown.
    /// Whether `path` is on a file system mounted read-only.
    static func isOnReadOnlyFileSystem(_ path: String) -> Bool {
        var status = statvfs()
        return statvfs(path, &status) == 0 && status.f_flag & UInt(ST_RDONLY) != 0
    }

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

    /// The names in the directory `path` (without `.` and `..`), sorted; a missing directory is `ENOENT`.
    public static func entries(of path: String) throws -> [String] {
        guard let directory = opendir(path) else { throw failure("list", path, errno) }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// `fsync` of a file or a directory (for a directory: its entries, after a rename).
    public static func sync(_ url: URL) throws {
        let fd = open(url.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw failure("open", url.path, errno) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw failure("sync", url.path, errno) }
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
        try forEachChunk(of: fd, path: path) { chunk in
            guard bytes.count + chunk.count <= limit else { throw failure("read (more than \(limit) bytes)", path, EFBIG) }
            bytes.append(contentsOf: chunk)
        }
        return bytes
    }

    /// The bytes of the key file `url`. A missing file is ``LedgerStoreError/missingKey(path:)``, one others
    /// may read ``LedgerStoreError/keyReadableByOthers(path:mode:)``; any other failure (a file or directory
    /// this user may not read) is reported as what it is.
    static func readKeyFile(_ url: URL) throws -> [UInt8] {
        try checkKeyDirectory(of: url)
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

    /// Refuses the directory of the key file `url` when others may write to it (they could delete or replace
    /// the key files): ``LedgerStoreError/keyDirectoryWritableByOthers(path:mode:)``.
    static func checkKeyDirectory(of url: URL) throws {
        let directory = url.deletingLastPathComponent().path
        var info = stat()
        guard stat(directory, &info) == 0 else { return }  // reading or creating the file names the failure
        let mode = UInt16(info.st_mode & 0o7777)
        guard mode & 0o002 == 0 else { throw LedgerStoreError.keyDirectoryWritableByOthers(path: directory, mode: mode) }
    }

    /// Creates the key file `url` with mode 0600 holding `contents`, synced to disk. An existing file is
    /// ``LedgerStoreError/alreadyInitialized(directory:)``.
    static func createKeyFile(_ url: URL, contents: [UInt8]) throws {
        try checkKeyDirectory(of: url)
        do {
            try createFile(url, contents: contents)
        } catch LedgerStoreError.fileAccess(_, _, EEXIST) {
            throw LedgerStoreError.alreadyInitialized(directory: url.deletingLastPathComponent().path)
        }
    }

    /// Creates the file `url` (refused when it exists: `EEXIST`) with mode 0600 holding `contents`, synced to disk.
    public static func createFile(_ url: URL, contents: [UInt8]) throws {
        try withNewFile(url) { fd in try write(contents, to: fd, path: url.path) }
    }

    /// Writes `contents` to the output file `path` (`--out`), created (mode 0600: an output may hold private
    /// case text or a transaction id) or replaced whole. A failure says why (`EISDIR`, `ENOENT`, `ENOSPC`…)
    /// and leaves an existing regular file as it was. Refused (``LedgerStoreError/refusedOutput(path:reason:)``)
    /// when `path` is a symbolic link, or is or lies in one of `protected` (the store and key directories),
    /// symbolic links resolved: an output never replaces `data.mdb` or a key file.
    public static func writeFile(_ path: String, contents: [UInt8], protecting protected: [URL]) throws {
        try checkOutputPath(path, protecting: protected)
        var status = stat()
        // Not a regular file (a terminal, a pipe, /dev/null): written in place.
        if stat(path, &status) == 0, status.st_mode & S_IFMT != S_IFREG {
            let fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC)
            guard fd >= 0 else { throw failure("write", path, errno) }
            defer { close(fd) }
            return try write(contents, to: fd, path: path)
        }
        // A regular file is replaced whole or not at all: written beside it, synced, then renamed over
        // it, so a full disk never leaves it empty or cut short (an earlier checkpoint stays as it was).
        // The staging file is new (never a file or link someone left there).
        let staging = path + ".partial-\(getpid())"
        let fd = open(staging, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure("create", staging, errno) }
        do {
            defer { close(fd) }
            try write(contents, to: fd, path: path)
            guard fsync(fd) == 0 else { throw failure("write", path, errno) }
            guard rename(staging, path) == 0 else { throw failure("write", path, errno) }
        } catch {
            unlink(staging)
            throw error
        }
    }

    /// Refuses the output path `path` when it is a symbolic link or resolves to, or into, one of `protected`.
    private static func checkOutputPath(_ path: String, protecting protected: [URL]) throws {
        var status = stat()
        if lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFLNK {
            throw LedgerStoreError.refusedOutput(path: path, reason: "it is a symbolic link: give the path of a file itself")
        }
        let url = URL(fileURLWithPath: path)
        let resolved = realPath(url.path) ?? realPath(url.deletingLastPathComponent().path).map { $0 + "/" + url.lastPathComponent }
        guard let resolved else { return }  // its directory is missing: the write fails naming it
        for directory in protected {
            let root = realPath(directory.path) ?? directory.standardizedFileURL.path
            if resolved == root || resolved.hasPrefix(root.hasSuffix("/") ? root : root + "/") {
                throw LedgerStoreError.refusedOutput(
                    path: path,
                    reason:
                        "it is in \(directory.path), the ledger's store or key directory (an output there could replace data.mdb or a key file): write it to another directory"
                )
            }
        }
    }

    /// `realpath(3)` of `path`, nil when it cannot be resolved (it does not exist).
    private static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Copies the regular file `source` into the new file `destination` (mode 0600, refused when it
    /// exists), 1 MiB at a time, synced to disk.
    public static func copyFile(_ source: URL, to destination: URL) throws {
        let input = open(source.path, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw failure("read", source.path, errno) }
        defer { close(input) }
        try withNewFile(destination) { fd in
            try forEachChunk(of: input, path: source.path) { try write($0, to: fd, path: destination.path) }
        }
    }

    /// The size in bytes and SHA-256 of the file `path`, read 1 MiB at a time.
    public static func sha256(ofFile path: String) throws -> (bytes: Int, digest: [UInt8]) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw failure("read", path, errno) }
        defer { close(fd) }
        let hasher = try SHA256Hasher()
        try hasher.begin()
        var bytes = 0
        try forEachChunk(of: fd, path: path) { chunk in
            try chunk.withUnsafeBytes { try hasher.update($0) }
            bytes += chunk.count
        }
        return (bytes, try hasher.finish())
    }

    /// Creates `url` (mode 0600, `O_EXCL`), runs `body` with its descriptor and syncs it; a failure
    /// removes the file again.
    static func withNewFile(_ url: URL, _ body: (Int32) throws -> Void) throws {
        let fd = open(url.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure("create", url.path, errno) }
        defer { close(fd) }
        do {
            try body(fd)
            guard fsync(fd) == 0 else { throw failure("sync", url.path, errno) }
        } catch {
            unlink(url.path)
            throw error
        }
    }

    /// Calls `body` with each chunk (at most 1 MiB) read from `fd` until its end.
    private static func forEachChunk(of fd: Int32, path: String, _ body: (ArraySlice<UInt8>) throws -> Void) throws {
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            if count == 0 { return }
            if count < 0 {
                if errno == EINTR { continue }
                throw failure("read", path, errno)
            }
            try body(chunk[0..<count])
        }
    }

    /// Writes all of `bytes` to `fd`.
    private static func write(_ bytes: some Collection<UInt8>, to fd: Int32, path: String) throws {
        let contents = Array(bytes)
        var written = 0
        while written < contents.count {
            let count = contents.withUnsafeBytes { Foundation.write(fd, $0.baseAddress.map { $0 + written }, $0.count - written) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw failure("write", path, count < 0 ? errno : EIO) }
            written += count
        }
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
