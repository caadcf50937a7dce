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
    }

    public let directory: URL
    public let keys: LedgerKeys
    let environment: LMDBEnvironment

    /// Creates a new store in `directory` (created if needed): the key file, the LMDB environment
    /// and the metadata. `configuration` is kept opaque in the metadata for the layer above.
    public static func create(at directory: URL, configuration: [UInt8]) throws -> LedgerStore {
        try FileManager.default.createDirectory(
            at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if FileManager.default.fileExists(atPath: directory.appendingPathComponent("data.mdb").path) {
            throw LedgerStoreError.alreadyInitialized(directory: directory.path)
        }
        let keys = try LedgerKeys.create(at: directory.appendingPathComponent(LedgerKeys.fileName))
        try SigningKey.create(at: directory.appendingPathComponent(SigningKey.fileName))
        let store = try LedgerStore(directory: directory, keys: keys)
        try store.environment.write { txn in
            try txn.put(Database.meta, Meta.formatVersion, u32Bytes(formatVersion))
            try txn.put(Database.meta, Meta.readModelVersion, u32Bytes(StateProjection.version))
            try txn.put(Database.meta, Meta.configuration, configuration)
            try txn.put(Database.meta, Meta.keyCheck, keys.checkValue)
        }
        return store
    }

    /// Opens an existing store. Refuses a missing or world-readable key file and a store written by
    /// a newer format; clears reader slots left by dead processes; rebuilds read models persisted by
    /// another projection version.
    public convenience init(opening directory: URL) throws {
        guard FileManager.default.fileExists(atPath: directory.appendingPathComponent("data.mdb").path) else {
            throw LedgerStoreError.notInitialized(directory: directory.path)
        }
        let keys = try LedgerKeys.load(from: directory.appendingPathComponent(LedgerKeys.fileName))
        try self.init(directory: directory, keys: keys)
        let (format, modelVersion, keyCheck) = try environment.read { txn in
            (
                try txn.get(Database.meta, Meta.formatVersion).flatMap(u32), try txn.get(Database.meta, Meta.readModelVersion).flatMap(u32),
                try txn.get(Database.meta, Meta.keyCheck)
            )
        }
        guard let format else { throw LedgerStoreError.notInitialized(directory: directory.path) }
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

    private init(directory: URL, keys: LedgerKeys) throws {
        self.directory = directory
        self.keys = keys
        self.environment = try LMDBEnvironment(
            path: directory.path, databaseNames: Self.databaseNames, initialMapSize: 16 << 20)
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
