import CLMDB
import Foundation

/// An LMDB call that failed, with `mdb_strerror` text.
public struct LMDBError: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let operation: String
    /// What to do about it, when the ledger can tell.
    public var advice: String?
    public var description: String { "\(operation): \(String(cString: mdb_strerror(code)))" + (advice.map { ". \($0)" } ?? "") }
    var isMapFull: Bool { code == MDB_MAP_FULL }
    var isNotFound: Bool { code == MDB_NOTFOUND }
}

/// Turns an LMDB return code into a thrown ``LMDBError`` naming the call.
@inline(__always)
func lmdb(_ code: Int32, _ operation: @autoclosure () -> String) throws(LMDBError) {
    guard code == MDB_SUCCESS else { throw LMDBError(code: code, operation: operation()) }
}

/// One LMDB environment with its named databases.
///
/// Transactions of this process are not serialised by any lock of ours: read transactions run in
/// parallel on any threads (`MDB_NOTLS`), and LMDB serialises write transactions itself (across
/// threads and processes). The only exclusion is around changing the map size, which LMDB allows
/// only while this process has no transaction open: every transaction holds a shared lock, growing
/// the map (a write that filled it) or adopting a size another process set takes it exclusively.
/// So never start a write inside a read of the same environment on the same thread.
///
/// Opening an existing environment runs no write transaction (the databases are opened in a read
/// transaction without `MDB_CREATE`), so a reader never waits for a writer, and a writer that is
/// stopped or slow never blocks a reader. A long-running writer clears the reader slots of dead
/// processes before a write at most once per ``readerCheckInterval``, not only at open.
final class LMDBEnvironment: @unchecked Sendable {
    /// How to open the environment.
    enum Mode {
        /// Create the environment and the databases if missing (`ledger init`).
        case create
        /// An existing environment: `required` must exist, which tells a foreign LMDB store apart
        /// (``LMDBError/isNotFound`` when it is missing); other databases are opened when present
        /// (``databases`` lists them). Nothing is created or written.
        case open(required: String)
        /// As `.open`, with `MDB_RDONLY`: the data file is never written.
        case readOnly(required: String)
        /// As `.readOnly`, and without LMDB's lock file (`MDB_NOLOCK`), so no file of the store is
        /// written at all: only while holding `ledger.lock` exclusively (no other process has the store
        /// open), as `ledger upgrade` does with the old store.
        case snapshot(required: String)
    }

    let handle: OpaquePointer
    /// The named databases, resolved once at open.
    private(set) var databases: [String: MDB_dbi] = [:]
    /// Held shared by every transaction, exclusively to change the map size.
    private let resizeLock = ReadWriteLock()
    /// The last time a write cleared dead readers (monotonic nanoseconds), guarded by `checkLock`.
    private var lastReaderCheck: UInt64
    private let checkLock = NSLock()
    /// The most time between two dead-reader checks of a writer.
    let readerCheckInterval: UInt64

    /// Opens the environment in the directory `path` with plain databases named `databaseNames`.
    convenience init(
        path: String, databaseNames: [String], mode: Mode = .create, initialMapSize: Int = LMDBEnvironment.defaultMapSize
    ) throws {
        try self.init(path: path, databases: databaseNames.map { ($0, 0) }, mode: mode, initialMapSize: initialMapSize)
    }

