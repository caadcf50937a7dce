import Foundation
public import LedgerCore
import Projections

/// The storage engine behind a ledger: an append-only log of record bytes, the indexes over it,
/// the persisted read models, the identity vault and the Merkle nodes, read in snapshots and written
/// in groups. Record encoding, hashing, Merkle nodes, idempotency and deciding live above it, once
/// (`LedgerStore`, `OwnershipLedger`); an engine only stores and finds bytes and entries.
///
/// A write group follows the same shape for every engine: compute the keys it needs, load them in a
/// few batch reads (``EngineReader``'s methods take lists), decide in memory, then hand one
/// ``EngineBatch`` to ``EngineWriter/apply(_:)`` and commit once. LMDB (``LMDBEngine``) answers each
/// batch read from its B-trees in the write transaction; a server engine answers it in one round trip.
public protocol LedgerEngine: AnyObject, Sendable {
    /// Runs `body` on a consistent snapshot. Any number at once, on any threads; never waits for a writer.
    func read<T>(_ body: (any EngineReader) throws -> T) throws -> T

    /// Runs one write group: `body` reads (seeing the state at the start of the group, then its own
    /// writes) and writes through the writer; everything commits atomically when `body` returns, or
    /// nothing when it throws. `body` may run again (an engine may retry), so it must have no effect
    /// outside the group. Write groups are serialised, across processes.
    func write<T>(_ body: (any EngineReader, any EngineWriter) throws -> T) throws -> T

    /// ``write(_:)`` for a writer that holds its answers until the group is durable
    /// (``durability``): the engine may return once the group is committed and visible, before it
    /// is durable. An engine whose commits are durable when they return just writes (the default).
    func writeDeferringSync<T>(_ body: (any EngineReader, any EngineWriter) throws -> T) throws -> T

    /// Write groups committed and write groups durable, as this process counts them; nil for an
    /// engine whose commits are durable when they return (the default).
    var durability: EngineDurability? { get }

    /// Makes every committed write group durable (nothing to do by default).
    func sync() throws

    /// The store format of the engine's layout (``LedgerStore/formatVersion`` by default).
    var formatVersion: UInt32 { get }

    func write<T>(_ body: (any EngineReader, any EngineWriter) throws -> T, whenApplied: (ReadAheadView) -> Void) throws -> T
    func readAhead<T>(_ view: ReadAheadView, _ body: (any EngineReader) throws -> T) throws -> T?
    func follows(_ view: ReadAheadView) -> Bool
}

/// Deciding the next write group while this one commits (``LedgerEngine/write(_:whenApplied:)``).
extension LedgerEngine {
    /// ``write(_:)``, calling `whenApplied` after `body` and before the commit with a view for deciding
    /// the next group meanwhile (``readAhead(_:_:)``); an engine without one just writes.
    public func write<T>(_ body: (any EngineReader, any EngineWriter) throws -> T, whenApplied: (ReadAheadView) -> Void) throws -> T {
        try write(body)
    }

    /// Runs `body` on the committed store as the group `view` was captured in leaves it, the group
    /// itself excepted (whether or not its commit is visible yet): the caller reads that group's
    /// writes from its own batch (``OverlayReader``). Nil when the store has moved on since, or the
    /// engine cannot: decide in the next write group instead. A view is read ahead at most once.
    public func readAhead<T>(_ view: ReadAheadView, _ body: (any EngineReader) throws -> T) throws -> T? { nil }

    /// Inside a write group: whether it directly follows the group `view` was captured in (no other
    /// write group in between, in any process), so that what was decided ahead on the view holds.
    public func follows(_ view: ReadAheadView) -> Bool { false }
}

/// What ``LedgerEngine/readAhead(_:_:)`` needs of the write group it was captured in: LMDB's
/// transaction id and the writer's map of the recent-change regions, the regions it merged as they
/// were before.
public final class ReadAheadView: @unchecked Sendable {
    let transaction: UInt64
    let writes: UInt64
    private var regions: (views: [RecentCache.Region], loaded: [Bool], premerge: [(region: Int, view: RecentCache.Region)])?
    private let lock = NSLock()

