import CLMDB
import Foundation
import LedgerCore
import Projections

/// The embedded engine: one LMDB environment (`data.mdb`) with these named databases (all integers
/// big-endian, so byte order is numeric order):
///
/// | database | key → value |
/// | --- | --- |
/// | `log` | u64 sequence → a record, or u64 last sequence → a block of records (``LogBlock``; records in stored form, ``StoredRecordDictionary``), appended with `MDB_APPEND` |
/// | `commands` | first 8 bytes of the command key → u64 sequence, for commands without a home lineage (`MDB_DUPSORT`, `MDB_DUPFIXED`) |
/// | `lineages` | lineage(16) → u48 sequence ‖ first 8 bytes of the record's command key (`MDB_DUPSORT`, `MDB_DUPFIXED`) |
/// | `account-lineages` | account(16) → lineage(16) ‖ u64 sequence (`MDB_DUPSORT`, `MDB_DUPFIXED`) |
/// | `read-models` | `ReadModel` keys → values |
/// | `identities` | `u` ‖ vault key(16) → pseudonym(16); `v` ‖ pseudonym(16) → sealed UID, appended at the tree's end (stores written before hold `p` ‖ pseudonym(16) → sealed UID, still read and erased) |
/// | `merkle` | u8 level ‖ u64 index → 32-byte node |
/// | `meta` | names → values (`MetaKey`, `head`, and the record dictionary's entries) |
public final class LMDBEngine: LedgerEngine, @unchecked Sendable {
    static let mainSpecs: [(name: String, flags: UInt32)] = [
        ("log", 0), ("commands", UInt32(MDB_DUPSORT | MDB_DUPFIXED)), ("lineages", UInt32(MDB_DUPSORT | MDB_DUPFIXED)),
        ("account-lineages", UInt32(MDB_DUPSORT | MDB_DUPFIXED)), ("read-models", 0), ("identities", 0), ("merkle", 0), ("meta", 0),
    ]
    /// The main databases, then the recent-change regions of format 3 (``Recent``), which a format-2
    /// store lacks.
    static let specs = mainSpecs + Recent.names.map { ($0, UInt32(0)) }
    /// The store format of an LMDB store with the recent-change regions; a format-2 store (without
    /// them) is read and written as before, every change straight into the main trees.
    static let recentFormatVersion: UInt32 = 3
    static let metaDatabase = "meta"
    static let headKey = Array("head".utf8)

    let environment: LMDBEnvironment
    let databases: Databases
    /// The recent-change regions' handles; nil in a format-2 store.
    let regionDatabases: [MDB_dbi]?
    /// The writer's view of the regions between its transactions.
    private let cache = RecentCache()
    /// Runs after each write transaction of a format-3 store, before the writer's cache is marked
    /// (tests: another process commits in that instant).
    var afterWriteForTesting: (() -> Void)?

    /// The handles of the named databases.
    struct Databases {
        let log, commands, lineages, accountLineages, readModels, identities, merkle, meta: MDB_dbi

        init(_ environment: LMDBEnvironment) throws {
            log = try environment.require("log")
            commands = try environment.require("commands")
            lineages = try environment.require("lineages")
            accountLineages = try environment.require("account-lineages")
            readModels = try environment.require("read-models")
            identities = try environment.require("identities")
            merkle = try environment.require("merkle")
            meta = try environment.require("meta")
        }

        func of(_ index: EngineIndex) -> MDB_dbi {
            switch index {
            case .commands: commands
            case .lineages: lineages
            case .accountLineages: accountLineages
            case .merkle: merkle
            }
        }
    }

    /// Opens (or, with `.create`, creates) the environment in `directory`. Throws
    /// ``LMDBError/isNotFound`` when an existing environment lacks the `meta` database (a foreign
    /// store) and ``LedgerStoreError/formatOne(directory:)`` when it is a format-1 ledger.
    init(directory: URL, mode: LMDBEnvironment.Mode, initialMapSize: Int = LMDBEnvironment.defaultMapSize) throws {
        let environment = try LMDBEnvironment(path: directory.path, databases: Self.specs, mode: mode, initialMapSize: initialMapSize)
        self.environment = environment
        if environment.databases["commands"] == nil, environment.databases["meta"] != nil {
            let format = try environment.read { txn in
                try txn.get(Self.metaDatabase, Array(MetaKey.formatVersion.rawValue.utf8)).flatMap(u32)
            }
            if format == 1 { throw LedgerStoreError.formatOne(directory: directory.path) }
        }
        databases = try Databases(environment)
        let regions = Recent.names.compactMap { environment.databases[$0] }
        guard regions.isEmpty || regions.count == Recent.regionCount else {
            throw LedgerStoreError.corrupt("\(directory.path) holds \(regions.count) of the \(Recent.regionCount) recent-change databases")
        }
        regionDatabases = regions.isEmpty ? nil : regions
    }

    /// The store format this engine's layout is: 3 with the recent-change regions, 2 without.
    public var formatVersion: UInt32 { regionDatabases == nil ? LedgerStore.formatVersion : Self.recentFormatVersion }

    public func read<T>(_ body: (any EngineReader) throws -> T) throws -> T {
        try environment.read { txn in
            try body(LMDBAccess(txn: txn, db: databases, recent: regionDatabases.map { RecentRegions(databases: $0, cache: nil) }))
        }
    }

    public func write<T>(_ body: (any EngineReader, any EngineWriter) throws -> T) throws -> T {
        try writing(deferringMetaSync: false) { access in try body(access, access) }
    }

    /// Commits with the meta page's sync deferred (`MDB_NOMETASYNC`): one disk sync per group instead
    /// of two. The group is durable after ``sync()`` or after the next group that writes, whose data
    /// sync covers its meta page (``durability`` counts LMDB's transaction ids).
    public func writeDeferringSync<T>(_ body: (any EngineReader, any EngineWriter) throws -> T) throws -> T {
        try writing(deferringMetaSync: true) { access in try body(access, access) }
    }

    public func write<T>(_ body: (any EngineReader, any EngineWriter) throws -> T, whenApplied: (ReadAheadView) -> Void) throws -> T {
        try withoutActuallyEscaping(whenApplied) { whenApplied in
            try writing(deferringMetaSync: false, whenApplied: whenApplied) { access in try body(access, access) }
        }
    }