    /// Opens the environment in the directory `path` with `databases` (name and `mdb_dbi_open` flags,
    /// such as `MDB_DUPSORT`). An existing `data.mdb` shorter than its meta pages claim is refused
    /// before LMDB maps it (``LMDBFileCheck``).
    init(
        path: String, databases specs: [(name: String, flags: UInt32)], mode: Mode = .create,
        initialMapSize: Int = LMDBEnvironment.defaultMapSize, readerCheckInterval: Double = 1
    ) throws {
        try LMDBFileCheck.checkLength(of: (path as NSString).appendingPathComponent("data.mdb"))
        var env: OpaquePointer?
        try lmdb(mdb_env_create(&env), "mdb_env_create")
        guard let env else { throw LMDBError(code: EINVAL, operation: "mdb_env_create") }
        // From here the object is fully initialised: on any failure below, deinit closes `env`.
        handle = env
        self.readerCheckInterval = UInt64(readerCheckInterval * 1e9)
        lastReaderCheck = DispatchTime.now().uptimeNanoseconds
        try lmdb(mdb_env_set_maxdbs(env, MDB_dbi(specs.count + 2)), "mdb_env_set_maxdbs")
        try lmdb(mdb_env_set_mapsize(env, initialMapSize), "mdb_env_set_mapsize")
        var flags = UInt32(MDB_NOTLS)
        switch mode {
        case .readOnly: flags |= UInt32(MDB_RDONLY)
        case .snapshot: flags |= UInt32(MDB_RDONLY | MDB_NOLOCK)
        case .create, .open: break
        }
        let opened = mdb_env_open(env, path, flags, 0o600)
        guard opened != ENOMEM else {
            // Mapping reserves address space only, but a limit on the process's virtual memory counts it.
            var error = LMDBError(code: opened, operation: "mdb_env_open(\(path))")
            error.advice =
                "The store maps \(initialMapSize >> 20) MiB of address space (memory is used only as the store fills), more than this process may reserve: raise its virtual memory limit (ulimit -v), or start the map smaller with \(MapSize.environmentVariable) (e.g. 1GiB: it doubles whenever the store fills it)"
            throw error
        }
        try lmdb(opened, "mdb_env_open(\(path))")
        var dead: Int32 = 0
        try lmdb(mdb_reader_check(env, &dead), "mdb_reader_check")
        switch mode {
        case .create:
            try write { txn in try openDatabases(specs, in: txn, create: true, required: nil) }
        case .open(let required), .readOnly(let required), .snapshot(let required):
            try openDatabasesForReading(specs, required: required)
        }
    }

    deinit { mdb_env_close(handle) }

    /// Address space only: the file grows as pages are written, so a large map costs nothing until
    /// used. 64 GiB, or ``MapSize/environmentVariable``'s size (the map then grows as the store fills).
    static let defaultMapSize = ProcessInfo.processInfo.environment[MapSize.environmentVariable].flatMap(MapSize.parse) ?? 64 << 30

    func database(_ name: String) -> MDB_dbi { databases[name] ?? 0 }

    /// The handle of `name`; throws ``LMDBError/isNotFound`` when the environment lacks it.
    func require(_ name: String) throws(LMDBError) -> MDB_dbi {
        guard let dbi = databases[name] else { throw LMDBError(code: MDB_NOTFOUND, operation: "mdb_dbi_open(\(name))") }
        return dbi
    }

    /// Opens `specs` in `txn`; with `required`, that database must exist first.
    private func openDatabases(_ specs: [(name: String, flags: UInt32)], in txn: LMDBTransaction, create: Bool, required: String?) throws {
        if let required, let spec = specs.first(where: { $0.name == required }) {
            var dbi: MDB_dbi = 0
            try lmdb(mdb_dbi_open(txn.handle, required, spec.flags, &dbi), "mdb_dbi_open(\(required))")
        }
        for spec in specs {
            var dbi: MDB_dbi = 0
            let code = mdb_dbi_open(txn.handle, spec.name, spec.flags | (create ? UInt32(MDB_CREATE) : 0), &dbi)
            // An existing store of another format lacks some databases: the caller tells it from its metadata.
            if code == MDB_NOTFOUND && !create { continue }
            try lmdb(code, "mdb_dbi_open(\(spec.name))")
            databases[spec.name] = dbi
        }
    }

    /// Opens the databases in a read transaction and commits it, which makes the handles the
    /// environment's: no write transaction, so no wait for a writer.
    private func openDatabasesForReading(_ specs: [(name: String, flags: UInt32)], required: String) throws {
        resizeLock.lockShared()
        defer { resizeLock.unlock() }
        let txn = try begin(flags: UInt32(MDB_RDONLY))
        do {
            try openDatabases(specs, in: txn, create: false, required: required)
        } catch {
            mdb_txn_abort(txn.handle)
            throw error
        }
        try lmdb(mdb_txn_commit(txn.handle), "mdb_txn_commit")
    }

    /// The id of the last committed write transaction.
    var lastTransaction: UInt64 {
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        return UInt64(info.me_last_txnid)
    }

    /// Current map size in bytes.
    var mapSize: Int {
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        return info.me_mapsize
    }

    /// Runs `body` in a read-only transaction. Any number run at once, on any threads.
    func read<T, E: Error>(_ body: (LMDBTransaction) throws(E) -> T) throws -> T {
        resizeLock.lockShared()
        defer { resizeLock.unlock() }
        let txn = try begin(flags: UInt32(MDB_RDONLY))
        defer { mdb_txn_abort(txn.handle) }
        return try body(txn)
    }

