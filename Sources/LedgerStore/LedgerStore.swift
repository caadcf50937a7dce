import CLMDB
public import Foundation
public import LedgerCore
public import LedgerCrypto
import Projections

/// A ledger's store: the engine (LMDB in `data.mdb`, or PostgreSQL) with the key files, and what every
/// engine shares above it: record encoding and hashing (``LogAppender``), the Merkle tree
/// (``MerkleLog``), sealing identities, verification and repair. Safe to share between threads
/// (reads run in parallel, writes are serialised by the engine) and between processes.
public final class LedgerStore: @unchecked Sendable {
    /// The storage format this code reads and writes (format 1 is upgraded, `ledger upgrade`).
    public static let formatVersion: UInt32 = 2

    /// Suffix of the key files `create` writes before renaming them into place.
    static let partialSuffix = ".partial"

    /// The directory of `data.mdb` for an LMDB store; of the key files for a PostgreSQL store.
    public let directory: URL
    public let location: StoreLocation
    public let keys: LedgerKeys
    public let engine: any LedgerEngine
    /// Run when a write to a store directory has waited 5 seconds for another process's write (LMDB
    /// serialises writers; a stopped writer holds the others until it continues or ends). Set once at
    /// start-up, before any store is opened: the `ledger` binary tells standard error.
    nonisolated(unsafe) public static var writerWaitNotice: (@Sendable () -> Void)?
    /// `ledger.lock` of an LMDB store, held shared while the store is open (exclusive during `create` and `compact`).
    let lock: StoreLock?
    /// A store directory on a read-only file system: opened for reading without any lock file (no
    /// process can write there, so none is needed); every write is refused naming the file system.
    public let onReadOnlyFileSystem: Bool

    /// Key material for ``create(at:configuration:keyFiles:)``: the contents of
    /// `ledger.key` and `ledger-signing.key` to keep (an upgrade keeps the old store's keys); without
    /// a signing key a new one is made.
    public struct KeyFiles: Sendable, Equatable {
        public var ledgerKey: Data
        public var signingKey: Data?
        public init(ledgerKey: Data, signingKey: Data?) {
            self.ledgerKey = ledgerKey
            self.signingKey = signingKey
        }
    }

    /// Creates a new store in `directory` (created if needed): the key files (new ones, or
    /// `keyFiles`) in `keyDirectory` (default: `directory`; see ``NewKeyFiles``), the LMDB environment
    /// and the metadata. `configuration` is kept opaque in the metadata for the layer above.
    ///
    /// The key files are written as `*.partial` and renamed into place only once the metadata
    /// transaction has committed, so an interrupted `create` leaves either a complete store or
    /// `.partial` files, which ``LedgerStoreError/incompleteInit(directory:detail:)`` reports (they
    /// are never deleted automatically). A key directory that already holds another ledger's key
    /// files is refused (``LedgerStoreError/keysInUse(directory:)``).
    public static func create(
        at directory: URL, keyDirectory: URL? = nil, configuration: [UInt8], keyFiles: KeyFiles? = nil
    ) throws -> LedgerStore {
        try create(
            at: directory, keyDirectory: keyDirectory, configuration: configuration, keyFiles: keyFiles,
            initialMapSize: LMDBEnvironment.defaultMapSize)
    }