    init(_ cache: RecentCache, transaction: UInt64) {
        self.transaction = transaction
        writes = cache.writes
        regions = (cache.regions, Array(cache.loaded), cache.premerge)
    }

    /// The regions, once: the tables are the writer's own, shared until released.
    func takeRegions() -> (views: [RecentCache.Region], loaded: [Bool], premerge: [(region: Int, view: RecentCache.Region)])? {
        lock.withLock {
            defer { regions = nil }
            return regions
        }
    }
}

extension LedgerEngine {
    public func writeDeferringSync<T>(_ body: (any EngineReader, any EngineWriter) throws -> T) throws -> T { try write(body) }
    public var formatVersion: UInt32 { LedgerStore.formatVersion }
    public var durability: EngineDurability? { nil }
    public func sync() throws {}
}

/// How far an engine's write groups are committed and durable, by an increasing count of groups:
/// every group counted up to ``durable`` is durable.
public struct EngineDurability: Equatable, Sendable {
    /// The last write group committed (visible to readers).
    public var committed: UInt64
    /// Every write group up to this one is durable.
    public var durable: UInt64

    public init(committed: UInt64, durable: UInt64) {
        self.committed = committed
        self.durable = durable
    }
}

/// The log's head as the engine keeps it (written with every group).
public struct LogHead: Equatable, Sendable {
    /// The last sequence number (0 for an empty log).
    public var sequence: UInt64
    /// Its chain hash (zero for an empty log).
    public var chainHash: Digest32
    /// Its `recordedAt` (0 for an empty log): the next record is never recorded earlier.
    public var recordedAt: Timestamp
    /// The Merkle tree's right edge: the roots of the perfect subtrees the first `sequence` leaves
    /// decompose into, largest first (one per bit of `sequence`).
    public var frontier: [Digest32]

    public init(sequence: UInt64 = 0, chainHash: Digest32 = .zero, recordedAt: Timestamp = 0, frontier: [Digest32] = []) {
        self.sequence = sequence
        self.chainHash = chainHash
        self.recordedAt = recordedAt
        self.frontier = frontier
    }
}

/// The derived indexes: each entry is implied by one record, so `verify` checks and `rebuild`
/// repairs them from the log alone.
public enum EngineIndex: String, CaseIterable, Sendable {
    /// Command key → the sequence of each record of the command (the latest attempt last), for
    /// commands without a home lineage (``Record/homeLineage``). An engine may keep only a prefix of the
    /// key and resolve it against the record's own (LMDB keeps 8 bytes).
    case commands
    /// Lineage → the sequence of each record that names it (or a transfer case of it), with the
    /// record's command key: a command with a home lineage is found among that lineage's entries.
    case lineages
    /// Account → each lineage ever bound to it (by a binding or as a transfer's target), with the
    /// sequence of the record that bound it.
    case accountLineages = "account-lineages"
    /// (level, index) → the root of each perfect subtree of `MerkleLog.storedLeaves` leaves or more.
    case merkle
}

/// One entry of a derived index.
public enum IndexEntry: Hashable, Sendable {
    case command(Key128, sequence: UInt64)
    case lineage(LineageKey, sequence: UInt64, command: Key128)
    case accountLineage(AccountID, LineageKey, sequence: UInt64)
    case merkleNode(level: UInt8, index: UInt64, hash: Digest32)
    /// A stored entry of the wrong shape (found by a scan; only ever removed).
    case malformed(EngineIndex, key: [UInt8], value: [UInt8])

    public var index: EngineIndex {
        switch self {
        case .command: .commands
        case .lineage: .lineages
        case .accountLineage: .accountLineages
        case .merkleNode: .merkle
        case .malformed(let index, _, _): index
        }
    }

    /// The record the entry was derived from, when it names one.
    public var sequence: UInt64? {
        switch self {
        case .command(_, let sequence), .lineage(_, let sequence, _), .accountLineage(_, _, let sequence): sequence
        case .merkleNode, .malformed: nil
        }
    }
}