    /// Runs `body` in a read-only transaction of snapshot `snapshot` (a transaction id), which another
    /// read transaction of this process holds: nil when a transaction begun now sees another snapshot
    /// (a write committed since) or cannot begin without waiting (the map to adopt after another
    /// process grew it, which needs `resizeLock` exclusively: the holder of the other transaction
    /// would wait for this one).
    func read<T>(atSnapshot snapshot: UInt64, _ body: (LMDBTransaction) throws -> T) throws -> T? {
        guard resizeLock.tryLockShared() else { return nil }
        defer { resizeLock.unlock() }
        var handle: OpaquePointer?
        guard mdb_txn_begin(self.handle, nil, UInt32(MDB_RDONLY), &handle) == MDB_SUCCESS, let handle else { return nil }
        defer { mdb_txn_abort(handle) }
        guard UInt64(mdb_txn_id(handle)) == snapshot else { return nil }
        return try body(LMDBTransaction(handle: handle, environment: self))
    }

    /// Writes a compacted copy of the environment (`mdb_env_copyfd2` with `MDB_CP_COMPACT`: live pages
    /// only, renumbered) to the open file `fd`, from one read transaction of its own, as a read would.
    func copyCompacted(to fd: Int32, path: String) throws {
        resizeLock.lockShared()
        defer { resizeLock.unlock() }
        try lmdb(mdb_env_copyfd2(handle, fd, UInt32(MDB_CP_COMPACT)), "mdb_env_copyfd2(\(path))")
    }

    /// Runs `body` in a write transaction and commits it; aborts on any error. When the map is
    /// full the transaction is aborted, the map doubled and `body` run again, so `body` must not
    /// have effects outside the transaction.
    ///
    /// The commit is durable when this returns, unless `deferringMetaSync`: then LMDB syncs the data
    /// pages but writes the meta page that publishes them without syncing it (`MDB_NOMETASYNC`), and
    /// the transaction is durable only once a later sync covers that write: ``sync()``, or the data
    /// sync of the next transaction that writes anything. ``durability`` counts both.
    func write<T, E: Error>(deferringMetaSync: Bool = false, _ body: (LMDBTransaction) throws(E) -> T) throws -> T {
        try clearDeadReadersIfDue()
        // The meta sync is skipped through the environment's flag (LMDB 0.9 takes no such flag per
        // transaction), set only around this commit: the lock keeps every other write transaction of
        // this process out until it is cleared (LMDB serialises write transactions anyway).
        writerLock.lock()
        defer { writerLock.unlock() }
        while true {
            resizeLock.lockShared()
            let txn: LMDBTransaction
            // Another process's write transaction holds LMDB's writer mutex meanwhile (a stopped
            // process holds it until it continues or ends): say so once the wait is long.
            let notice = LedgerStore.writerWaitNotice.map { notice in DispatchWorkItem { notice() } }
            if let notice { DispatchQueue.global().asyncAfter(deadline: .now() + LMDBEnvironment.writerWaitNoticeSeconds, execute: notice) }
            defer { notice?.cancel() }
            do {
                txn = try begin(flags: 0)
                notice?.cancel()
            } catch {
                resizeLock.unlock()
                throw error
            }
            let result: T
            do {
                result = try body(txn)
            } catch {
                mdb_txn_abort(txn.handle)
                resizeLock.unlock()
                if let error = error as? LMDBError, error.isMapFull {
                    try grow()
                    continue
                }
                throw error
            }
            let id = UInt64(mdb_txn_id(txn.handle))
            if deferringMetaSync { mdb_env_set_flags(handle, UInt32(MDB_NOMETASYNC), 1) }
            // mdb_txn_commit frees the transaction whether or not it succeeds: never abort it after.
            let code = mdb_txn_commit(txn.handle)
            if deferringMetaSync { mdb_env_set_flags(handle, UInt32(MDB_NOMETASYNC), 0) }
            resizeLock.unlock()
            if code == MDB_MAP_FULL {
                try grow()
                continue
            }
            try lmdb(code, "mdb_txn_commit")
            committed(id, metaSynced: !deferringMetaSync)
            return result
        }
    }