    public func readAhead<T>(_ view: ReadAheadView, _ body: (any EngineReader) throws -> T) throws -> T? {
        guard let regionDatabases, let regions = view.takeRegions() else { return nil }
        return try environment.read { txn -> T? in
            // The snapshot is the one before the viewed transaction (its commit not yet visible, or
            // it committed nothing) or the viewed transaction's own; anything else moved on.
            let snapshot = UInt64(mdb_txn_id(txn.handle))
            let viewed = RecentCache()
            defer { viewed.regions = [] }  // shares the writer's tables: released before it writes again
            viewed.regions = regions.views
            for region in 0..<Recent.regionCount { viewed.loaded[region] = regions.loaded[region] }
            if snapshot == view.transaction - 1 {
                for (region, before) in regions.premerge { viewed.regions[region] = before }
            } else if snapshot != view.transaction {
                return nil
            }
            return try body(LMDBAccess(txn: txn, db: databases, recent: RecentRegions(databases: regionDatabases, cache: viewed)))
        }
    }

    public func follows(_ view: ReadAheadView) -> Bool { cache.writes == view.writes &+ 1 && !cache.reloaded }

    /// Runs `body` in a write transaction, with the writer's cache of the regions checked first
    /// (reloaded when another process, or an aborted transaction, changed the regions since). After
    /// the commit the cache is known to hold transaction `id`'s state only when it wrote: a transaction
    /// that writes nothing is not committed, and another process's next commit takes its id.
    ///
    /// `whenApplied` runs after `body`, before the commit, with a view of the regions for deciding the
    /// next group while this one commits (``readAhead(_:_:)``).
    private func writing<T>(deferringMetaSync: Bool, whenApplied: ((ReadAheadView) -> Void)? = nil, _ body: (LMDBAccess) throws -> T) throws -> T {
        guard let regionDatabases else {
            return try environment.write(deferringMetaSync: deferringMetaSync) { txn in try body(LMDBAccess(txn: txn, db: databases, recent: nil)) }
        }
        cache.lock.lock()
        defer { cache.lock.unlock() }
        var id: UInt64 = 0
        let result: T
        do {
            result = try environment.write(deferringMetaSync: deferringMetaSync) { txn in
                id = UInt64(mdb_txn_id(txn.handle))
                let regions = RecentRegions(databases: regionDatabases, cache: cache)
                let access = LMDBAccess(txn: txn, db: databases, recent: regions)
                cache.reloaded = cache.transaction != id - 1
                if cache.reloaded { try access.reload(cache, in: regions) }
                cache.transaction = nil  // until this transaction is committed
                cache.wrote = false
                cache.writes &+= 1
                cache.premerge = []
                let result = try body(access)
                whenApplied?(ReadAheadView(cache, transaction: id))
                return result
            }
        } catch {
            cache.transaction = nil
            throw error
        }
        afterWriteForTesting?()
        // Committed as `id` when it changed the regions; else it may not have been committed at all,
        // and its state (the regions unchanged) is the one before it.
        cache.transaction = cache.wrote ? id : id - 1
        return result
    }

    public var durability: EngineDurability? { environment.durability }

    public func sync() throws { try environment.sync() }

    /// Runs `body` in a write transaction with raw access (compaction, tests).
    func withWriteAccess<T>(_ body: (LMDBAccess) throws -> T) throws -> T {
        try writing(deferringMetaSync: false, body)
    }
}

/// A key of at most 40 bytes built on the stack.
struct KeyBuffer {
    private var storage: (UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0)
    private(set) var count = 0

    init() {}
    init(_ prefix: UInt8, _ key: Key128) {
        append(prefix)
        append(key)
    }
    init(_ key: Key128) { append(key) }
    init(_ value: UInt64) { append(value) }

    mutating func append(_ byte: UInt8) {
        withUnsafeMutableBytes(of: &storage) { $0[count] = byte }
        count += 1
    }

    /// The low 6 bytes of `value`, big-endian.
    mutating func append(u48 value: UInt64) {
        for shift in stride(from: 40, through: 0, by: -8) { append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
    }

    mutating func append(_ value: UInt64) {
        let big = value.bigEndian
        withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: big, toByteOffset: count, as: UInt64.self) }
        count += 8
    }

    mutating func append(_ key: Key128) {
        append(key.high)
        append(key.low)
    }

    @discardableResult
    func with<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var copy = storage
        return try withUnsafeBytes(of: &copy) { try body(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
    }
}

/// The last entry of a database while a write group puts entries into it in key order. An entry
/// past the end is put with `MDB_APPEND` (a new key) or `MDB_APPENDDUP` (a new last duplicate of a
/// `MDB_DUPSORT` database), so the page it fills is split at the end rather than in the middle:
/// `account-lineages` and the sealed UIDs in `identities` grow at their end (new accounts'
/// pseudonyms begin with the log position), and middle splits would leave every page there half full.
struct AppendPosition {
    private var key: [UInt8]?
    private var value: [UInt8] = []
    /// Whether the database is `MDB_DUPSORT`: an entry that exists already is then not put again
    /// (`MDB_NODUPDATA`); otherwise its value is replaced.
    private let duplicates: Bool

    init(lastOf dbi: MDB_dbi, in txn: LMDBTransaction, duplicates: Bool) throws {
        self.duplicates = duplicates
        let cursor = try txn.cursor(dbi)
        defer { cursor.close() }
        if let (key, value) = try cursor.get(MDB_LAST) {
            self.key = Array(key)
            self.value = Array(value)
        }
    }

    mutating func put(_ k: UnsafeRawBufferPointer, _ v: UnsafeRawBufferPointer, into dbi: MDB_dbi, in txn: LMDBTransaction) throws {
        let flags: Int32
        if let key {
            switch Self.compare(k, key) {
            case 1: flags = MDB_APPEND
            case 0 where duplicates && Self.compare(v, value) == 1: flags = MDB_APPENDDUP
            default: flags = 0
            }
        } else {
            flags = MDB_APPEND
        }
        // LMDB refuses an append that is not past the end: the plain put then stores it (or finds it there).
        let plain = duplicates ? MDB_NODUPDATA : 0
        let appended = try flags != 0 && txn.put(dbi, k, v, flags: plain | flags)
        if !appended {
            try txn.put(dbi, k, v, flags: plain)
            return
        }
        key = Array(k)
        value = Array(v)
    }

    /// memcmp order, shorter first on a common prefix (LMDB's default order).
    static func compare(_ a: UnsafeRawBufferPointer, _ b: [UInt8]) -> Int {
        for (x, y) in zip(a, b) where x != y { return x < y ? -1 : 1 }
        return a.count == b.count ? 0 : (a.count < b.count ? -1 : 1)
    }
}