    /// ``create(at:keyDirectory:configuration:keyFiles:)`` with a map of `initialMapSize` bytes (tests grow small maps).
    static func create(
        at directory: URL, keyDirectory: URL? = nil, configuration: [UInt8], keyFiles: KeyFiles?, initialMapSize: Int
    ) throws -> LedgerStore {
        try FileAccess.createDirectories(directory)
        let lock = try lockForCreating(directory)
        let newKeys = try NewKeyFiles(in: keyDirectory ?? directory, keyFiles: keyFiles)
        let engine: LMDBEngine
        do {
            engine = try LMDBEngine(directory: directory, mode: .create, initialMapSize: initialMapSize)
        } catch let error as LMDBError where error.code == EACCES || error.code == EPERM {
            throw FileAccess.deniedEnvironment(in: directory, code: error.code)
        }
        let store = LedgerStore(
            directory: directory, keys: newKeys.keys, lock: lock, engine: engine, location: .directory(directory, keys: newKeys.directory))
        try engine.write { _, writer in
            var batch = EngineBatch()
            batch.meta = try initialMetadata(keys: newKeys.keys, signingKey: newKeys.signingKey, configuration: configuration).map {
                $0.0 == .formatVersion ? ($0.0, u32Bytes(engine.formatVersion)) : $0
            }
            batch.head = LogHead()
            try writer.apply(batch)
        }
        try newKeys.commit()
        try FileAccess.sync(directory)
        try lock.downgrade(directory: directory)
        return store
    }

    /// The metadata a new store starts with.
    static func initialMetadata(keys: LedgerKeys, signingKey: Ed25519PrivateKey, configuration: [UInt8]) throws -> [(MetaKey, [UInt8])] {
        [
            (.formatVersion, u32Bytes(formatVersion)), (.readModelVersion, u32Bytes(StateProjection.version)),
            (.configuration, configuration), (.keyCheck, keys.checkValue), (.signingKey, try SigningKey.fingerprint(signingKey.publicKey)),
        ]
    }

