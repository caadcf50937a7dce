import CLMDB
public import Foundation
public import LedgerCore
import LedgerCrypto
import Projections

/// An event to append: the store assigns its sequence number and hashes.
public struct PendingEvent: Equatable, Sendable {
    public var eventId: Digest32
    public var recordedAt: Timestamp
    public var event: LedgerEvent

    public init(eventId: Digest32, recordedAt: Timestamp, event: LedgerEvent) {
        self.eventId = eventId
        self.recordedAt = recordedAt
        self.event = event
    }
}

/// What an append did.
public struct AppendResult: Equatable, Sendable {
    /// The sequence numbers of the batch's events (the original ones when nothing was appended).
    public var sequences: [UInt64]
    /// False when every event had been appended before with the same content.
    public var appended: Bool
}

/// The append-only, hash-chained event log in one LMDB environment, with its indexes, persisted
/// read models and identity vault. Safe to share between threads of one process (transactions are
/// serialised) and between processes (LMDB's writer lock serialises appends).
public final class LedgerStore: @unchecked Sendable {
    /// The highest store format this code reads and the one it writes.
    public static let formatVersion: UInt32 = 1
    static let databaseNames = [
        Database.log, Database.eventIds, Database.lineages, Database.accounts, Database.meta, Database.readModels,
        Database.identities, Database.submissions,
    ]

    enum Database {
        static let log = "log"
        static let eventIds = "event-ids"
        static let lineages = "lineage-index"
        static let accounts = "account-index"
        static let meta = "meta"
        static let readModels = "read-models"
        static let identities = "identities"
        static let submissions = "submissions"
    }

    enum Meta {
        static let formatVersion = Array("format-version".utf8)
        static let headSequence = Array("head-sequence".utf8)
        static let headHash = Array("head-hash".utf8)
        static let readModelVersion = Array("read-model-version".utf8)
        static let configuration = Array("configuration".utf8)
        static let keyCheck = Array("key-check".utf8)
        /// SHA-256 of the raw Ed25519 public key of `ledger-signing.key` (see `SigningKey.swift`).
        static let signingKey = Array("signing-key".utf8)
    }

    /// Suffix of the key files `create` writes before renaming them into place.
    static let partialSuffix = ".partial"

    public let directory: URL
    public let keys: LedgerKeys
    let environment: LMDBEnvironment
    /// `ledger.lock`, held shared while the store is open (exclusive during `create` and `compact`).
    let lock: StoreLock

    /// Creates a new store in `directory` (created if needed): the key files, the LMDB environment
    /// and the metadata. `configuration` is kept opaque in the metadata for the layer above.
    ///
    /// The key files are written as `*.partial` and renamed into place only once the metadata
    /// transaction has committed, so an interrupted `create` leaves either a complete store or
    /// `.partial` files, which ``LedgerStoreError/incompleteInit(directory:detail:)`` reports (they
    /// are never deleted automatically).
    public static func create(at directory: URL, configuration: [UInt8]) throws -> LedgerStore {
        try create(at: directory, configuration: configuration, initialMapSize: LMDBEnvironment.defaultMapSize)
    }

    /// ``create(at:configuration:)`` with a map of `initialMapSize` bytes (tests grow small maps).
    static func create(at directory: URL, configuration: [UInt8], initialMapSize: Int) throws -> LedgerStore {
        try FileAccess.createDirectories(directory)
        let lock = try lockForCreating(directory)
        let keyFile = directory.appendingPathComponent(LedgerKeys.fileName)
        let signingKeyFile = directory.appendingPathComponent(SigningKey.fileName)
        let partialKeyFile = directory.appendingPathComponent(LedgerKeys.fileName + partialSuffix)
        let partialSigningKeyFile = directory.appendingPathComponent(SigningKey.fileName + partialSuffix)
        let keys = try LedgerKeys.create(at: partialKeyFile)
        let signingKey = try SigningKey.create(at: partialSigningKeyFile)
        let store = try LedgerStore(directory: directory, keys: keys, lock: lock, initialMapSize: initialMapSize)
        try store.environment.write { txn in
            try txn.put(Database.meta, Meta.formatVersion, u32Bytes(formatVersion))
            try txn.put(Database.meta, Meta.readModelVersion, u32Bytes(StateProjection.version))
            try txn.put(Database.meta, Meta.configuration, configuration)
            try txn.put(Database.meta, Meta.keyCheck, keys.checkValue)
            try txn.put(Database.meta, Meta.signingKey, SigningKey.fingerprint(signingKey.publicKey))
        }
        for (partial, final) in [(partialKeyFile, keyFile), (partialSigningKeyFile, signingKeyFile)] {
            guard rename(partial.path, final.path) == 0 else {
                throw FileAccess.failure("rename \(partial.path) to \(final.lastPathComponent) in", directory.path, errno)
            }
        }
        try syncFile(directory)
        try lock.downgrade(directory: directory)
        return store
    }