/// Reads and writes in one LMDB transaction.
struct LMDBAccess: EngineReader, EngineWriter {
    let txn: LMDBTransaction
    let db: LMDBEngine.Databases
    /// The recent-change regions (nil in a format-2 store).
    let recent: RecentRegions?
    /// The record dictionary as this transaction sees it (``StoredRecordDictionary``).
    let storedForms = StoredRecordDictionaryCell()

    /// A read transaction of this one's snapshot (``LMDBEnvironment/read(atSnapshot:_:)``); not
    /// for a write transaction or a view over the writer's regions, which no other transaction sees.
    func readingSameSnapshot<T>(_ body: (any EngineReader) throws -> T) throws -> T? {
        guard recent?.cache == nil else { return nil }
        return try txn.environment.read(atSnapshot: UInt64(mdb_txn_id(txn.handle))) { peer in
            try body(LMDBAccess(txn: peer, db: db, recent: recent.map { RecentRegions(databases: $0.databases, cache: nil) }))
        }
    }

    static let vaultPrefix: UInt8 = 0x75  // "u"
    /// Legacy sealed UIDs (``SealedUID/legacy``, stored without the layout byte), after every `u`
    /// entry, as builds up to session 27 wrote them. Read, erased and copied (a migration of a
    /// legacy seal), never written for a new account.
    static let sealedPrefix: UInt8 = 0x76  // "v"
    /// Bound sealed UIDs (``SealedUID/bound``, stored with their layout byte), after every `u` and
    /// `v` entry so that new ones (position-ordered pseudonyms) are appended at the end of the tree
    /// and fill its pages. The key, not the value, tells the layouts apart.
    static let boundSealedPrefix: UInt8 = 0x77  // "w"
    /// Sealed UIDs as stores written by earlier binaries (main up to 2505f95, and format 1) hold them
    /// (legacy, without the layout byte): before the `u` entries, in the middle of the tree. Read and
    /// erased, never written.
    static let earlierSealedPrefix: UInt8 = 0x70  // "p"
    /// Every prefix a sealed UID is stored under.
    static let sealedPrefixes = [boundSealedPrefix, sealedPrefix, earlierSealedPrefix]

    /// A stored sealed UID under `prefix`, as the engine hands it up (``SealedUID``).
    static func sealedValue(prefix: UInt8, stored: UnsafeRawBufferPointer) -> [UInt8] {
        prefix == boundSealedPrefix ? Array(stored) : [SealedUID.legacy] + Array(stored)
    }

    static func u64(_ buffer: UnsafeRawBufferPointer) -> UInt64? {
        guard buffer.count == 8 else { return nil }
        return UInt64(bigEndian: buffer.loadUnaligned(as: UInt64.self))
    }

    func corrupt(_ what: String) -> LedgerStoreError { .corrupt(what) }

    // MARK: Head and metadata

    func head() throws -> LogHead {
        guard let value = try meta(LMDBEngine.headKey) else { return LogHead() }
        return try Self.decodeHead(value)
    }

    static func encodeHead(_ head: LogHead) -> [UInt8] {
        var w = ByteWriter(capacity: 56 + 32 * head.frontier.count)
        w.u64(head.sequence)
        w.digest(head.chainHash)
        w.i64(head.recordedAt)
        for node in head.frontier { w.digest(node) }
        return w.output
    }

    static func decodeHead(_ value: [UInt8]) throws -> LogHead {
        do {
            return try ByteReader.reading(value) { r throws(DecodingFailure) in
                var head = LogHead(sequence: try r.u64(), chainHash: try r.digest(), recordedAt: try r.i64())
                guard r.remaining == 32 * head.sequence.nonzeroBitCount else {
                    throw DecodingFailure("the Merkle frontier has \(r.remaining) bytes for \(head.sequence) records")
                }
                while r.remaining > 0 { head.frontier.append(try r.digest()) }
                return head
            }
        } catch {
            throw LedgerStoreError.corrupt("the head metadata is unreadable: \(error)")
        }
    }

    func meta(_ key: MetaKey) throws -> [UInt8]? { try meta(Array(key.rawValue.utf8)) }

    func meta(_ key: [UInt8]) throws -> [UInt8]? {
        try key.withUnsafeBytes { k in try txn.get(db.meta, k).map(Array.init) }
    }

    // MARK: Log

    func record(_ sequence: UInt64) throws -> [UInt8]? {
        var found: [UInt8]?
        try forEachRecord(from: sequence, through: sequence) { _, bytes in
            found = Array(bytes)
            return false
        }
        return found
    }

    /// Visits the records of the log from `from` through `through`: each log entry holds one record,
    /// or a block of consecutive ones keyed by its last (``LogBlock``).
    func forEachRecord(from: UInt64, through: UInt64, _ body: (UInt64, UnsafeRawBufferPointer) throws -> Bool) throws {
        guard from <= through else { return }
        let cursor = try txn.cursor(db.log)
        defer { cursor.close() }
        var scratch: [UInt8] = []
        var dictionary: StoredRecordDictionary?
        var entry = try KeyBuffer(from).with { k in try cursor.get(MDB_SET_RANGE, key: k) }
        while let (key, value) = entry {
            guard let last = Self.u64(key) else { throw corrupt("a log key of \(key.count) bytes") }
            var more = true
            do {
                try LogBlock.forEach(last: last, value) { sequence, stored in
                    guard sequence >= from else { return true }
                    guard sequence <= through else {
                        more = false
                        return false
                    }
                    more = try withCanonical(sequence, stored, scratch: &scratch, dictionary: &dictionary) { try body(sequence, $0) }
                    return more
                }
            } catch let damage as StoredFormDamage {
                throw corrupt("the log entry of record \(last) cannot be read: \(damage)")
            }
            guard more else { return }
            entry = try cursor.get(MDB_NEXT)
        }
    }

    /// Calls `body` with the canonical bytes of the record stored as `stored`: the stored bytes
    /// themselves, or their expansion into `scratch` when they are in stored form (with `dictionary`,
    /// loaded into it on first use). Every read of the log goes through here.
    func withCanonical<R>(
        _ sequence: UInt64, _ stored: UnsafeRawBufferPointer, scratch: inout [UInt8], dictionary: inout StoredRecordDictionary?,
        _ body: (UnsafeRawBufferPointer) throws -> R
    ) throws -> R {
        guard StoredRecordDictionary.isStoredForm(stored) else { return try body(stored) }
        if dictionary == nil { dictionary = try recordDictionary() }
        do {
            try dictionary?.expand(stored, into: &scratch)
        } catch {
            throw corrupt("record \(sequence) cannot be read: its stored form is damaged (\(error))")
        }
        return try scratch.withUnsafeBytes(body)
    }