    /// Held by every write transaction of this process (see ``write(deferringMetaSync:_:)``).
    private let writerLock = NSLock()
    /// How long a write waits for another process's before ``LedgerStore/writerWaitNotice`` runs.
    static let writerWaitNoticeSeconds = 5.0
    private let durabilityLock = NSLock()
    private var counted = EngineDurability(committed: 0, durable: 0)

    /// What this process knows to be committed and durable: a commit that returns has synced its
    /// data pages (so every meta page written before it, in particular the previous transaction's,
    /// is durable too) and, unless its meta sync was deferred, its own meta page.
    var durability: EngineDurability { durabilityLock.withLock { counted } }

    /// Counts the commit of transaction `id`. A transaction with nothing to write is not committed
    /// (LMDB writes and syncs nothing for it, and the last transaction id stays below `id`): it
    /// counts nothing. When another transaction followed already (the id is above `id`), this one
    /// is counted committed all the same, which can only make its holder wait for a sync.
    private func committed(_ id: UInt64, metaSynced: Bool) {
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        guard UInt64(info.me_last_txnid) >= id else { return }
        durabilityLock.withLock {
            counted.committed = max(counted.committed, id)
            counted.durable = max(counted.durable, metaSynced ? id : id - 1)
        }
    }

    /// Makes every committed transaction durable (`fdatasync` of the data file: it covers the meta
    /// pages written without a sync).
    func sync() throws {
        let covered = durabilityLock.withLock { counted.committed }
        try lmdb(mdb_env_sync(handle, 1), "mdb_env_sync")
        durabilityLock.withLock { counted.durable = max(counted.durable, covered) }
    }

    /// Clears the reader slots of dead processes (a reader killed inside a read transaction pins
    /// every page written since, so the file would grow without bound) at most once per interval.
    private func clearDeadReadersIfDue() throws {
        let now = DispatchTime.now().uptimeNanoseconds
        checkLock.lock()
        let due = now &- lastReaderCheck >= readerCheckInterval
        if due { lastReaderCheck = now }
        checkLock.unlock()
        guard due else { return }
        var dead: Int32 = 0
        try lmdb(mdb_reader_check(handle, &dead), "mdb_reader_check")
    }

    /// Doubles the map, with no transaction of this process open.
    private func grow() throws {
        resizeLock.lockExclusive()
        defer { resizeLock.unlock() }
        try lmdb(mdb_env_set_mapsize(handle, mapSize * 2), "mdb_env_set_mapsize")
    }

    /// Begins a transaction; the caller holds `resizeLock` shared.
    private func begin(flags: UInt32) throws -> LMDBTransaction {
        while true {
            var txn: OpaquePointer?
            let code = mdb_txn_begin(handle, nil, flags, &txn)
            if code == MDB_MAP_RESIZED {
                // Another process grew the map: adopt its size (exclusively), then try again.
                resizeLock.unlock()
                resizeLock.lockExclusive()
                let adopted = mdb_env_set_mapsize(handle, 0)
                resizeLock.unlock()
                resizeLock.lockShared()
                try lmdb(adopted, "mdb_env_set_mapsize")
                continue
            }
            try lmdb(code, "mdb_txn_begin")
            guard let txn else { throw LMDBError(code: EINVAL, operation: "mdb_txn_begin") }
            return LMDBTransaction(handle: txn, environment: self)
        }
    }
}

/// A `pthread_rwlock_t` on the heap (a lock must not move).
final class ReadWriteLock: @unchecked Sendable {
    private let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)

    init() { pthread_rwlock_init(lock, nil) }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    func lockShared() { pthread_rwlock_rdlock(lock) }
    /// Takes the lock shared unless that means waiting.
    func tryLockShared() -> Bool { pthread_rwlock_tryrdlock(lock) == 0 }
    func lockExclusive() { pthread_rwlock_wrlock(lock) }
    func unlock() { pthread_rwlock_unlock(lock) }
}

/// The size of the map a store starts with, from `LEDGER_MAP_SIZE` (hosts with a virtual memory
/// limit, `ulimit -v`, and memory tools such as valgrind cannot reserve the default 64 GiB).
public enum MapSize {
    public static let environmentVariable = "LEDGER_MAP_SIZE"
    public static let minimum = 1 << 20
    public static let maximum = 1 << 40
    static let units: [(suffix: String, shift: Int)] = [("KiB", 10), ("MiB", 20), ("GiB", 30), ("TiB", 40)]