    /// The exclusive lock `create` holds until the store is complete, so a concurrent init or compact
    /// is refused. Throws when `directory` already holds a store, complete or not.
    private static func lockForCreating(_ directory: URL) throws -> StoreLock {
        if let detail = try interruptedInit(in: directory) {
            throw LedgerStoreError.incompleteInit(directory: directory.path, detail: detail)
        }
        let dataFile = directory.appendingPathComponent("data.mdb").path
        guard try FileAccess.exists(dataFile) else {
            let lock = try StoreLock(directory: directory, mode: .exclusive, busy: .storeBusy(directory: directory.path))
            // Another init may have finished meanwhile.
            if let detail = try interruptedInit(in: directory) {
                throw LedgerStoreError.incompleteInit(directory: directory.path, detail: detail)
            }
            if try FileAccess.exists(dataFile) { throw LedgerStoreError.alreadyInitialized(directory: directory.path) }
            return lock
        }
        // A store in use is a working ledger. Otherwise (nobody has it open, so opening the environment
        // here is safe), a data.mdb without metadata is an init interrupted before `create` wrote
        // `.partial` files.
        let lock: StoreLock
        do {
            lock = try StoreLock(directory: directory, mode: .exclusive, busy: .storeBusy(directory: directory.path))
        } catch LedgerStoreError.storeBusy {
            throw LedgerStoreError.alreadyInitialized(directory: directory.path)
        }
        let notALedger = LedgerStoreError.corrupt(
            "\(dataFile) is not a ledger (empty, another program's LMDB store, or damaged): left unchanged; choose another --store")
        guard try FileAccess.size(dataFile) > 0 else { throw notALedger }
        let hasMetadata: Bool
        do {
            let environment = try LMDBEnvironment(
                path: directory.path, databaseNames: databaseNames, mode: .open(required: Database.meta))
            hasMetadata = try environment.read { txn in try txn.get(Database.meta, Meta.formatVersion) } != nil
        } catch let error as LMDBError where error.isNotFound {
            throw notALedger
        } catch let error as LMDBError where error.code == EACCES || error.code == EPERM {
            throw FileAccess.deniedEnvironment(in: directory, code: error.code)
        }
        withExtendedLifetime(lock) {}  // held until the environment above is closed
        guard hasMetadata else {
            throw LedgerStoreError.incompleteInit(directory: directory.path, detail: Self.noMetadata)
        }
        throw LedgerStoreError.alreadyInitialized(directory: directory.path)
    }

    static let noMetadata =
        "data.mdb holds no ledger metadata; if this directory held a working ledger, restore data.mdb from your backup instead"

    /// What is left of an interrupted `create` in `directory`, described for
    /// ``LedgerStoreError/incompleteInit(directory:detail:)``; nil when there is no sign of one. Throws when
    /// the directory cannot be searched (``FileAccess/exists(_:)``).
    static func interruptedInit(in directory: URL) throws -> String? {
        func exists(_ name: String) throws -> Bool { try FileAccess.exists(directory.appendingPathComponent(name).path) }
        let keyFiles = [LedgerKeys.fileName, SigningKey.fileName]
        let partials = try keyFiles.map { $0 + partialSuffix }.filter(exists)
        if !partials.isEmpty { return partials.joined(separator: " and ") + " left over" }
        guard try !exists("data.mdb") else { return nil }
        let present = try keyFiles.filter(exists)
        guard !present.isEmpty else { return nil }
        return present.joined(separator: " and ")
            + " without data.mdb; if data.mdb was lost rather than never written, restore it from your backup instead"
    }

    /// Opens an existing store. Refuses a missing or world-readable key file, a store written by a
    /// newer format and the remains of an interrupted `create`; clears reader slots left by dead
    /// processes; rebuilds read models persisted by another projection version. Holds `ledger.lock`
    /// shared until the store is released (refused while `compact` holds it).
    public convenience init(opening directory: URL) throws {
        try self.init(opening: directory, lock: nil)
    }