    /// The record dictionary this transaction sees, loaded from `meta` on first use.
    func recordDictionary() throws -> StoredRecordDictionary {
        try storedForms.get {
            var stored: [(key: [UInt8], value: [UInt8])] = []
            let cursor = try txn.cursor(db.meta)
            defer { cursor.close() }
            let prefix = StoredRecordDictionary.metaPrefix
            var entry = try prefix.withUnsafeBytes { try cursor.get(MDB_SET_RANGE, key: $0) }
            while let (key, value) = entry, key.starts(with: prefix) {
                stored.append((Array(key), Array(value)))
                entry = try cursor.get(MDB_NEXT)
            }
            do {
                return try StoredRecordDictionary.load(stored)
            } catch {
                throw corrupt("the record dictionary in meta is damaged: \(error)")
            }
        }
    }

    /// Puts `records` into the log, each in stored form when it names a dictionary entry (learning
    /// the product ids of records that name none: new entries are written to `meta` beside them),
    /// consecutive records in blocks (``LogBlock``).
    func appendRecords(_ records: [(sequence: UInt64, bytes: [UInt8])]) throws {
        guard !records.isEmpty else { return }
        var dictionary = try recordDictionary()
        let before = dictionary.entries.count
        var stored: [(sequence: UInt64, bytes: [UInt8])] = []
        stored.reserveCapacity(records.count)
        for (sequence, canonical) in records {
            var form = dictionary.storedForm(of: canonical)
            if form == nil, !dictionary.learn(from: canonical).isEmpty { form = dictionary.storedForm(of: canonical) }
            stored.append((sequence, form ?? canonical))
        }
        for (last, value) in LogBlock.entries(stored) {
            _ = try KeyBuffer(last).with { k in
                try value.withUnsafeBytes { v in try txn.put(db.log, k, v, flags: MDB_APPEND) }
            }
        }
        guard dictionary.entries.count > before else { return }
        for k in before + 1...dictionary.entries.count {
            try putMeta(StoredRecordDictionary.metaKey(k), dictionary.entries[k - 1])
        }
        storedForms.set(dictionary)
    }

    func lastSequence(recordedAtOrBefore time: Timestamp) throws -> UInt64 {
        var low: UInt64 = 0  // recorded at or before `time` (0: none)
        var high = try head().sequence + 1  // recorded after (head + 1: none known)
        while high - low > 1 {
            let middle = low + (high - low) / 2
            guard let bytes = try record(middle) else { throw corrupt("record \(middle) is missing from the log") }
            guard let recorded = bytes.withUnsafeBytes({ RecordCodec.recordedAt(of: $0) }) else {
                throw corrupt("record \(middle) has no readable time")
            }
            if recorded <= time { low = middle } else { high = middle }
        }
        return low
    }

    // MARK: Indexes

    func latestRecords(of commands: [CommandRef]) throws -> [Key128: (sequence: UInt64, bytes: [UInt8])] {
        var out: [Key128: (sequence: UInt64, bytes: [UInt8])] = [:]
        let homeless = try txn.cursor(db.commands)
        defer { homeless.close() }
        let lineages = try txn.cursor(db.lineages)
        defer { lineages.close() }
        commands: for command in commands where out[command.key] == nil {
            if let home = command.home, let recent {
                // The region's entries are newer than the main tree's.
                for entry in try recentEntries(home.key, in: recent).reversed() where entry.command == command.key.high {
                    if let bytes = try record(entry.sequence), bytes.withUnsafeBytes({ RecordCodec.command(of: $0) }) == command.key {
                        out[command.key] = (entry.sequence, bytes)
                        continue commands
                    }
                }
            }
            // The latest entry whose prefix matches, resolved against each record's own key.
            var entry: (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)?
            let cursor = command.home == nil ? homeless : lineages
            if let home = command.home {
                entry = try KeyBuffer(home.key).with { k in try cursor.get(MDB_SET_KEY, key: k) }
            } else {
                entry = try KeyBuffer(command.key.high).with { k in try cursor.get(MDB_SET_KEY, key: k) }
            }
            guard entry != nil else { continue }
            entry = try cursor.get(MDB_LAST_DUP)
            while let (_, value) = entry {
                let sequence: UInt64
                if command.home == nil {
                    guard let found = Self.u64(value) else { throw corrupt("a commands entry of \(value.count) bytes") }
                    sequence = found
                } else {
                    guard value.count == Self.lineageEntryLength else { throw corrupt("a lineages entry of \(value.count) bytes") }
                    guard Self.commandPrefix(ofLineageEntry: value) == command.key.high else {
                        entry = try cursor.get(MDB_PREV_DUP)
                        continue
                    }
                    sequence = Self.sequence(ofLineageEntry: value)
                }
                if let bytes = try record(sequence), bytes.withUnsafeBytes({ RecordCodec.command(of: $0) }) == command.key {
                    out[command.key] = (sequence, bytes)
                    break
                }
                entry = try cursor.get(MDB_PREV_DUP)
            }
        }
        return out
    }

    /// A `lineages` value: the record's sequence (6 bytes) and its command key's first 8 bytes.
    static let lineageEntryLength = 14

    static func sequence(ofLineageEntry value: UnsafeRawBufferPointer) -> UInt64 {
        (0..<6).reduce(UInt64(0)) { $0 << 8 | UInt64(value[$1]) }
    }

    static func commandPrefix(ofLineageEntry value: UnsafeRawBufferPointer) -> UInt64 {
        UInt64(bigEndian: value.loadUnaligned(fromByteOffset: 6, as: UInt64.self))
    }

    func sequences(ofLineage lineage: LineageKey, through: UInt64) throws -> [UInt64] {
        var out: [UInt64] = []
        let cursor = try txn.cursor(db.lineages)
        defer { cursor.close() }
        var entry = try KeyBuffer(lineage.key).with { k in try cursor.get(MDB_SET_KEY, key: k) }
        while let (_, value) = entry {
            guard value.count == Self.lineageEntryLength else { throw corrupt("a lineages entry of \(value.count) bytes") }
            let sequence = Self.sequence(ofLineageEntry: value)
            guard sequence <= through else { break }
            out.append(sequence)
            entry = try cursor.get(MDB_NEXT_DUP)
        }
        if let recent {
            out += try recentEntries(lineage.key, in: recent).map(\.sequence).filter { $0 <= through }
            out.sort()
        }
        return out
    }