    /// Bytes, rounded up to whole 4 KiB pages, of a decimal number of bytes or of KiB, MiB, GiB or
    /// TiB (`1073741824`, `512MiB`, `1GiB`), from ``minimum`` to ``maximum``; nil for anything else.
    public static func parse(_ text: String) -> Int? {
        let unit = units.first { text.hasSuffix($0.suffix) }
        let digits = unit.map { text.dropLast($0.suffix.count) } ?? Substring(text)
        guard !digits.isEmpty, digits.count <= 13, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let number = Int(digits) else { return nil }
        let (bytes, overflow) = number.multipliedReportingOverflow(by: 1 << (unit?.shift ?? 0))
        guard !overflow, (minimum...maximum).contains(bytes) else { return nil }
        return (bytes + 4_095) / 4_096 * 4_096
    }
}

/// Refuses a `data.mdb` that ends before a page in use before LMDB maps it: reading a page past the
/// end of a mapped file is a SIGBUS, not an error.
enum LMDBFileCheck {
    /// LMDB's magic number and data version (0.9.x), and where the meta page fields are: a 16-byte
    /// page header, then `MDB_meta` (magic, version, address, map size, two 48-byte `MDB_db`s, the
    /// free pages' database first, whose `md_pad` is the page size and whose root page number is at
    /// its offset 40; then the last page number and the transaction id).
    static let magic: UInt32 = 0xBEEF_C0DE
    static let dataVersion: UInt32 = 1
    static let magicOffset = 16
    static let pageSizeOffset = 16 + 24
    static let lastPageOffset = 16 + 120
    static let transactionOffset = 16 + 128
    static let freeRootOffset = 16 + 64
    static let metaLength = 16 + 136

    /// Throws ``LedgerStoreError/corrupt(_:)`` naming `path` when the file holds no valid meta page
    /// or ends before a page in use (``check(_:size:read:)``). A missing or empty file passes (LMDB
    /// creates it; the store refuses an empty one itself).
    static func checkLength(of path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_size > 0 else { return }
        try check(path, size: Int(info.st_size)) { offset, count in
            var bytes = [UInt8](repeating: 0, count: count)
            return pread(fd, &bytes, count, off_t(offset)) == count ? bytes : nil
        }
    }

    /// Throws ``LedgerStoreError/corrupt(_:)`` naming `path` when the file of `size` bytes that
    /// `read(offset, count)` reads (nil: not all of those bytes are there) has no valid meta page, or
    /// when the newest meta page's last page number is past the end of the file and not every page
    /// past the end is on its free list (``pagesAreFree(_:pageSize:root:filePages:read:)``).
    static func check(_ path: String, size: Int, read: (Int, Int) -> [UInt8]?) throws {
        func meta(at offset: Int) -> (pageSize: Int, lastPage: UInt64, transaction: UInt64, freeRoot: UInt64)? {
            guard let page = read(offset, metaLength), u32(page, magicOffset) == magic, u32(page, magicOffset + 4) == dataVersion else { return nil }
            let pageSize = Int(u32(page, pageSizeOffset))
            guard pageSize >= 512, pageSize <= 1 << 16, pageSize & (pageSize - 1) == 0 else { return nil }
            return (pageSize, u64(page, lastPageOffset), u64(page, transactionOffset), u64(page, freeRootOffset))
        }
        guard let first = meta(at: 0) else {
            throw LedgerStoreError.corrupt("\(path) does not start with an LMDB meta page (\(size) bytes): restore data.mdb from your backup")
        }
        let newest = [first, meta(at: first.pageSize)].compactMap { $0 }.max { $0.transaction < $1.transaction } ?? first
        let (needed, overflow) = (newest.lastPage &+ 1).multipliedReportingOverflow(by: UInt64(newest.pageSize))
        let filePages = UInt64(size / newest.pageSize)
        guard
            !overflow,
            needed <= UInt64(size)
                || pagesAreFree(filePages...newest.lastPage, pageSize: newest.pageSize, root: newest.freeRoot, filePages: filePages, read: read)
        else {
            throw LedgerStoreError.corrupt(
                "\(path) is truncated: \(size) bytes, but its meta page needs \(overflow ? "more" : String(needed)) (\(newest.lastPage + 1) pages of \(newest.pageSize)): restore data.mdb from your backup"
            )
        }
    }