    /// Opens an existing store under `lock`, or under a new shared lock when nil.
    convenience init(opening directory: URL, lock: StoreLock?) throws {
        if let detail = try Self.interruptedInit(in: directory) {
            throw LedgerStoreError.incompleteInit(directory: directory.path, detail: detail)
        }
        guard try FileAccess.exists(directory.appendingPathComponent("data.mdb").path) else {
            throw LedgerStoreError.notInitialized(directory: directory.path)
        }
        let lock = try lock ?? StoreLock(directory: directory, mode: .shared, busy: .storeBusy(directory: directory.path))
        let keys = try LedgerKeys.load(from: directory.appendingPathComponent(LedgerKeys.fileName))
        try self.init(directory: directory, keys: keys, lock: lock, existing: true)
        let (format, modelVersion, keyCheck) = try environment.read { txn in
            (
                try txn.get(Database.meta, Meta.formatVersion).flatMap(u32), try txn.get(Database.meta, Meta.readModelVersion).flatMap(u32),
                try txn.get(Database.meta, Meta.keyCheck)
            )
        }
        guard let format else {
            throw LedgerStoreError.incompleteInit(directory: directory.path, detail: Self.noMetadata)
        }
        guard format <= Self.formatVersion else {
            throw LedgerStoreError.newerFormat(found: format, supported: Self.formatVersion)
        }
        guard keyCheck == keys.checkValue else {
            throw LedgerStoreError.wrongKey(path: directory.appendingPathComponent(LedgerKeys.fileName).path)
        }
        if modelVersion != StateProjection.version {
            _ = try rebuildReadModels(repair: true)
        }
    }

    private init(
        directory: URL, keys: LedgerKeys, lock: StoreLock, existing: Bool = false, initialMapSize: Int = LMDBEnvironment.defaultMapSize
    ) throws {
        self.directory = directory
        self.keys = keys
        self.lock = lock
        let dataFile = directory.appendingPathComponent("data.mdb").path
        if existing, try FileAccess.size(dataFile) == 0 {
            throw LedgerStoreError.corrupt("\(dataFile) is empty: restore data.mdb from your backup")
        }
        do {
            self.environment = try LMDBEnvironment(
                path: directory.path, databaseNames: Self.databaseNames, mode: existing ? .open(required: Database.meta) : .create,
                initialMapSize: initialMapSize)
        } catch let error as LMDBError where error.isNotFound {
            throw LedgerStoreError.corrupt(
                "\(dataFile) holds no ledger metadata (another program's LMDB store, or a damaged file): left unchanged; restore data.mdb from your backup or choose another --store"
            )
        } catch let error as LMDBError where error.code == EACCES || error.code == EPERM {
            throw FileAccess.deniedEnvironment(in: directory, code: error.code)
        }
    }

    /// The configuration blob given to ``create(at:configuration:)``.
    public func configuration() throws -> [UInt8] {
        try environment.read { txn in try txn.get(Database.meta, Meta.configuration) ?? [] }
    }

    // MARK: Writing

    /// Runs `body` in one write transaction: everything it appends, the read models it saves and
    /// the identities it changes commit together or not at all. `body` may run more than once
    /// (when the map grows) and must have no effects outside the session.
    public func write<T>(_ body: (WriteSession) throws -> T) throws -> T {
        try environment.write { txn in try body(WriteSession(txn: txn, keys: keys)) }
    }

    /// Appends `events` atomically (see ``WriteSession/append(_:expectedVersions:)``).
    @discardableResult
    public func append(_ events: [PendingEvent], expectedVersions: [LineageKey: UInt64] = [:]) throws -> AppendResult {
        try write { session in try session.append(events, expectedVersions: expectedVersions) }
    }

    // MARK: Reading

    /// Runs `body` in a read transaction (a consistent snapshot).
    public func read<T>(_ body: (ReadSession) throws -> T) throws -> T {
        try environment.read { txn in try body(ReadSession(txn: txn, keys: keys)) }
    }

    /// The last sequence number and its hash.
    public func head() throws -> (sequence: UInt64, hash: Digest32) { try read { try $0.head() } }

    /// Decoded records from `from`, at most `limit`.
    public func records(from: UInt64 = 1, limit: Int = .max) throws -> [Record] {
        var out: [Record] = []
        try read { session in
            try session.forEachRecord(from: from) { record in
                out.append(record)
                return out.count < limit
            }
        }
        return out
    }
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

func u32(_ bytes: [UInt8]) -> UInt32? {
    var r = ByteReader(bytes)
    return try? r.u32()
}

func u64(_ bytes: [UInt8]) -> UInt64? {
    var r = ByteReader(bytes)
    return try? r.u64()
}