    func lineages(boundTo accounts: [AccountID]) throws -> [AccountID: [LineageKey]] {
        var out: [AccountID: [LineageKey]] = [:]
        let cursor = try txn.cursor(db.accountLineages)
        defer { cursor.close() }
        for account in accounts where out[account] == nil {
            var lineages: [LineageKey] = []
            var entry = try KeyBuffer(account.key).with { k in try cursor.get(MDB_SET_KEY, key: k) }
            while let (_, value) = entry {
                guard value.count == 24 else { throw corrupt("an account-lineages entry of \(value.count) bytes") }
                let lineage = LineageKey(Key128(loading: value, at: 0))
                if lineages.last != lineage { lineages.append(lineage) }
                entry = try cursor.get(MDB_NEXT_DUP)
            }
            out[account] = lineages
        }
        return out
    }

    func forEachEntry(of index: EngineIndex, _ body: (IndexEntry) throws -> Bool) throws {
        if index == .lineages, let recent {
            try forEachWithRecent(
                db.lineages, prefix: [], from: [], duplicates: true,
                overlay: { region in try recentOverlay(in: recent, region: region).lineageEntries.map { ($0.0, $0.1.bytes) } }
            ) { key, value in try body(Self.entry(index, key: key, value: value)) }
            return
        }
        let cursor = try txn.cursor(db.of(index))
        defer { cursor.close() }
        var entry = try cursor.get(MDB_FIRST)
        while let (key, value) = entry {
            guard try body(Self.entry(index, key: key, value: value)) else { return }
            entry = try cursor.get(MDB_NEXT)
        }
    }

