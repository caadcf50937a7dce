import CLMDB
public import Foundation

/// An advisory `flock` on `ledger.lock` in the store directory. Every open ``LedgerStore`` holds it
/// shared; `create` holds it exclusively until the store is complete and ``LedgerStore/compact(at:)``
/// for the whole compaction, so a store is never replaced under a process that has it open. The
/// lock belongs to the open file: deinit unlocks and closes it, and the death of the process releases it.
final class StoreLock: @unchecked Sendable {
    /// Name of the lock file inside the store directory.
    static let fileName = "ledger.lock"

    enum Mode {
        case shared
        case exclusive
    }

    /// -1 when a shared lock could not be taken because the lock file cannot be created (a read-only
    /// directory): such a store is opened unlocked, and `compact` still sees it in LMDB's lock file.
    private let descriptor: Int32

    /// Takes the lock without waiting; throws `busy` when another holder is in the way.
    init(directory: URL, mode: Mode, busy: LedgerStoreError) throws {
        let path = directory.appendingPathComponent(Self.fileName).path
        var fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if fd < 0 { fd = open(path, O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else {
            // Shared and the file cannot be created (a read-only directory): open unlocked. A lock file that
            // exists but may not be opened, or any exclusive case, is an error naming the file.
            let code = errno
            guard mode == .shared, code == ENOENT || code == EROFS else { throw FileAccess.failure("open", path, code) }
            descriptor = -1
            return
        }
        descriptor = fd
        try Self.lock(fd, mode == .shared ? LOCK_SH : LOCK_EX, directory: directory, busy: busy)
    }

    deinit {
        guard descriptor >= 0 else { return }
        // Unlock explicitly: a child forked by another thread holds the open file (and so the lock)
        // until it execs, which would outlive a plain close.
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }

    /// Turns an exclusive lock into a shared one (the end of `create`).
    func downgrade(directory: URL) throws {
        guard descriptor >= 0 else { return }
        try Self.lock(descriptor, LOCK_SH, directory: directory, busy: .storeBusy(directory: directory.path))
    }

    /// True when another holder has `ledger.lock` in `directory` locked exclusively (an upgrade building
    /// its new store there); false when the file is missing or free. Takes no lock and creates no file.
    static func isHeld(in directory: URL) throws -> Bool {
        let path = directory.appendingPathComponent(fileName).path
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return false }
            throw FileAccess.failure("open", path, errno)
        }
        defer { close(fd) }
        while flock(fd, LOCK_SH | LOCK_NB) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == EWOULDBLOCK { return true }
            throw FileAccess.failure("lock", path, code)
        }
        flock(fd, LOCK_UN)
        return false
    }

    /// Leaves `fd` open on failure: deinit closes it.
    private static func lock(_ fd: Int32, _ operation: Int32, directory: URL, busy: LedgerStoreError) throws {
        while flock(fd, operation | LOCK_NB) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == EWOULDBLOCK { throw busy }
            throw FileAccess.failure("lock", directory.appendingPathComponent(fileName).path, code)
        }
    }

    /// True when a process other than this one has the LMDB environment open: every open
    /// environment holds a read lock on the first byte of `lock.mdb` (POSIX `fcntl` locks, which
    /// `F_GETLK` reports for other processes only). This also catches programs that do not take
    /// `ledger.lock` (`mdb_stat`, an older `ledger`). Call it only while this process has no
    /// environment open on the store: closing the descriptor drops this process's `fcntl` locks on the file.
    static func otherProcessHasEnvironmentOpen(in directory: URL) throws -> Bool {
        let path = directory.appendingPathComponent("lock.mdb").path
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return false }
            throw FileAccess.failure("open (read-write)", path, errno)
        }
        defer { close(fd) }
        var query = flock()
        query.l_type = Int16(F_WRLCK)
        query.l_whence = Int16(SEEK_SET)
        query.l_start = 0
        query.l_len = 1
        guard fcntl(fd, F_GETLK, &query) == 0 else {
            throw FileAccess.failure("query the locks of", path, errno)
        }
        return query.l_type != Int16(F_UNLCK)
    }
}

/// What ``LedgerStore/compact(at:)`` did.
public struct CompactionResult: Equatable, Sendable {
    /// Size of `data.mdb` before and after.
    public var bytesBefore: Int
    public var bytesAfter: Int
    /// The store format after compaction: 3 (a format-2 store gains the recent-change regions).
    public var formatVersion: UInt32
}

extension LedgerStore {
    /// Name of the temporary directory `compact` writes the copy into (inside the store directory,
    /// so the final rename stays on one file system).
    static let compactionDirectoryName = "compact.partial"