    /// The exclusive lock `create` holds until the store is complete, so a concurrent init or compact
    /// is refused. Throws when `directory` already holds a store, complete or not.
    private static func lockForCreating(_ directory: URL) throws -> StoreLock {
        // The upgrade creates its store in its own staging directory, which holds the marker.
        if let leftover = try interruptedCopy(in: directory, markerAllowed: true) { throw leftover }
        if let detail = try interruptedInit(in: directory) {
            // `.partial` files of an init still running are its own: the process creating the store
            // holds the lock (busy), else they are left over from one that was interrupted.
            _ = try StoreLock(directory: directory, mode: .exclusive, busy: .storeBusy(directory: directory.path))
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
                path: directory.path, databases: LMDBEngine.specs, mode: .open(required: LMDBEngine.metaDatabase))
            hasMetadata =
                try environment.read { txn in
                    try txn.get(LMDBEngine.metaDatabase, Array(MetaKey.formatVersion.rawValue.utf8))
                } != nil
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

    /// The directory `ledger upgrade` builds the new store in, inside its target (`FormatOneUpgrade`).
    static let upgradeStagingName = "upgrade.partial"
    /// The file marking an upgrade's staging directory (its first entry, never moved into the target):
    /// a directory holding it is refused by every command (``LedgerStoreError/stagingDirectory(directory:command:)``).
    static let upgradeMarkerName = "upgrade.unfinished"
    /// The staging directories of the commands that build a store aside and move it into place when
    /// complete: `ledger upgrade`'s, and `ledger restore`'s (`Backup.stagingDirectoryName`).
    static let stagingDirectories = [(name: upgradeStagingName, command: "upgrade"), (name: "restore.partial", command: "restore")]

    /// What an interrupted (or running) `ledger upgrade` or `ledger restore` left in `directory`, as
    /// the error that names it; nil when nothing. `directory` holding the upgrade's marker is its
    /// staging directory itself; holding a staging directory, it is the target of one that did not
    /// finish (refused as busy while an upgrade holds its `ledger.lock`, unless `probingLock` is false:
    /// the caller holds it). `markerAllowed` ignores the marker (`create` in the staging directory).
    static func interruptedCopy(in directory: URL, probingLock: Bool = true, markerAllowed: Bool = false) throws -> LedgerStoreError? {
        func exists(_ url: URL, _ name: String) throws -> Bool { try FileAccess.exists(url.appendingPathComponent(name).path) }
        if !markerAllowed, try exists(directory, upgradeMarkerName) { return .stagingDirectory(directory: directory.path, command: "upgrade") }
        for (name, command) in stagingDirectories where try exists(directory, name) {
            let staging = directory.appendingPathComponent(name)
            if probingLock, command == "upgrade", try StoreLock.isHeld(in: directory) { return .storeBusy(directory: directory.path) }
            let inPlace = try exists(directory, "data.mdb") && !exists(staging, "data.mdb")
            return .interruptedCopy(command: command, staging: staging.path, storeInPlace: inPlace)
        }
        return nil
    }

    /// What is left of an interrupted `create` in `directory` (with its key files in `keyDirectory`,
    /// default `directory`), described for ``LedgerStoreError/incompleteInit(directory:detail:)``; nil
    /// when there is no sign of one. Throws when a directory cannot be searched (``FileAccess/exists(_:)``).
    static func interruptedInit(in directory: URL, keyDirectory: URL? = nil) throws -> String? {
        func exists(_ name: String) throws -> Bool { try FileAccess.exists(directory.appendingPathComponent(name).path) }
        let keyFiles = [LedgerKeys.fileName, SigningKey.fileName]
        let keyDirectory = keyDirectory ?? directory
        let partials = try keyFiles.map { $0 + partialSuffix }.filter {
            try exists($0) || FileAccess.exists(keyDirectory.appendingPathComponent($0).path)
        }
        if !partials.isEmpty { return partials.joined(separator: " and ") + " left over" }
        guard try !exists("data.mdb") else { return nil }
        let present = try keyFiles.filter(exists)
        guard !present.isEmpty else { return nil }
        return present.joined(separator: " and ")
            + " without data.mdb; if data.mdb was lost rather than never written, restore it from your backup instead"
    }

    /// Opens an existing store, its key files in `keyDirectory` (default: `directory`). Refuses a
    /// missing or world-readable key file, a store of another format (format 1:
    /// ``LedgerStoreError/formatOne(directory:)``, naming the upgrade command), a truncated data file
    /// and the remains of an interrupted `create`; runs no write transaction (unless the read models
    /// were persisted by another projection version: they are rebuilt). Holds `ledger.lock` shared
    /// until the store is released (refused while `compact` holds it).
    public convenience init(opening directory: URL, keyDirectory: URL? = nil) throws {
        try self.init(opening: directory, keyDirectory: keyDirectory, lock: nil)
    }

    /// Opens a copy of a store's `data.mdb` in `directory` (``copyDataFile(to:)``, a backup) for reading
    /// only, its key files in `keyDirectory`: checks the key and the format as opening a store does, but
    /// creates and writes no file in `directory` (no `lock.mdb`, no `ledger.lock`, read models of
    /// another projection version are not rebuilt), so nothing else may open the copy meanwhile.
    public static func openCopy(at directory: URL, keyDirectory: URL) throws -> LedgerStore {
        try LedgerStore(opening: directory, keyDirectory: keyDirectory, lock: nil, readOnlyCopy: true)
    }

    /// Opens an existing store under `lock`, or under a new shared lock when nil (none for a read-only
    /// copy). `readOnlyFileSystem` says whether the directory is on a read-only file system (found out
    /// when nil).
    convenience init(
        opening directory: URL, keyDirectory: URL? = nil, lock: StoreLock?, readOnlyCopy: Bool = false, readOnlyFileSystem: Bool? = nil
    ) throws {
        let keyDirectory = keyDirectory ?? directory
        if let leftover = try Self.interruptedCopy(in: directory) { throw leftover }
        if let detail = try Self.interruptedInit(in: directory, keyDirectory: keyDirectory) {
            throw LedgerStoreError.incompleteInit(directory: directory.path, detail: detail)
        }
        let dataFile = directory.appendingPathComponent("data.mdb").path
        guard try FileAccess.exists(dataFile) else {
            throw LedgerStoreError.notInitialized(directory: directory.path)
        }
        let readOnlyFileSystem = !readOnlyCopy && (readOnlyFileSystem ?? FileAccess.isOnReadOnlyFileSystem(directory.path))
        let snapshot = readOnlyCopy || readOnlyFileSystem
        let lock = snapshot ? nil : try lock ?? StoreLock(directory: directory, mode: .shared, busy: .storeBusy(directory: directory.path))
        let keys = try LedgerKeys.load(from: keyDirectory.appendingPathComponent(LedgerKeys.fileName))
        if try FileAccess.size(dataFile) == 0 {
            throw LedgerStoreError.corrupt("\(dataFile) is empty: restore data.mdb from your backup")
        }
        let engine: LMDBEngine
        do {
            let required = LMDBEngine.metaDatabase
            engine = try LMDBEngine(directory: directory, mode: snapshot ? .snapshot(required: required) : .open(required: required))
        } catch let error as LMDBError where error.isNotFound {
            throw LedgerStoreError.corrupt(
                "\(dataFile) holds no ledger metadata (another program's LMDB store, or a damaged file): left unchanged; restore data.mdb from your backup or choose another --store"
            )
        } catch let error as LMDBError where error.code == EACCES || error.code == EPERM {
            throw FileAccess.deniedEnvironment(in: directory, code: error.code)
        }
        self.init(
            directory: directory, keys: keys, lock: lock, engine: engine, location: .directory(directory, keys: keyDirectory),
            onReadOnlyFileSystem: readOnlyFileSystem)
        try checkOpened(rebuildingReadModels: !snapshot)
    }

    /// Checks an opened store's metadata (format, key) and rebuilds read models persisted by another
    /// projection version (unless `rebuildingReadModels` is false: `verify` then reports them).
    func checkOpened(rebuildingReadModels: Bool = true) throws {
        let (format, modelVersion, keyCheck) = try engine.read { reader in
            (try reader.meta(.formatVersion).flatMap(u32), try reader.meta(.readModelVersion).flatMap(u32), try reader.meta(.keyCheck))
        }
        guard let format else {
            throw LedgerStoreError.incompleteInit(directory: location.description, detail: Self.noMetadata)
        }
        guard format == engine.formatVersion else {
            if format < Self.formatVersion { throw LedgerStoreError.formatOne(directory: location.description) }
            if format > LMDBEngine.recentFormatVersion {
                throw LedgerStoreError.newerFormat(found: format, supported: LMDBEngine.recentFormatVersion)
            }
            throw LedgerStoreError.corrupt(
                "\(location.description) says format \(format) in its metadata, but its databases are those of format \(engine.formatVersion)")
        }
        guard keyCheck == keys.checkValue else {
            throw LedgerStoreError.wrongKey(path: keyDirectory.appendingPathComponent(LedgerKeys.fileName).path)
        }
        if modelVersion != StateProjection.version, rebuildingReadModels {
            _ = try replay(repair: true)
        }
    }

    /// The directory of the key files: the store directory unless they live elsewhere (`--keys`).
    public var keyDirectory: URL { location.keyDirectory }

    init(
        directory: URL, keys: LedgerKeys, lock: StoreLock?, engine: any LedgerEngine, location: StoreLocation? = nil,
        onReadOnlyFileSystem: Bool = false
    ) {
        self.directory = directory
        self.location = location ?? .directory(directory)
        self.keys = keys
        self.lock = lock
        self.engine = engine
        self.onReadOnlyFileSystem = onReadOnlyFileSystem
    }

    /// The configuration blob given to ``create(at:configuration:keyFiles:)``.
    public func configuration() throws -> [UInt8] {
        try engine.read { try $0.meta(.configuration) ?? [] }
    }

    // MARK: Reading and writing

    /// Runs `body` on a consistent snapshot (see ``LedgerEngine/read(_:)``).
    public func read<T>(_ body: (any EngineReader) throws -> T) throws -> T { try engine.read(body) }

    /// Runs one write group (see ``LedgerEngine/write(_:)``).
    public func write<T>(_ body: (any EngineReader, any EngineWriter) throws -> T) throws -> T {
        try refuseOnReadOnlyFileSystem()
        return try engine.write(body)
    }

    /// Runs one write group, calling `whenApplied` before its commit (see ``LedgerEngine/write(_:whenApplied:)``).
    public func write<T>(_ body: (any EngineReader, any EngineWriter) throws -> T, whenApplied: (ReadAheadView) -> Void) throws -> T {
        try refuseOnReadOnlyFileSystem()
        return try engine.write(body, whenApplied: whenApplied)
    }

    /// Throws when the store is on a read-only file system (``onReadOnlyFileSystem``), naming it.
    public func refuseOnReadOnlyFileSystem() throws {
        guard onReadOnlyFileSystem else { return }
        throw LedgerStoreError.fileAccess(path: directory.appendingPathComponent("data.mdb").path, operation: "write", errno: EROFS)
    }

    /// Runs one write group that may be committed before it is durable (see
    /// ``LedgerEngine/writeDeferringSync(_:)``; ``durability`` and ``sync()`` say when it is).
    public func writeDeferringSync<T>(_ body: (any EngineReader, any EngineWriter) throws -> T) throws -> T {
        try refuseOnReadOnlyFileSystem()
        return try engine.writeDeferringSync(body)
    }

    /// Write groups committed and durable (``LedgerEngine/durability``); nil when every commit is durable as it returns.
    public var durability: EngineDurability? { engine.durability }

    /// Makes every committed write group durable.
    public func sync() throws { try engine.sync() }

    /// The log's head.
    public func head() throws -> LogHead { try read { try $0.head() } }

    /// Decoded records from `from`, at most `limit`.
    public func records(from: UInt64 = 1, limit: Int = .max) throws -> [Record] {
        var out: [Record] = []
        guard limit > 0 else { return out }
        try read { reader in
            try reader.forEachRecord(from: from, through: .max) { sequence, bytes in
                out.append(try RecordCodec.decode(bytes, sequence: sequence))
                return out.count < limit
            }
        }
        return out
    }

    // MARK: Identity vault

    /// The UID `account` was issued for, while the account lives.
    public func uid(of account: AccountID, in reader: any EngineReader) throws -> String? {
        try reader.sealedUID(of: account).map { try uid(sealed: $0, of: account) }
    }

    /// The UID in `sealed`, the sealed UID stored under `account` (``SealedUID``). Throws
    /// ``LedgerStoreError/identityVaultMismatch`` when it does not open there.
    public func uid(sealed: [UInt8], of account: AccountID) throws -> String {
        guard let uid = try openSealedUID(sealed, of: account) else { throw LedgerStoreError.identityVaultMismatch }
        return String(decoding: uid, as: UTF8.self)
    }

    /// The UID's bytes in `sealed` (a sealed UID as the engines hand it, ``SealedUID``) stored under
    /// `account`; nil when it is not authentic there: a bound seal moved from another pseudonym, a
    /// byte changed, another key, a layout byte of no known layout. Throws only when libcrypto fails.
    public func openSealedUID(_ sealed: [UInt8], of account: AccountID) throws -> [UInt8]? {
        switch sealed.first {
        case SealedUID.bound:
            return try keys.sealing.openIfAuthentic(Array(sealed.dropFirst()), associatedData: SealedUID.associatedData(account))
        case SealedUID.legacy:
            return try keys.sealing.openIfAuthentic(Array(sealed.dropFirst()))
        default:
            return nil
        }
    }

    /// The pseudonym of the live account `uid`, if any: the one its vault entry points to, once the
    /// UID sealed under that pseudonym is confirmed to be `uid` (``confirm(_:uid:)``).
    public func pseudonym(ofUID uid: String, in reader: any EngineReader) throws -> AccountID? {
        let vaultKey = try keys.vaultKey(uid: uid)
        return try reader.identities(vaultKeys: [vaultKey])[vaultKey].map { try confirm($0, uid: uid) }
    }

    /// The pseudonym of `entry`, the vault entry found for `uid`, once the UID sealed under that
    /// pseudonym is `uid`. The vault is outside the hash chain (its entries are erased when an account
    /// is deleted), so an entry changed in the store (two swapped: each UID would then answer for the
    /// other's account) shows only here, and in `verify`: one unseal per lookup. Throws
    /// ``LedgerStoreError/identityVaultMismatch`` when no sealed UID is stored under the pseudonym, it
    /// does not unseal, or it is another UID (and a `CryptoError` when libcrypto cannot unseal at all).
    public func confirm(_ entry: VaultEntry, uid: String) throws -> AccountID {
        guard let sealed = entry.sealedUID, let unsealed = try openSealedUID(sealed, of: entry.account),
            unsealed.elementsEqual(uid.utf8)
        else { throw LedgerStoreError.identityVaultMismatch }
        return entry.account
    }

    /// A new pseudonym for `uid`, with what the vault stores for it: the low 6 bytes of `position`
    /// (the sequence of the record being decided), big-endian, then 10 random bytes. The position
    /// only orders the pseudonyms: the pseudonyms a write group issues land together at the end of
    /// the identity vault's and `account-lineages`' key order, so a commit writes a few pages there
    /// instead of one page per new account. It tells no more than the record that names the
    /// pseudonym first already does. `vaultKey`, when the caller has it, is `uid`'s
    /// (``LedgerKeys/vaultKey(uid:)``), not computed again.
    public func issuePseudonym(forUID uid: String, position: UInt64, vaultKey: Key128? = nil) throws -> (
        account: AccountID, vaultKey: Key128, sealedUID: [UInt8]
    ) {
        let random = RandomPool(blockSize: Self.randomBytesPerPseudonym)
        return try issuePseudonym(forUID: uid, position: position, vaultKey: vaultKey, random: random)
    }

    /// ``issuePseudonym(forUID:position:vaultKey:)`` with the random bytes (the pseudonym's and the
    /// seal's nonce) drawn from `random`: a write group issuing many pseudonyms draws them in a few
    /// `RAND_bytes` calls.
    public func issuePseudonym(forUID uid: String, position: UInt64, vaultKey: Key128? = nil, random: RandomPool) throws -> (
        account: AccountID, vaultKey: Key128, sealedUID: [UInt8]
    ) {
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in 0..<6 { bytes[index] = UInt8(truncatingIfNeeded: position >> UInt64(8 * (5 - index))) }
        try bytes.withUnsafeMutableBufferPointer { buffer in
            guard let base = buffer.baseAddress else { throw LedgerStoreError.corrupt("pseudonym") }
            try random.fill(base + 6, count: 10)
        }
        guard let account = AccountID(bytes) else { throw LedgerStoreError.corrupt("pseudonym") }
        return (account, try vaultKey ?? keys.vaultKey(uid: uid), try sealUID(Array(uid.utf8), under: account, random: random))
    }

    /// `uid` sealed under `account`, bound to it (``SealedUID/bound``), as the engines store it.
    public func sealUID(_ uid: [UInt8], under account: AccountID, random: RandomPool) throws -> [UInt8] {
        [SealedUID.bound] + (try keys.sealing.seal(uid, associatedData: SealedUID.associatedData(account), random: random))
    }

    /// Random bytes one new pseudonym takes: 10 of its own, 12 for its seal's nonce.
    public static let randomBytesPerPseudonym = 22

    /// Entries and bytes per database.
    /// The store's format: 2, or 3 for an LMDB store with the recent-change regions.
    public var formatVersion: UInt32 { engine.formatVersion }

    public func statistics() throws -> [(name: String, entries: Int, bytes: Int)] { try read { try $0.statistics() } }
}