    static func entry(_ index: EngineIndex, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> IndexEntry {
        switch index {
        case .commands:
            if key.count == 8, let sequence = u64(value) { return .command(Key128(high: u64(key) ?? 0, low: 0), sequence: sequence) }
        case .lineages:
            if key.count == 16, value.count == lineageEntryLength {
                return .lineage(
                    LineageKey(Key128(loading: key, at: 0)), sequence: sequence(ofLineageEntry: value),
                    command: Key128(high: commandPrefix(ofLineageEntry: value), low: 0))
            }
        case .accountLineages:
            if key.count == 16, value.count == 24 {
                return .accountLineage(
                    AccountID(Key128(loading: key, at: 0)), LineageKey(Key128(loading: value, at: 0)),
                    sequence: UInt64(bigEndian: value.loadUnaligned(fromByteOffset: 16, as: UInt64.self)))
            }
        case .merkle:
            if key.count == 9, value.count == 32 {
                return .merkleNode(
                    level: key[0], index: UInt64(bigEndian: key.loadUnaligned(fromByteOffset: 1, as: UInt64.self)),
                    hash: Digest32(loading: value, at: 0))
            }
        }
        return .malformed(index, key: Array(key), value: Array(value))
    }

    func normalized(_ entry: IndexEntry) -> IndexEntry {
        switch entry {
        case .command(let key, let sequence): .command(Key128(high: key.high, low: 0), sequence: sequence)
        case .lineage(let lineage, let sequence, let command): .lineage(lineage, sequence: sequence, command: Key128(high: command.high, low: 0))
        default: entry
        }
    }

    /// The LMDB key and value of an entry.
    @discardableResult
    static func withKeyValue<R>(_ entry: IndexEntry, _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch entry {
        case .command(let key, let sequence):
            return try KeyBuffer(key.high).with { k in try KeyBuffer(sequence).with { v in try body(k, v) } }
        case .lineage(let lineage, let sequence, let command):
            var value = KeyBuffer()
            value.append(u48: sequence)
            value.append(command.high)
            return try KeyBuffer(lineage.key).with { k in try value.with { v in try body(k, v) } }
        case .accountLineage(let account, let lineage, let sequence):
            var value = KeyBuffer(lineage.key)
            value.append(sequence)
            return try KeyBuffer(account.key).with { k in try value.with { v in try body(k, v) } }
        case .merkleNode(let level, let index, let hash):
            var key = KeyBuffer()
            key.append(level)
            key.append(index)
            return try key.with { k in try hash.withBytes { v in try body(k, v) } }
        case .malformed(_, let key, let value):
            return try key.withUnsafeBytes { k in try value.withUnsafeBytes { v in try body(k, v) } }
        }
    }

    func contains(_ entry: IndexEntry) throws -> Bool {
        let normal = normalized(entry)
        if case .lineage(let lineage, let sequence, let command) = normal, let recent,
            try recentEntries(lineage.key, in: recent).contains(LineageEntryValue(sequence: sequence, command: command.high))
        {
            return true
        }
        let dbi = db.of(normal.index)
        return try Self.withKeyValue(normal) { key, value in
            if case .merkleNode = normal {
                guard let stored = try txn.get(dbi, key) else { return false }
                return stored.elementsEqual(value)
            }
            let cursor = try txn.cursor(dbi)
            defer { cursor.close() }
            return try cursor.get(MDB_GET_BOTH, key: key, value: value) != nil
        }
    }

    // MARK: Read models

    /// The bytes stored for the read model `value` under `key`: a lineage's (`L`) in stored form
    /// when it names a product id of the record dictionary (its flags byte, which ``ReadModel`` keeps
    /// under 0x80, with bit 7 set, then the rest with the product id replaced by its two-byte
    /// reference; ``StoredRecordDictionary/storedForm(of:header:)``), every other as it is.
    func storedReadModel(key: [UInt8], value: [UInt8]) throws -> [UInt8] {
        guard key.first == ReadModel.lineagePrefix else { return value }
        return try recordDictionary().storedForm(of: value, header: 1) ?? value
    }

    /// The read model stored as `stored` under `key` (the inverse of ``storedReadModel(key:value:)``).
    func canonicalReadModel(key: UnsafeRawBufferPointer, stored: UnsafeRawBufferPointer) throws -> [UInt8] {
        var scratch: [UInt8] = []
        var dictionary: StoredRecordDictionary?
        return try withCanonicalReadModel(key: key, stored: stored, scratch: &scratch, dictionary: &dictionary) { Array($0) }
    }

    /// Calls `body` with the read model stored as `stored` under `key`: the stored bytes themselves,
    /// or their expansion into `scratch` (with `dictionary`, loaded into it on first use). Every read
    /// of `read-models` goes through here.
    func withCanonicalReadModel<R>(
        key: UnsafeRawBufferPointer, stored: UnsafeRawBufferPointer, scratch: inout [UInt8], dictionary: inout StoredRecordDictionary?,
        _ body: (UnsafeRawBufferPointer) throws -> R
    ) throws -> R {
        guard key.first == ReadModel.lineagePrefix, let flags = stored.first, flags & 0x80 != 0 else { return try body(stored) }
        if dictionary == nil { dictionary = try recordDictionary() }
        do {
            try dictionary?.expand(stored, header: 1, into: &scratch)
        } catch {
            throw corrupt("the read model of lineage \(Array(key.dropFirst()).hex) cannot be read: its stored form is damaged (\(error))")
        }
        return try scratch.withUnsafeBytes(body)
    }

    func lineageStates(_ lineages: [LineageKey]) throws -> [LineageKey: LineageState] {
        var out: [LineageKey: LineageState] = [:]
        for lineage in lineages where out[lineage] == nil {
            let recentModel = try recent.flatMap { try recentReadModel(lineage.key, in: $0) }
            guard
                let value = try KeyBuffer(ReadModel.lineagePrefix, lineage.key).with({ k in
                    if let recentModel { return try canonicalReadModel(key: k, stored: recentModel) }
                    return try txn.get(db.readModels, k).map { try canonicalReadModel(key: k, stored: $0) }
                })
            else { continue }
            do {
                out[lineage] = try ReadModel.decodeLineage(value)
            } catch {
                throw corrupt("the persisted state of lineage \(lineage): \(error)")
            }
        }
        return out
    }

    func deletedAccounts(among accounts: [AccountID]) throws -> Set<AccountID> {
        var out = Set<AccountID>()
        for account in accounts where try KeyBuffer(ReadModel.deletedPrefix, account.key).with({ try txn.get(db.readModels, $0) }) != nil {
            out.insert(account)
        }
        return out
    }

    func staff() throws -> [StaffID: StaffMember] {
        var state = LedgerState()
        var entries: [([UInt8], [UInt8])] = []
        try forEachReadModel(from: [ReadModel.staffPrefix]) { key, value in
            guard key.first == ReadModel.staffPrefix else { return false }
            entries.append((key, value))
            return true
        }
        do {
            try ReadModel.load(entries, into: &state)
        } catch {
            throw corrupt("the persisted staff roster: \(error)")
        }
        return state.staff
    }

    func transferCases(_ ids: [String]) throws -> [String: TransferCase] {
        var state = LedgerState()
        for id in ids {
            let key = ReadModel.transferKey(id)
            guard let value = try key.withUnsafeBytes({ try txn.get(db.readModels, $0).map(Array.init) }) else { continue }
            do {
                try ReadModel.load([(key, value)], into: &state)
            } catch {
                throw corrupt("the persisted transfer case \(id): \(error)")
            }
        }
        return state.transfers
    }

    func forEachReadModel(from start: [UInt8], _ body: ([UInt8], [UInt8]) throws -> Bool) throws {
        try forEachReadModelBytes(from: start) { key, value in try body(Array(key), Array(value)) }
    }

    func forEachReadModelBytes(from start: [UInt8], _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool) throws {
        var scratch: [UInt8] = []
        var dictionary: StoredRecordDictionary?
        if let recent {
            try forEachWithRecent(
                db.readModels, prefix: [ReadModel.lineagePrefix], from: start, duplicates: false,
                overlay: { region in try recentOverlay(in: recent, region: region).readModels.map { ($0.0, $0.1) } }
            ) { key, stored in try withCanonicalReadModel(key: key, stored: stored, scratch: &scratch, dictionary: &dictionary, { try body(key, $0) })
            }
            return
        }
        let cursor = try txn.cursor(db.readModels)
        defer { cursor.close() }
        var entry = try start.isEmpty ? cursor.get(MDB_FIRST) : start.withUnsafeBytes { try cursor.get(MDB_SET_RANGE, key: $0) }
        while let (key, stored) = entry {
            guard try withCanonicalReadModel(key: key, stored: stored, scratch: &scratch, dictionary: &dictionary, { try body(key, $0) })
            else { return }
            entry = try cursor.get(MDB_NEXT)
        }
    }

    // MARK: Vault and Merkle nodes

    func identities(vaultKeys: [Key128]) throws -> [Key128: VaultEntry] {
        var out: [Key128: VaultEntry] = [:]
        for vaultKey in vaultKeys where out[vaultKey] == nil {
            if let recent, let account = try recentVault(vaultKey, in: recent) {
                out[vaultKey] = VaultEntry(account: account, sealedUID: try sealedUID(of: account))
                continue
            }
            let found = try KeyBuffer(Self.vaultPrefix, vaultKey).with { k -> AccountID? in
                guard let value = try txn.get(db.identities, k) else { return nil }
                guard value.count == 16 else { throw corrupt("an identity entry of \(value.count) bytes") }
                return AccountID(Key128(loading: value, at: 0))
            }
            if let found { out[vaultKey] = VaultEntry(account: found, sealedUID: try sealedUID(of: found)) }
        }
        return out
    }

    func sealedUID(of account: AccountID) throws -> [UInt8]? {
        for prefix in Self.sealedPrefixes {
            if let sealed = try KeyBuffer(prefix, account.key).with({ k in
                try txn.get(db.identities, k).map { Self.sealedValue(prefix: prefix, stored: $0) }
            }) {
                return sealed
            }
        }
        return nil
    }

    func forEachVaultEntry(from start: Key128, _ body: (Key128, VaultEntry) throws -> Bool) throws {
        let first = [Self.vaultPrefix] + start.bytes
        if let recent {
            try forEachWithRecent(
                db.identities, prefix: [Self.vaultPrefix], from: first, duplicates: false,
                overlay: { region in try recentOverlay(in: recent, region: region).vault.map { ($0.0, $0.1.bytes) } }
            ) { key, value in
                guard key.first == Self.vaultPrefix else { return false }
                guard key.count == 17, value.count == 16 else { throw corrupt("an identity entry of \(key.count) and \(value.count) bytes") }
                let account = AccountID(Key128(loading: value, at: 0))
                return try body(Key128(loading: key, at: 1), VaultEntry(account: account, sealedUID: try sealedUID(of: account)))
            }
            return
        }
        let cursor = try txn.cursor(db.identities)
        defer { cursor.close() }
        var entry = try first.withUnsafeBytes { try cursor.get(MDB_SET_RANGE, key: $0) }
        while let (key, value) = entry, key.first == Self.vaultPrefix {
            guard key.count == 17, value.count == 16 else { throw corrupt("an identity entry of \(key.count) and \(value.count) bytes") }
            let account = AccountID(Key128(loading: value, at: 0))
            guard try body(Key128(loading: key, at: 1), VaultEntry(account: account, sealedUID: try sealedUID(of: account))) else { return }
            entry = try cursor.get(MDB_NEXT)
        }
    }

    /// The `p` entries, then (past the `u` entries) the `v` and `w` entries.
    func forEachSealedUID(_ body: (AccountID, [UInt8]) throws -> Bool) throws {
        let cursor = try txn.cursor(db.identities)
        defer { cursor.close() }
        var entry = try cursor.get(MDB_FIRST)
        while let (key, value) = entry {
            if key.first == Self.vaultPrefix {
                entry = try [Self.sealedPrefix].withUnsafeBytes { try cursor.get(MDB_SET_RANGE, key: $0) }
                continue
            }
            guard key.count == 17, let prefix = key.first, Self.sealedPrefixes.contains(prefix) else {
                throw corrupt("an identities entry of no known kind (a \(key.count)-byte key beginning \(Array(key.prefix(1)).hex))")
            }
            guard try body(AccountID(Key128(loading: key, at: 1)), Self.sealedValue(prefix: prefix, stored: value)) else { return }
            entry = try cursor.get(MDB_NEXT)
        }
    }

    /// Entries in `identities` (vault entries and sealed UIDs), with the regions' new vault entries counted.
    func vaultEntryCount() throws -> Int { try entryCount(db.identities, prefix: Self.vaultPrefix) { $0.vault.map(\.0) } }

    /// The entries of `dbi`, and the keys `regionKeys` finds in a region that `dbi` does not hold yet
    /// (under `prefix`).
    private func entryCount(_ dbi: MDB_dbi, prefix: UInt8, regionKeys: (RecentOverlay) -> [Key128]) throws -> Int {
        var count = try txn.statistics(dbi).entries
        guard let recent else { return count }
        for region in 0..<Recent.regionCount {
            for key in regionKeys(try recentOverlay(in: recent, region: region))
            where try KeyBuffer(prefix, key).with({ try txn.get(dbi, $0) }) == nil {
                count += 1
            }
        }
        return count
    }

    func merkleNode(level: UInt8, index: UInt64) throws -> Digest32? {
        var key = KeyBuffer()
        key.append(level)
        key.append(index)
        return try key.with { k -> Digest32? in
            guard let value = try txn.get(db.merkle, k) else { return nil }
            guard value.count == 32 else { throw corrupt("a Merkle node of \(value.count) bytes") }
            return Digest32(loading: value, at: 0)
        }
    }

    /// The `read-models` entries and the lineages whose read model is only in their region yet.
    func readModelCount() throws -> Int { try entryCount(db.readModels, prefix: ReadModel.lineagePrefix) { $0.readModels.map(\.0) } }

    /// Each main database's entries and bytes, then the recent-change regions' together (`recent`).
    func statistics() throws -> [(name: String, entries: Int, bytes: Int)] {
        var out = try LMDBEngine.mainSpecs.map { spec in
            let stat = try txn.statistics(try txn.environment.require(spec.name))
            return (spec.name, stat.entries, stat.bytes)
        }
        if let recent {
            let stats = try recent.databases.map { try txn.statistics($0) }
            out.append(("recent", stats.map(\.entries).reduce(0, +), stats.map(\.bytes).reduce(0, +)))
        }
        return out
    }

    // MARK: Writing

    func apply(_ batch: EngineBatch) throws {
        // A commit's `lineages` entries, lineage read models and vault entries go to the recent-change
        // regions (``Recent``). A batch without records (a repair's, the metadata's) or larger than
        // ``Recent/directLimit`` (an upgrade's, a migration's) goes straight into the main trees, after
        // every region has been merged.
        let size = batch.entries.count + batch.lineageStates.count + batch.vaultInserts.count + batch.vaultErasures.count
        let regions = batch.records.isEmpty || size > Recent.directLimit ? nil : recent
        // Written straight, a key the regions hold would be shadowed by its older changes there.
        if regions == nil, size > 0 { try mergeAllRecent() }
        var changes: [RecentChange] = []
        try appendRecords(batch.records)
        // Each index's entries in key order: a commit's puts then walk each tree left to right, and
        // entries sharing a leaf are put one after another while it is in cache. The order changes
        // nothing stored (duplicates are kept sorted by value; every put is an insertion), except
        // for Merkle nodes, which keep the batch's order.
        var accountLineagesEnd = try AppendPosition(lastOf: db.accountLineages, in: txn, duplicates: true)
        for normal in Self.inKeyOrder(batch.entries.map(normalized)) {
            if regions != nil, case .lineage(let lineage, let sequence, let command) = normal {
                changes.append(
                    RecentChange(kind: .lineageEntry, key: lineage.key, fixed: LineageEntryValue(sequence: sequence, command: command.high).buffer))
                continue
            }
            let dbi = db.of(normal.index)
            try Self.withKeyValue(normal) { k, v in
                switch normal {
                case .merkleNode: try txn.put(dbi, k, v)
                case .accountLineage: try accountLineagesEnd.put(k, v, into: dbi, in: txn)
                default: try txn.put(dbi, k, v, flags: MDB_NODUPDATA)
                }
            }
        }
        if let head = batch.head { try putMeta(LMDBEngine.headKey, Self.encodeHead(head)) }
        let dictionary = try recordDictionary()
        for (lineage, state) in batch.lineageStates {
            let canonical = ReadModel.encode(state)
            let value = dictionary.storedForm(of: canonical, header: 1) ?? canonical
            if regions != nil {
                changes.append(RecentChange(kind: .readModel, key: lineage.key, readModel: value))
                continue
            }
            try KeyBuffer(ReadModel.lineagePrefix, lineage.key).with { k in
                try value.withUnsafeBytes { v in try txn.put(db.readModels, k, v) }
            }
        }
        for account in batch.deletedAccounts {
            try KeyBuffer(ReadModel.deletedPrefix, account.key).with { k in
                try txn.put(db.readModels, k, UnsafeRawBufferPointer(start: nil, count: 0))
            }
        }
        var roster = LedgerState()
        for (staff, member) in batch.staff {
            if let member {
                roster.staff = [staff: member]
                try putReadModelsDirectly(Array(ReadModel.entries(of: roster).map { ($0.key, $0.value) }))
            } else {
                try removeReadModelsDirectly([ReadModel.staffKey(staff)])
            }
        }
        var cases = LedgerState()
        for (caseId, transfer) in batch.transferCases {
            cases.transfers = [caseId: transfer]
            try putReadModelsDirectly(Array(ReadModel.entries(of: cases).map { ($0.key, $0.value) }))
        }
        // Erasures before insertions: a UID deleted and then used again in one group keeps its new mapping.
        for erasure in batch.vaultErasures {
            if let regions { try eraseRecentVault(erasure.vaultKey, in: regions) }
            try KeyBuffer(Self.vaultPrefix, erasure.vaultKey).with { k in try txn.delete(db.identities, k) }
            for prefix in Self.sealedPrefixes {
                try KeyBuffer(prefix, erasure.account.key).with { k in try txn.delete(db.identities, k) }
            }
        }
        for insert in batch.vaultInserts where regions == nil {
            try KeyBuffer(Self.vaultPrefix, insert.vaultKey).with { k in
                try insert.account.key.withBytes { v in try txn.put(db.identities, k, v) }
            }
        }
        // Sealed UIDs in key order (the batch's order among equal keys, so the last wins): bound
        // seals under `w` with their layout byte, legacy ones (a migration's copy) under `v` without.
        func sealedKey(_ index: Int) throws -> (prefix: UInt8, stored: ArraySlice<UInt8>) {
            let sealed = batch.vaultInserts[index].sealedUID
            switch sealed.first {
            case SealedUID.bound: return (Self.boundSealedPrefix, sealed[...])
            case SealedUID.legacy: return (Self.sealedPrefix, sealed.dropFirst())
            default: throw corrupt("a sealed UID of no known layout to store (\(Array(sealed.prefix(1)).hex))")
            }
        }
        var sealedEnd = try AppendPosition(lastOf: db.identities, in: txn, duplicates: false)
        let keyed = try batch.vaultInserts.indices.map { (index: $0, key: try sealedKey($0)) }
        let sealedOrder = keyed.sorted { a, b in
            (a.key.prefix, batch.vaultInserts[a.index].account.key, a.index) < (b.key.prefix, batch.vaultInserts[b.index].account.key, b.index)
        }
        for (index, key) in sealedOrder {
            try KeyBuffer(key.prefix, batch.vaultInserts[index].account.key).with { k in
                try key.stored.withUnsafeBytes { v in try sealedEnd.put(k, v, into: db.identities, in: txn) }
            }
        }
        if let regions {
            for insert in batch.vaultInserts {
                changes.append(RecentChange(kind: .vaultPut, key: insert.vaultKey, fixed: KeyBuffer(insert.account.key)))
            }
            try appendRecent(changes, in: regions)
        }
        for (key, value) in batch.meta { try putMeta(Array(key.rawValue.utf8), value) }
    }

    /// `entries` (normalized) with the `commands`, `lineages` and `account-lineages` entries sorted by
    /// index, key and value, as LMDB orders them, followed by every other entry in its own order.
    static func inKeyOrder(_ entries: [IndexEntry]) -> [IndexEntry] {
        typealias Order = (index: Int, key: Key128, value: Key128)
        func order(_ entry: IndexEntry) -> Order? {
            switch entry {
            case .command(let key, let sequence): (0, Key128(high: key.high, low: 0), Key128(high: sequence, low: 0))
            case .lineage(let lineage, let sequence, let command): (1, lineage.key, Key128(high: sequence, low: command.high))
            case .accountLineage(let account, let lineage, _): (2, account.key, lineage.key)
            case .merkleNode, .malformed: nil
            }
        }
        var sorted: [(Order, IndexEntry)] = []
        var others: [IndexEntry] = []
        sorted.reserveCapacity(entries.count)
        for entry in entries {
            if let order = order(entry) { sorted.append((order, entry)) } else { others.append(entry) }
        }
        sorted.sort { a, b in (a.0.index, a.0.key, a.0.value) < (b.0.index, b.0.key, b.0.value) }
        return sorted.map(\.1) + others
    }

    func putMeta(_ key: [UInt8], _ value: [UInt8]) throws {
        try key.withUnsafeBytes { k in try value.withUnsafeBytes { v in _ = try txn.put(db.meta, k, v) } }
    }

    func remove(_ entries: [IndexEntry]) throws {
        try mergeAllRecent()
        for entry in entries {
            let normal = normalized(entry)
            let dbi = db.of(normal.index)
            try Self.withKeyValue(normal) { k, v in
                switch normal {
                case .merkleNode: try txn.delete(dbi, k)
                case .malformed(let index, _, _) where index == .merkle: try txn.delete(dbi, k)
                default: try txn.delete(dbi, k, value: v)
                }
            }
        }
    }

    func removeReadModels(_ keys: [[UInt8]]) throws {
        try mergeAllRecent()
        try removeReadModelsDirectly(keys)
    }

    func putReadModels(_ entries: [([UInt8], [UInt8])]) throws {
        try mergeAllRecent()
        try putReadModelsDirectly(entries)
    }

    /// Removes from `read-models` itself: keys the regions never hold, or with the regions merged.
    func removeReadModelsDirectly(_ keys: [[UInt8]]) throws {
        for key in keys { try key.withUnsafeBytes { k in _ = try txn.delete(db.readModels, k) } }
    }

    /// Puts into `read-models` itself: keys the regions never hold, or with the regions merged.
    func putReadModelsDirectly(_ entries: [([UInt8], [UInt8])]) throws {
        for (key, value) in entries {
            let stored = try storedReadModel(key: key, value: value)
            try key.withUnsafeBytes { k in try stored.withUnsafeBytes { v in _ = try txn.put(db.readModels, k, v) } }
        }
    }
}

func u32(_ bytes: [UInt8]) -> UInt32? {
    guard bytes.count == 4 else { return nil }
    return try? ByteReader.reading(bytes) { r throws(DecodingFailure) in try r.u32() }
}

func u32Bytes(_ value: UInt32) -> [UInt8] {
    var w = ByteWriter()
    w.u32(value)
    return w.output
}

func u64Bytes(_ value: UInt64) -> [UInt8] {
    var w = ByteWriter()
    w.u64(value)
    return w.output
}

extension LedgerStore {
    /// The LMDB engine of a store directory (`compact` and tests reach below the engine interface).
    var lmdbEngine: LMDBEngine {
        get throws {
            guard let engine = engine as? LMDBEngine else { throw LedgerStoreError.corrupt("\(location) is not an LMDB store") }
            return engine
        }
    }
}