/// A command to look up: its key and its home lineage (``Record/homeLineage``), under which it is indexed.
public struct CommandRef: Hashable, Sendable {
    public var key: Key128
    public var home: LineageKey?
    public init(_ key: Key128, home: LineageKey?) {
        self.key = key
        self.home = home
    }
}

/// Keys of the engine's metadata.
public enum MetaKey: String, CaseIterable, Sendable {
    case formatVersion = "format-version"
    case readModelVersion = "read-model-version"
    case configuration
    case keyCheck = "key-check"
    case signingKey = "signing-key"
}

/// Everything one write group changes, applied atomically.
public struct EngineBatch: Sendable {
    /// Records to append, in order, each with the index entries it implies.
    public var records: [(sequence: UInt64, bytes: [UInt8])] = []
    public var entries: [IndexEntry] = []
    /// The new head, when records were appended.
    public var head: LogHead?
    /// Read models: a lineage's new state.
    public var lineageStates: [(LineageKey, LineageState)] = []
    public var deletedAccounts: [AccountID] = []
    /// A staff member's entry; nil removes it.
    public var staff: [(StaffID, StaffMember?)] = []
    public var transferCases: [(String, TransferCase)] = []
    /// Identity vault: the pseudonym of a new account, found by its vault key, with its sealed UID.
    public var vaultInserts: [(vaultKey: Key128, account: AccountID, sealedUID: [UInt8])] = []
    /// Identity vault: erase an account's mapping (its deletion).
    public var vaultErasures: [(vaultKey: Key128, account: AccountID)] = []
    public var meta: [(MetaKey, [UInt8])] = []

    public init() {}

    public var isEmpty: Bool {
        records.isEmpty && entries.isEmpty && head == nil && lineageStates.isEmpty && deletedAccounts.isEmpty && staff.isEmpty
            && transferCases.isEmpty && vaultInserts.isEmpty && vaultErasures.isEmpty && meta.isEmpty
    }
}

/// Reads inside a snapshot (or inside a write group, where it also sees the group's own writes).
/// Batch methods take lists so a server engine can answer each in one round trip.
public protocol EngineReader {
    func head() throws -> LogHead
    func meta(_ key: MetaKey) throws -> [UInt8]?

    /// The stored bytes of record `sequence`.
    func record(_ sequence: UInt64) throws -> [UInt8]?
    /// Visits stored records `from` through `through` in order until `body` returns false. The
    /// bytes are valid only during the call.
    func forEachRecord(from: UInt64, through: UInt64, _ body: (UInt64, UnsafeRawBufferPointer) throws -> Bool) throws
    /// The last sequence recorded at or before `time` (0 when none): a binary search on the
    /// non-decreasing `recordedAt`. O(log n) record reads.
    func lastSequence(recordedAtOrBefore time: Timestamp) throws -> UInt64

    /// For each command, its latest record (sequence and bytes), when it has one.
    func latestRecords(of commands: [CommandRef]) throws -> [Key128: (sequence: UInt64, bytes: [UInt8])]
    /// Announces the first reads of a write group: the latest records of `commands`, the vault entries
    /// of `vaultKeys` and the states of `lineages`. An engine may read them all at once (PostgreSQL:
    /// in the round trip that locks the head) and answer the calls that ask for them from what it
    /// read; the default does nothing.
    func prefetch(commands: [CommandRef], vaultKeys: [Key128], lineages: [LineageKey]) throws
    /// The sequences of the lineage's records through `through`, ascending.
    func sequences(ofLineage lineage: LineageKey, through: UInt64) throws -> [UInt64]
    /// For each account, every lineage ever bound to it.
    func lineages(boundTo accounts: [AccountID]) throws -> [AccountID: [LineageKey]]

    /// The persisted state of each lineage that has one.
    func lineageStates(_ lineages: [LineageKey]) throws -> [LineageKey: LineageState]
    /// Which of `accounts` were deleted.
    func deletedAccounts(among accounts: [AccountID]) throws -> Set<AccountID>
    /// The whole staff roster.
    func staff() throws -> [StaffID: StaffMember]
    func transferCases(_ ids: [String]) throws -> [String: TransferCase]