    /// LMDB's page layout (0.9.x, 64-bit page numbers): a 16-byte header (page number, pad, flags,
    /// then the lower and upper bounds of the free space), then 16-bit node offsets from the page's
    /// start. A node is a 32-bit data size (a branch node: the child's page number's low 32 bits),
    /// 16-bit flags (a branch node: the page number's next 16 bits), 16-bit key size, the key, the data.
    static let branchPage = 0x01
    static let leafPage = 0x02
    static let bigData = 0x01
    static let noPage = UInt64.max

    /// Whether every page in `range` is on the free list of the free database rooted at `root`, in a
    /// file of `filePages` pages that `read` reads. LMDB does not write a page that a transaction
    /// allocated and freed again (a *loose* page), though the meta page's last page number counts it:
    /// a file can end before that number when the pages past its end are free. False when a page of
    /// the free database itself is past the end, or its tree is not well formed.
    static func pagesAreFree(
        _ range: ClosedRange<UInt64>, pageSize: Int, root: UInt64, filePages: UInt64, read: (Int, Int) -> [UInt8]?
    ) -> Bool {
        // Each free page is an 8-byte entry inside the file: more missing pages than that cannot all be free.
        guard range.upperBound - range.lowerBound < filePages * UInt64(pageSize) / 8, root != noPage else { return false }
        /// `count` bytes from `offset` in page `page`, every page they span inside the file.
        func bytes(_ count: Int, of page: UInt64, from offset: Int = 0) -> [UInt8]? {
            let spanned = UInt64((offset + count + pageSize - 1) / pageSize)
            guard page >= 2, page < filePages, spanned <= filePages - page else { return nil }
            return read(Int(page) * pageSize + offset, count)
        }
        var free = Set<UInt64>()
        var pending = [root]
        var visited: UInt64 = 0
        while let number = pending.popLast() {
            visited += 1
            guard visited <= filePages, let page = bytes(pageSize, of: number) else { return false }
            let (flags, lower, upper) = (u16(page, 10), u16(page, 12), u16(page, 14))
            guard flags & (branchPage | leafPage) != 0, lower >= 16, lower <= upper, upper <= pageSize else { return false }
            for index in 0..<(lower - 16) / 2 {
                let node = u16(page, 16 + 2 * index)
                guard node >= upper, node + 8 <= pageSize else { return false }
                let (low, high, nodeFlags, keySize) = (u16(page, node), u16(page, node + 2), u16(page, node + 4), u16(page, node + 6))
                if flags & branchPage != 0 {
                    pending.append(UInt64(low) | UInt64(high) << 16 | UInt64(nodeFlags) << 32)
                    continue
                }
                let (dataSize, data) = (low | high << 16, node + 8 + keySize)
                let list: [UInt8]?
                if nodeFlags & bigData != 0 {
                    // The list is on overflow pages, after their 16-byte header.
                    list = data + 8 <= pageSize ? bytes(dataSize, of: u64(page, data), from: 16) : nil
                } else {
                    list = data + dataSize <= pageSize ? Array(page[data..<data + dataSize]) : nil
                }
                // A list of page numbers: its count, then that many 8-byte numbers.
                guard let list, list.count >= 8, list.count % 8 == 0, u64(list, 0) == UInt64(list.count / 8 - 1) else { return false }
                for entry in stride(from: 8, to: list.count, by: 8) where range.contains(u64(list, entry)) {
                    free.insert(u64(list, entry))
                }
            }
        }
        return UInt64(free.count) == range.upperBound - range.lowerBound + 1
    }

    private static func u16(_ bytes: [UInt8], _ offset: Int) -> Int { Int(bytes[offset]) | Int(bytes[offset + 1]) << 8 }
    private static func u32(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        bytes.withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self)) }
    }
    private static func u64(_ bytes: [UInt8], _ offset: Int) -> UInt64 {
        bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
    }
}

/// A live transaction; valid only inside the closure that received it.
struct LMDBTransaction {
    let handle: OpaquePointer
    unowned let environment: LMDBEnvironment

    func get(_ db: String, _ key: [UInt8]) throws -> [UInt8]? {
        var k = key
        return try k.withUnsafeMutableBytes { keyBytes -> [UInt8]? in
            var keyVal = MDB_val(mv_size: keyBytes.count, mv_data: keyBytes.baseAddress)
            var value = MDB_val()
            let code = mdb_get(handle, environment.database(db), &keyVal, &value)
            if code == MDB_NOTFOUND { return nil }
            try lmdb(code, "mdb_get(\(db))")
            return Self.bytes(value)
        }
    }