    /// Rewrites `data.mdb` with only its live pages: LMDB copies on write, so a deleted entry (such
    /// as an erased identity's sealed UID) stays in freed pages of the file until they are reused.
    /// Copies the environment with `mdb_env_copy2(MDB_CP_COMPACT)` into a temporary directory beside
    /// `data.mdb`, syncs it, and renames it over `data.mdb` (atomic: a crash leaves the old or the new
    /// file). Refuses with ``LedgerStoreError/storeInUse(directory:)`` while any other process, or
    /// another open store in this process, has the store open; stores opening meanwhile are refused
    /// with ``LedgerStoreError/storeBusy(directory:)``.
    /// The key files are read from `keyDirectory` (default: `directory`) to check the store's key.
    /// A format-2 store comes out as format 3 (its copy gains the empty recent-change regions, ``Recent``).
    /// - Complexity: O(live pages).
    public static func compact(at directory: URL, keyDirectory: URL? = nil) throws -> CompactionResult {
        let dataFile = directory.appendingPathComponent("data.mdb")
        if let detail = try interruptedInit(in: directory, keyDirectory: keyDirectory) {
            throw LedgerStoreError.incompleteInit(directory: directory.path, detail: detail)
        }
        guard try FileAccess.exists(dataFile.path) else {
            throw LedgerStoreError.notInitialized(directory: directory.path)
        }
        let lock = try StoreLock(directory: directory, mode: .exclusive, busy: .storeInUse(directory: directory.path))
        guard try !StoreLock.otherProcessHasEnvironmentOpen(in: directory) else {
            throw LedgerStoreError.storeInUse(directory: directory.path)
        }
        let bytesBefore = try FileAccess.size(dataFile.path)
        let temporary = directory.appendingPathComponent(compactionDirectoryName)
        try removeLeftoverCopy(temporary)
        guard mkdir(temporary.path, 0o700) == 0 else {
            throw FileAccess.failure("create the directory", temporary.path, errno)
        }
        let copy = temporary.appendingPathComponent("data.mdb")
        do {
            try copyCompacted(directory: directory, keyDirectory: keyDirectory, lock: lock, to: temporary)
            // LMDB creates the copy with mode 0666 less the umask: keep the original's 0600.
            guard chmod(copy.path, 0o600) == 0 else {
                throw FileAccess.failure("set the mode of", copy.path, errno)
            }
            try FileAccess.sync(copy)
            // The environment of this process is closed again: check once more for another one.
            guard try !StoreLock.otherProcessHasEnvironmentOpen(in: directory) else {
                throw LedgerStoreError.storeInUse(directory: directory.path)
            }
            guard rename(copy.path, dataFile.path) == 0 else {
                throw FileAccess.failure("rename \(copy.path) over", dataFile.path, errno)
            }
            try FileAccess.sync(directory)
        } catch {
            try? removeLeftoverCopy(temporary)
            throw error
        }
        try removeLeftoverCopy(temporary)
        return CompactionResult(
            bytesBefore: bytesBefore, bytesAfter: try FileAccess.size(dataFile.path), formatVersion: LMDBEngine.recentFormatVersion)
    }

    /// Opens the store under the exclusive `lock` (checking its key and format) and writes the
    /// compacted copy, converted to format 3 when it is a format-2 store (nothing else has it open);
    /// the environments are closed when this returns.
    private static func copyCompacted(directory: URL, keyDirectory: URL?, lock: StoreLock, to temporary: URL) throws {
        let store = try LedgerStore(opening: directory, keyDirectory: keyDirectory, lock: lock)
        let engine = try store.lmdbEngine
        try lmdb(mdb_env_copy2(engine.environment.handle, temporary.path, UInt32(MDB_CP_COMPACT)), "mdb_env_copy2(\(temporary.path))")
        guard engine.regionDatabases == nil else { return }
        let copy = try LMDBEngine(directory: temporary, mode: .create)
        try copy.withWriteAccess { access in
            try access.putMeta(Array(MetaKey.formatVersion.rawValue.utf8), u32Bytes(LMDBEngine.recentFormatVersion))
        }
    }

    /// Removes the temporary copy of an earlier compaction (only the files LMDB writes there).
    private static func removeLeftoverCopy(_ temporary: URL) throws {
        guard try FileAccess.exists(temporary.path) else { return }
        for name in ["data.mdb", "lock.mdb"] {
            let path = temporary.appendingPathComponent(name).path
            guard unlink(path) == 0 || errno == ENOENT else { throw FileAccess.failure("remove (left by an earlier compaction)", path, errno) }
        }
        guard rmdir(temporary.path) == 0 else {
            throw FileAccess.failure("remove (left by an earlier compaction)", temporary.path, errno)
        }
    }
}