    /// The vault entries of these vault keys: the pseudonym each points to, with the UID sealed under
    /// that pseudonym (read together: a lookup confirms one against the other,
    /// ``LedgerStore/pseudonym(ofUID:in:)``).
    func identities(vaultKeys: [Key128]) throws -> [Key128: VaultEntry]
    /// The sealed UID of a live account.
    func sealedUID(of account: AccountID) throws -> [UInt8]?
    /// Visits the vault entries from vault key `start` on, in vault-key order, until `body` returns
    /// false: each one's vault key, the pseudonym it points to and the UID sealed under that pseudonym
    /// (nil when there is none: a damaged vault, which `verify` reports).
    func forEachVaultEntry(from start: Key128, _ body: (Key128, VaultEntry) throws -> Bool) throws
    /// Visits every sealed UID (pseudonym, sealed bytes) in the engine's order until `body` returns
    /// false, whether or not a vault entry points to it (`verify`). Throws on an entry of no known shape.
    func forEachSealedUID(_ body: (AccountID, [UInt8]) throws -> Bool) throws
    /// How many entries the vault holds: vault entries and sealed UIDs together (LMDB: every entry
    /// of `identities`). A consistent vault holds exactly two per live account.
    func vaultEntryCount() throws -> Int

    /// A stored Merkle node (levels from `MerkleLog.storedLevel` up).
    func merkleNode(level: UInt8, index: UInt64) throws -> Digest32?

    // MARK: Scans (verify and rebuild)

    /// Visits the entries of `index` in the engine's order (a fixed total order) until `body` returns false.
    func forEachEntry(of index: EngineIndex, _ body: (IndexEntry) throws -> Bool) throws
    /// Visits every persisted read-model entry (`ReadModel` keys and values) in key order from
    /// `start` until `body` returns false.
    func forEachReadModel(from start: [UInt8], _ body: ([UInt8], [UInt8]) throws -> Bool) throws
    /// ``forEachReadModel(from:_:)`` with each key and value lent for the call only (a scan that
    /// hashes them copies nothing per entry).
    func forEachReadModelBytes(from start: [UInt8], _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool) throws
    /// Whether the index holds `entry`.
    func contains(_ entry: IndexEntry) throws -> Bool
    /// `entry` as this engine stores it (LMDB keeps the first 8 bytes of a command key; the rest
    /// zero), so entries implied by records compare with stored ones.
    func normalized(_ entry: IndexEntry) -> IndexEntry

    /// Entries and bytes per database (or table).
    func statistics() throws -> [(name: String, entries: Int, bytes: Int)]
    /// The number of persisted read models (the `read-models` entries by default).
    func readModelCount() throws -> Int

    /// Runs `body` with a reader of its own on this reader's snapshot, for another thread to read
    /// while this reader is in use (a reader serves one thread at a time); may be called from that
    /// thread. Nil when the engine cannot give one (the default) or the store has moved on since.
    func readingSameSnapshot<T>(_ body: (any EngineReader) throws -> T) throws -> T?
}

/// Writes of a write group.
public protocol EngineWriter {
    /// Applies a batch: appends, index entries, read models, vault, metadata.
    func apply(_ batch: EngineBatch) throws
    /// Removes index entries (repairs).
    func remove(_ entries: [IndexEntry]) throws
    /// Removes persisted read-model entries (repairs).
    func removeReadModels(_ keys: [[UInt8]]) throws
    /// Stores read-model entries as given (repairs).
    func putReadModels(_ entries: [([UInt8], [UInt8])]) throws
}

/// A vault entry as stored: the pseudonym a vault key points to, and the UID sealed under that
/// pseudonym (nil when none is stored: a damaged vault). The two are kept apart (the sealed UIDs by
/// pseudonym), so nothing but a comparison ties them: ``LedgerStore/confirm(_:uid:)``.
public struct VaultEntry: Equatable, Sendable {
    public var account: AccountID
    public var sealedUID: [UInt8]?

    public init(account: AccountID, sealedUID: [UInt8]?) {
        self.account = account
        self.sealedUID = sealedUID
    }
}

extension EngineReader {
    public func prefetch(commands: [CommandRef], vaultKeys: [Key128], lineages: [LineageKey]) throws {}