    func put(_ db: String, _ key: [UInt8], _ value: [UInt8], flags: Int32 = 0) throws {
        var k = key
        var v = value
        try k.withUnsafeMutableBytes { keyBytes in
            try v.withUnsafeMutableBytes { valueBytes in
                var keyVal = MDB_val(mv_size: keyBytes.count, mv_data: keyBytes.baseAddress)
                var valueVal = MDB_val(mv_size: valueBytes.count, mv_data: valueBytes.baseAddress)
                try lmdb(mdb_put(handle, environment.database(db), &keyVal, &valueVal, UInt32(flags)), "mdb_put(\(db))")
            }
        }
    }

    /// Deletes `key`; returns false when it was absent.
    @discardableResult
    func delete(_ db: String, _ key: [UInt8]) throws -> Bool {
        var k = key
        return try k.withUnsafeMutableBytes { keyBytes -> Bool in
            var keyVal = MDB_val(mv_size: keyBytes.count, mv_data: keyBytes.baseAddress)
            let code = mdb_del(handle, environment.database(db), &keyVal, nil)
            if code == MDB_NOTFOUND { return false }
            try lmdb(code, "mdb_del(\(db))")
            return true
        }
    }

    /// Visits entries with keys at or after `start`, in key order, until `body` returns false.
    func scan(_ db: String, from start: [UInt8], _ body: (_ key: [UInt8], _ value: [UInt8]) throws -> Bool) throws {
        var cursor: OpaquePointer?
        try lmdb(mdb_cursor_open(handle, environment.database(db), &cursor), "mdb_cursor_open(\(db))")
        defer { mdb_cursor_close(cursor) }
        var k = start
        try k.withUnsafeMutableBytes { keyBytes in
            var key = MDB_val(mv_size: keyBytes.count, mv_data: keyBytes.baseAddress)
            var value = MDB_val()
            var code = mdb_cursor_get(cursor, &key, &value, keyBytes.count == 0 ? MDB_FIRST : MDB_SET_RANGE)
            while code == MDB_SUCCESS {
                guard try body(Self.bytes(key), Self.bytes(value)) else { return }
                code = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
            }
            if code != MDB_NOTFOUND { try lmdb(code, "mdb_cursor_get(\(db))") }
        }
    }

    /// Visits entries whose keys start with `prefix`.
    func scan(_ db: String, prefix: [UInt8], _ body: (_ key: [UInt8], _ value: [UInt8]) throws -> Void) throws {
        try scan(db, from: prefix) { key, value in
            guard key.starts(with: prefix) else { return false }
            try body(key, value)
            return true
        }
    }

    /// Entries and bytes of `db`.
    func statistics(_ db: String) throws(LMDBError) -> (entries: Int, bytes: Int) {
        try statistics(environment.database(db))
    }

    static func bytes(_ value: MDB_val) -> [UInt8] {
        guard let data = value.mv_data, value.mv_size > 0 else { return [] }
        return Array(UnsafeRawBufferPointer(start: data, count: value.mv_size))
    }
}

// MARK: Raw access: keys and values as buffers, no copies

extension LMDBTransaction {
    /// The value of `key` in `dbi`, pointing into the map: valid until the transaction ends or
    /// writes to that database.
    func get(_ dbi: MDB_dbi, _ key: UnsafeRawBufferPointer) throws(LMDBError) -> UnsafeRawBufferPointer? {
        var keyVal = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var value = MDB_val()
        let code = mdb_get(handle, dbi, &keyVal, &value)
        if code == MDB_NOTFOUND { return nil }
        try lmdb(code, "mdb_get")
        return UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)
    }

    /// Stores `value` under `key`; false when `flags` (`MDB_NOOVERWRITE`, `MDB_NODUPDATA`) refused
    /// it because it was there.
    @discardableResult
    func put(_ dbi: MDB_dbi, _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, flags: Int32 = 0) throws(LMDBError) -> Bool {
        var keyVal = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var valueVal = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        let code = mdb_put(handle, dbi, &keyVal, &valueVal, UInt32(flags))
        if code == MDB_KEYEXIST { return false }
        try lmdb(code, "mdb_put")
        return true
    }

    /// Deletes `key` (with `value`: only that duplicate); false when absent.
    @discardableResult
    func delete(_ dbi: MDB_dbi, _ key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer? = nil) throws(LMDBError) -> Bool {
        var keyVal = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var valueVal = MDB_val(mv_size: value?.count ?? 0, mv_data: UnsafeMutableRawPointer(mutating: value?.baseAddress))
        let code = value == nil ? mdb_del(handle, dbi, &keyVal, nil) : mdb_del(handle, dbi, &keyVal, &valueVal)
        if code == MDB_NOTFOUND { return false }
        try lmdb(code, "mdb_del")
        return true
    }

    /// Empties `dbi` (keeps the database).
    func clear(_ dbi: MDB_dbi) throws(LMDBError) {
        try lmdb(mdb_drop(handle, dbi, 0), "mdb_drop")
    }

    func cursor(_ dbi: MDB_dbi) throws(LMDBError) -> LMDBCursor {
        var cursor: OpaquePointer?
        try lmdb(mdb_cursor_open(handle, dbi, &cursor), "mdb_cursor_open")
        guard let cursor else { throw LMDBError(code: EINVAL, operation: "mdb_cursor_open") }
        return LMDBCursor(handle: cursor)
    }

    /// Entries and bytes of database `dbi`, as its root record says: counts read from a damaged page
    /// saturate rather than overflow.
    func statistics(_ dbi: MDB_dbi) throws(LMDBError) -> (entries: Int, bytes: Int) {
        var stat = MDB_stat()
        try lmdb(mdb_stat(handle, dbi, &stat), "mdb_stat")
        let pages = [stat.ms_branch_pages, stat.ms_leaf_pages, stat.ms_overflow_pages].reduce(0) { sum, count in
            let (total, overflow) = sum.addingReportingOverflow(count)
            return overflow ? .max : total
        }
        let (bytes, overflow) = pages.multipliedReportingOverflow(by: Int(stat.ms_psize))
        return (stat.ms_entries, overflow ? .max : bytes)
    }
}

/// A cursor; close it before its transaction ends.
struct LMDBCursor {
    let handle: OpaquePointer

    func close() { mdb_cursor_close(handle) }

    /// Stores `value` under `key` through the cursor (`mdb_cursor_put`): puts in key order find their
    /// leaf from the cursor's last position instead of descending from the root each time. False when
    /// `flags` (`MDB_NOOVERWRITE`, `MDB_NODUPDATA`) refused it because it was there.
    @discardableResult
    func put(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, flags: Int32 = 0) throws(LMDBError) -> Bool {
        var keyVal = MDB_val(mv_size: key.count, mv_data: UnsafeMutableRawPointer(mutating: key.baseAddress))
        var valueVal = MDB_val(mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
        let code = mdb_cursor_put(handle, &keyVal, &valueVal, UInt32(flags))
        if code == MDB_KEYEXIST { return false }
        try lmdb(code, "mdb_cursor_put")
        return true
    }

    /// Moves with `op`, positioning on `key` (and `value`) when the operation takes them; the entry
    /// found, pointing into the map, or nil at the end (`MDB_NOTFOUND`).
    func get(
        _ op: MDB_cursor_op, key: UnsafeRawBufferPointer? = nil, value: UnsafeRawBufferPointer? = nil
    ) throws(LMDBError) -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)? {
        var keyVal = MDB_val(mv_size: key?.count ?? 0, mv_data: UnsafeMutableRawPointer(mutating: key?.baseAddress))
        var valueVal = MDB_val(mv_size: value?.count ?? 0, mv_data: UnsafeMutableRawPointer(mutating: value?.baseAddress))
        let code = mdb_cursor_get(handle, &keyVal, &valueVal, op)
        if code == MDB_NOTFOUND { return nil }
        try lmdb(code, "mdb_cursor_get")
        // LMDB (built with its default) keeps keys of at most 511 bytes, and the ledger's are far
        // shorter: a longer one was read from a damaged page, and walking on would read garbage.
        guard keyVal.mv_size <= 511 else {
            throw LMDBError(code: MDB_CORRUPTED, operation: "mdb_cursor_get (a key of \(keyVal.mv_size) bytes, over LMDB's 511)")
        }
        return (
            UnsafeRawBufferPointer(start: keyVal.mv_data, count: keyVal.mv_size),
            UnsafeRawBufferPointer(start: valueVal.mv_data, count: valueVal.mv_size)
        )
    }
}