    public func readingSameSnapshot<T>(_ body: (any EngineReader) throws -> T) throws -> T? { nil }

    /// Visits every vault entry (``forEachVaultEntry(from:_:)`` from the first).
    public func forEachVaultEntry(_ body: (Key128, VaultEntry) throws -> Bool) throws { try forEachVaultEntry(from: .zero, body) }

    public func readModelCount() throws -> Int { try statistics().first { $0.name == "read-models" }?.entries ?? 0 }

    /// Visits every vault entry (vault key, pseudonym, sealed UID) in vault-key order until `body`
    /// returns false (`migrate` copies the vault: it cannot be derived from the log). Throws when a
    /// pseudonym has no sealed UID.
    public func forEachIdentity(_ body: (Key128, AccountID, [UInt8]) throws -> Bool) throws {
        try forEachVaultEntry { vaultKey, entry in
            guard let sealed = entry.sealedUID else { throw LedgerStoreError.corrupt("pseudonym \(entry.account) has no sealed UID") }
            return try body(vaultKey, entry.account, sealed)
        }
    }

    public func forEachReadModelBytes(from start: [UInt8], _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) throws -> Bool) throws {
        try forEachReadModel(from: start) { key, value in
            try key.withUnsafeBytes { k in try value.withUnsafeBytes { v in try body(k, v) } }
        }
    }
}

/// `body` run at once on a thread of its own with a reader of `reader`'s snapshot
/// (``EngineReader/readingSameSnapshot(_:)``). ``wait()`` must return before `reader`'s transaction ends.
final class OnSameSnapshot<T>: @unchecked Sendable {
    private let reader: any EngineReader
    private let body: (any EngineReader) throws -> T
    private var outcome: Result<T?, any Error> = .success(nil)
    private let done = DispatchSemaphore(value: 0)

    init(_ reader: any EngineReader, _ body: @escaping (any EngineReader) throws -> T) {
        (self.reader, self.body) = (reader, body)
        Thread.detachNewThread { [self] in
            outcome = Result { try self.reader.readingSameSnapshot(self.body) }
            done.signal()
        }
    }

    /// Waits for the thread: what `body` returned or threw, or nil when the engine gave no reader of the snapshot.
    func wait() -> Result<T?, any Error> {
        done.wait()
        return outcome
    }
}

/// A sealed UID as the engines hand it up and take it down: a layout byte, then the AES-256-GCM seal
/// (nonce(12) ‖ ciphertext ‖ tag(16)) under the ledger's seal key (docs/storage-format.md, "The
/// identity vault").
///
/// - ``bound`` (1): sealed with associated data naming the pseudonym it is stored under
///   (``associatedData(_:)``), so it opens under no other pseudonym: a sealed UID moved with its vault
///   entry to another account fails authentication. Every seal written since 2026-12-02 (session 28).
///   Stored with its layout byte, where the engine tells it apart by its key (LMDB: `w` ‖ pseudonym)
///   or a column (PostgreSQL: `ledger_sealed_uids.bound`), never by its bytes.
/// - ``legacy`` (0): sealed without associated data by earlier builds (LMDB: `v` or `p` ‖ pseudonym;
///   PostgreSQL: `bound` false). Stored without the byte (a nonce can begin with any byte, which is
///   why the layouts are told apart by key or column); the engine adds it when reading. Still read,
///   erased and copied, never written by a new account; only the vault's consistency check
///   (``LedgerStore/vaultDifferences(_:)``) protects it.
public enum SealedUID {
    public static let legacy: UInt8 = 0
    public static let bound: UInt8 = 1
    /// The domain label before the pseudonym in a bound seal's associated data.
    public static let label = Array("ownership-ledger/identity-seal/pseudonym/v1".utf8)

    /// The associated data of a UID sealed under `account`: ``label`` ‖ 0 ‖ the pseudonym's 16 bytes.
    public static func associatedData(_ account: AccountID) -> [UInt8] {
        var data = label
        data.reserveCapacity(label.count + 17)
        data.append(0)
        account.key.withBytes { data.append(contentsOf: $0) }
        return data
    }
}
