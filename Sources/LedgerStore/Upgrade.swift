public import Foundation
public import LedgerCore
import LedgerCrypto

/// `ledger upgrade`: copies a format-1 store into a new format-2 store, leaving the old one as it was.
///
/// 1. Takes the old store's `ledger.lock` exclusively (no other process may have it open) and opens its
///    environment read-only without LMDB's lock file: no file of the old store is written.
/// 2. Verifies the old hash chain record by record against its head, and computes the RFC 6962 root
///    its checkpoints were signed over (leaf = the stored record bytes).
/// 3. Creates the new store in a staging directory inside the target (``UpgradeTarget``), with the
///    same `ledger.key` and `ledger-signing.key` and configuration,
///    and appends record 1, `store-upgraded`: the old format, record count, head hash and Merkle root,
///    so anyone holding a format-1 checkpoint or the old store can tie it to the new log.
/// 4. Re-encodes every format-1 batch (one command: a fact with its effects and decision, or one
///    support step) as one format-2 record: `at` is the batch's format-1 time (the caller's), and
///    `recordedAt` the same time made non-decreasing (the running maximum), since format 1 had only
///    the caller's time. The command key is the first 16 bytes of the batch's first event id, which is
///    format 2's key of the same command; the latest attempt of a retried submission is found in the
///    old `submissions` database (its key truncated, its attempt number kept). An older attempt that a
///    later one superseded keeps its own batch id as command key (format 1 did not record which
///    submission it retried), with attempt 0.
/// 5. Copies the identity vault (lookup keys truncated to 16 bytes, sealed UIDs as they are), then
///    rebuilds the read models and indexes from the new log and verifies the new store.
/// 6. Syncs it and moves it into place (``UpgradeTarget/moveIntoPlace()``): until then the target
///    holds no `data.mdb`, so an interrupted upgrade leaves nothing that opens as a ledger.
public enum FormatOneUpgrade {
    /// What an upgrade did.
    public struct Report: Sendable {
        /// Records in the old log.
        public var formatOneRecords: UInt64
        /// Events in the old log (one per format-1 record).
        public var events: UInt64
        /// Records in the new log, record 1 included.
        public var records: UInt64
        public var headHash: Digest32
        public var merkleRoot: Digest32
        /// Identity-vault entries (live accounts) copied.
        public var identities: Int
        /// Superseded retry attempts keyed by their own batch id (see the type's documentation).
        public var supersededAttempts: Int
        /// The new store's `verify`.
        public var verification: ReplayReport
    }

    /// The phases `progress` reports: (phase, done, total).
    public enum Phase: String, Sendable {
        case verifyingOld = "verifying the format-1 chain"
        case copying = "re-encoding records"
        case rebuilding = "rebuilding read models and indexes"
        case verifyingNew = "verifying the new store"
    }

    /// Records per write group of the new store.
    static let groupSize = 20_000

    /// Upgrades the format-1 store in `old` into a new store in `new` (which must not hold one).
    /// With `keyDirectory`, the new store keeps its key files there (the old store's, written there
    /// when it does not hold them yet; the old key files are read from `old`, or from `keyDirectory`
    /// when `old` has none); without it, in `new`.
    /// `clock` gives the time of the upgrade (record 1's `at`). Throws
    /// ``LedgerStoreError/corrupt(_:)`` when the old chain does not verify (nothing is created then),
    /// and when the new store does not verify (its staging directory is left for inspection);
    /// ``LedgerStoreError/interruptedCopy(command:staging:storeInPlace:)`` when an earlier upgrade's
    /// staging directory is left in `new`. Any other error removes the staging directory.
    public static func upgrade(
        from old: URL, to new: URL, keyDirectory: URL? = nil, clock: () -> Timestamp, progress: ((Phase, UInt64, UInt64) -> Void)? = nil
    ) throws -> Report {
        let (oldPath, newPath) = (old.standardizedFileURL.resolvingSymlinksInPath().path, new.standardizedFileURL.resolvingSymlinksInPath().path)
        guard oldPath != newPath else {
            throw LedgerStoreError.corrupt(
                "--from and --to are the same directory (\(oldPath)): the upgrade writes a new store and leaves the old one")
        }
        let source = try FormatOneSource(directory: old, keyDirectory: keyDirectory)
        // 2. The old chain, before anything is created.
        let summary: FormatOneSource.Summary
        do {
            summary = try source.verify { progress?(.verifyingOld, $0, $1) }
        } catch let broken as FormatOneSource.BrokenChain {
            throw LedgerStoreError.corrupt("\(broken.message); nothing was upgraded")
        }
        // 3. The new store, built in NEW/upgrade.partial and moved into place once complete.
        let target = try UpgradeTarget(new, keyDirectory: keyDirectory, keyFiles: try source.keyFiles())
        let report: Report
        do {
            report = try copy(source, summary: summary, into: target.staging, keyFiles: target.keyFiles, clock: clock, progress: progress)
        } catch let error as LeftForInspection {
            throw LedgerStoreError.corrupt(
                "\(error.message): the unfinished copy in \(target.staging.path) is left for inspection (it is not a ledger; remove it before upgrading again); the old store is unchanged"
            )
        } catch {
            target.abandon()
            throw error
        }
        try target.moveIntoPlace()
        return report
    }

    /// An upgrade found its own result wrong: the staging directory is kept for inspection.
    struct LeftForInspection: Error { let message: String }

    /// Steps 3 to 5 into the staging directory `staging`: returns once the store there is complete,
    /// synced and closed.
    private static func copy(
        _ source: FormatOneSource, summary: FormatOneSource.Summary, into staging: URL, keyFiles: LedgerStore.KeyFiles,
        clock: () -> Timestamp, progress: ((Phase, UInt64, UInt64) -> Void)?
    ) throws -> Report {
        let store = try LedgerStore.create(at: staging, configuration: summary.configuration, keyFiles: keyFiles)
        KillPoint.reached("upgrade-created")
        var appender = try LogAppender(head: LogHead())
        let upgraded = StoreUpgraded(
            fromFormat: 1, records: summary.records, headHash: summary.headHash, merkleRoot: summary.merkleRoot,
            copiedRecords: summary.batches)
        try appender.append(
            recordedAt: summary.firstRecordedAt ?? clock(), at: clock(),
            command: try store.keys.command("upgrade|format 1|\(summary.headHash.hex)"), attempt: 0, events: [.storeUpgraded(upgraded)])
        // 4. Every batch as one record.
        var pending = 0
        func flush(_ appender: inout LogAppender) throws {
            let batch = appender.batch
            try store.write { _, writer in try writer.apply(batch) }
            appender.batch = EngineBatch()
            pending = 0
        }
        let superseded = try source.reencode(into: &appender, progress: { progress?(.copying, $0, summary.records) }) { appender, _ in
            pending += 1
            if pending >= groupSize { try flush(&appender) }
        }
        try flush(&appender)
        guard appender.head.sequence == 1 + summary.batches else {
            throw LeftForInspection(
                message: "the upgrade wrote \(appender.head.sequence - 1) records after record 1, which announced \(summary.batches)")
        }
        progress?(.copying, summary.records, summary.records)
        KillPoint.reached("upgrade-log")
        // 5. The vault, then read models and indexes from the log, then the new store's verify.
        var identities = 0
        try source.forEachIdentity { chunk in
            var batch = EngineBatch()
            batch.vaultInserts = chunk
            try store.write { _, writer in try writer.apply(batch) }
            identities += chunk.count
        }
        KillPoint.reached("upgrade-vault")
        _ = try store.replay(repair: true) { progress?(.rebuilding, $0, $1) }
        KillPoint.reached("upgrade-rebuilt")
        let verification = try store.replay(repair: false) { progress?(.verifyingNew, $0, $1) }
        guard verification.isIntact else {
            throw LeftForInspection(
                message:
                    "the upgraded store does not verify (\((verification.chainFault.map { "\($0)" } ?? "") + (verification.indexDifferences + verification.readModelDifferences + verification.vaultDifferences).prefix(3).joined(separator: "; ")))"
            )
        }
        try store.sync()
        return Report(
            formatOneRecords: summary.records, events: summary.records, records: try store.head().sequence, headHash: summary.headHash,
            merkleRoot: summary.merkleRoot, identities: identities, supersededAttempts: superseded, verification: verification)
    }
}

/// Where `ledger upgrade` builds the new store: `NEW/upgrade.partial`, a staging directory whose first
/// entry is the marker file `upgrade.unfinished` (every command refuses a directory holding it), while
/// this process holds `NEW/ledger.lock` exclusively (commands on NEW meanwhile are told an upgrade is
/// running). Only the finished, verified and synced store's files leave it: the key files first, then
/// `data.mdb`, whose rename into NEW is the moment NEW becomes a ledger. Until then NEW holds no
/// `data.mdb`, and every command pointed at it names the staging directory
/// (``LedgerStoreError/interruptedCopy(command:staging:storeInPlace:)``), as does the next upgrade: a
/// leftover is never removed automatically.
struct UpgradeTarget {
    let directory: URL
    let staging: URL
    /// Where the new store's key files go: `directory`, or the key directory given.
    let keyDirectory: URL
    /// The key files the new store is created with: the old store's, or the same files already in `keyDirectory`.
    let keyFiles: LedgerStore.KeyFiles
    /// Whether this upgrade created `directory` (removed again when the upgrade fails).
    let createdDirectory: Bool
    private let lock: StoreLock

    init(_ directory: URL, keyDirectory: URL?, keyFiles: LedgerStore.KeyFiles) throws {
        self.directory = directory
        staging = directory.appendingPathComponent(LedgerStore.upgradeStagingName)
        let keyDirectory = keyDirectory ?? directory
        self.keyDirectory = keyDirectory
        let created = try !FileAccess.exists(directory.path)
        createdDirectory = created
        try FileAccess.createDirectories(directory)
        let dataFile = directory.appendingPathComponent("data.mdb").path
        do {
            do {
                lock = try StoreLock(directory: directory, mode: .exclusive, busy: .storeBusy(directory: directory.path))
            } catch LedgerStoreError.storeBusy {
                // In use: a working ledger, or another upgrade into it (still running).
                if try FileAccess.exists(dataFile) { throw LedgerStoreError.alreadyInitialized(directory: directory.path) }
                throw LedgerStoreError.storeBusy(directory: directory.path)
            }
            if let leftover = try LedgerStore.interruptedCopy(in: directory, probingLock: false) { throw leftover }
            if try FileAccess.exists(dataFile) { throw LedgerStoreError.alreadyInitialized(directory: directory.path) }
            // The key files already there (exactly the old store's) are kept, with their signing key.
            self.keyFiles = try NewKeyFiles.holdsKeys(keyDirectory, keyFiles: keyFiles) ? LedgerStore.keyFiles(in: keyDirectory) : keyFiles
        } catch {
            if created {
                unlink(directory.appendingPathComponent(StoreLock.fileName).path)
                rmdir(directory.path)
            }
            throw error
        }
        guard mkdir(staging.path, 0o700) == 0 else { throw FileAccess.failure("create the directory", staging.path, errno) }
        let marker = staging.appendingPathComponent(LedgerStore.upgradeMarkerName)
        do {
            try FileAccess.createFile(
                marker,
                contents: Array(
                    """
                    This directory is the unfinished copy of `ledger upgrade` into \(directory.path), started at \(Date()) by process \(getpid()).
                    It is not a ledger. If that upgrade no longer runs, remove this directory and run the upgrade again.

                    """.utf8))
            try FileAccess.sync(staging)
            try FileAccess.sync(directory)
        } catch {
            unlink(marker.path)
            rmdir(staging.path)
            throw error
        }
        KillPoint.reached("upgrade-staged")
    }

    /// Moves the complete store (closed: no environment open on it) from the staging directory into
    /// place, syncing the directories, and removes the staging directory.
    func moveIntoPlace() throws {
        func path(_ name: String, in url: URL) -> String { url.appendingPathComponent(name).path }
        for name in ["lock.mdb", StoreLock.fileName] { unlink(path(name, in: staging)) }
        let names = [LedgerKeys.fileName, SigningKey.fileName]
        if keyDirectory.standardizedFileURL.path == directory.standardizedFileURL.path {
            for name in names {
                guard rename(path(name, in: staging), path(name, in: directory)) == 0 else {
                    throw FileAccess.failure("move \(path(name, in: staging)) to", path(name, in: directory), errno)
                }
            }
        } else {
            try LedgerStore.installKeyFiles(try LedgerStore.keyFiles(in: staging), in: keyDirectory)
            for name in names { unlink(path(name, in: staging)) }
        }
        try FileAccess.sync(directory)
        KillPoint.reached("upgrade-keys-moved")
        guard rename(path("data.mdb", in: staging), path("data.mdb", in: directory)) == 0 else {
            throw FileAccess.failure("move \(path("data.mdb", in: staging)) to", path("data.mdb", in: directory), errno)
        }
        try FileAccess.sync(directory)
        KillPoint.reached("upgrade-moved")
        guard unlink(path(LedgerStore.upgradeMarkerName, in: staging)) == 0 || errno == ENOENT, rmdir(staging.path) == 0 else {
            throw FileAccess.failure("remove", staging.path, errno)
        }
        try FileAccess.sync(directory)
    }

    /// Removes the staging directory of an upgrade that failed (an error this process caught), and
    /// `directory` when this upgrade created it and it holds nothing else.
    func abandon() {
        let names = [
            "data.mdb", "lock.mdb", StoreLock.fileName, LedgerKeys.fileName, SigningKey.fileName, LedgerKeys.fileName + LedgerStore.partialSuffix,
            SigningKey.fileName + LedgerStore.partialSuffix, LedgerStore.upgradeMarkerName,
        ]
        for name in names { unlink(staging.appendingPathComponent(name).path) }
        rmdir(staging.path)
        if createdDirectory {
            unlink(directory.appendingPathComponent(StoreLock.fileName).path)
            rmdir(directory.path)
        }
    }
}

/// The format-1 store given to check an upgraded store against cannot be opened as one.
public struct UnusableFormatOneStore: Error, CustomStringConvertible, Sendable {
    public var path: String
    public var error: LedgerStoreError

    public var description: String {
        let why: String =
            switch error {
            case .notInitialized: "it holds no ledger"
            case .storeInUse, .storeBusy:
                "it is in use (by another process, or it is the store being verified): no process may have it open while it is read"
            case .corrupt(let message): message
            default: "\(error)"
            }
        return "the format-1 store \(path) cannot be used: \(why); give the format-1 store the upgrade started from, which it left unchanged"
    }
}

extension FormatOneUpgrade {
    /// What a format-1 store shows about a store upgraded from it (`ledger verify --checkpoint
    /// --format-one-store`): whether its log is the one record 1 names, and whether records 2 to
    /// `copiedRecords` + 1 are byte for byte what the upgrade writes from it.
    public struct OriginCheck: Sendable {
        /// A disagreement between the upgraded store and the format-1 store.
        public struct Difference: Sendable, Equatable {
            /// The upgraded store's record (1: its `store-upgraded` names another format-1 log).
            public var sequence: UInt64
            public var reason: String
        }

        /// Why the format-1 store's own chain does not verify (then nothing was compared).
        public var brokenChain: String?
        /// Records in the format-1 log.
        public var records: UInt64
        public var headHash: Digest32
        public var merkleRoot: Digest32
        /// The root of the format-1 log's first `size` records (nil when it holds fewer).
        public var rootAtSize: Digest32?
        /// Records of the upgraded store compared with the re-encoding of the format-1 log.
        public var compared: UInt64
        /// The first disagreement; nil when every record compared is the upgrade's re-encoding.
        public var difference: Difference?

        /// The format-1 chain verifies, its log is the one record 1 names, and every copied record is
        /// its re-encoding.
        public var matches: Bool { brokenChain == nil && difference == nil }
    }

    /// Checks the upgraded store `reader` reads, whose record 1 is `upgraded`, against the format-1
    /// store in `old` (opened read-only under its exclusive `ledger.lock`, created empty if missing; no
    /// other file of it is written, and its key files are not needed): the format-1 chain, its record count, head hash and root
    /// against record 1's, and each of records 2 to `copiedRecords` + 1 against the record the upgrade
    /// makes of the same format-1 records (re-encoded as ``upgrade(from:to:keyDirectory:clock:progress:)``
    /// does, after the store's own record 1). Also gives the format-1 root at `size`, for a format-1
    /// checkpoint of that size. Throws when `old` cannot be opened as a format-1 store.
    /// - Complexity: O(format-1 records); memory does not grow with the log.
    public static func checkOrigin(of reader: any EngineReader, upgraded: StoreUpgraded, from old: URL, size: UInt64) throws -> OriginCheck {
        let source: FormatOneSource
        do {
            source = try FormatOneSource(directory: old, checkingKey: false)
        } catch let error as LedgerStoreError {
            throw UnusableFormatOneStore(path: old.path, error: error)
        }
        let summary: FormatOneSource.Summary
        do {
            summary = try source.verify(rootAt: size) { _, _ in }
        } catch let broken as FormatOneSource.BrokenChain {
            return OriginCheck(
                brokenChain: broken.message, records: 0, headHash: .zero, merkleRoot: .zero, rootAtSize: nil, compared: 0, difference: nil)
        }
        var check = OriginCheck(
            brokenChain: nil, records: summary.records, headHash: summary.headHash, merkleRoot: summary.merkleRoot,
            rootAtSize: summary.rootAtSize, compared: 0, difference: nil)
        guard upgraded.records == summary.records, upgraded.headHash == summary.headHash, upgraded.merkleRoot == summary.merkleRoot,
            upgraded.copiedRecords == summary.batches
        else {
            check.difference = .init(
                sequence: 1,
                reason:
                    "record 1 names a format-1 log of \(upgraded.records) records with head hash \(upgraded.headHash.hex) and root "
                    + "\(upgraded.merkleRoot.hex), copied as \(upgraded.copiedRecords) records; the format-1 store holds \(summary.records) "
                    + "records with head hash \(summary.headHash.hex) and root \(summary.merkleRoot.hex), \(summary.batches) commands")
            return check
        }
        guard let first = try reader.record(1) else {
            check.difference = .init(sequence: 1, reason: "record 1 is missing")
            return check
        }
        var appender = try LogAppender(head: LogHead())
        try appender.append(stored: first)
        appender.batch = EngineBatch()
        var difference: OriginCheck.Difference?
        var compared: UInt64 = 0
        // The expected records in chunks, each compared with one pass over the same stored records.
        var pending: [(sequence: UInt64, bytes: [UInt8], formatOne: ClosedRange<UInt64>)] = []
        func compare() throws {
            defer { pending.removeAll(keepingCapacity: true) }
            guard difference == nil, let firstSequence = pending.first?.sequence, let last = pending.last?.sequence else { return }
            var index = 0
            try reader.forEachRecord(from: firstSequence, through: last) { sequence, stored in
                let expected = pending[index]
                index += 1
                guard sequence == expected.sequence, stored.elementsEqual(expected.bytes) else {
                    difference = .init(
                        sequence: expected.sequence,
                        reason: "record \(expected.sequence) is not the re-encoding of \(describe(expected.formatOne)): the copied history "
                            + "was changed after the upgrade")
                    return false
                }
                return index < pending.count
            }
            if difference == nil, index < pending.count {
                let missing = pending[index]
                difference = .init(
                    sequence: missing.sequence, reason: "record \(missing.sequence), the re-encoding of \(describe(missing.formatOne)), is missing")
            }
        }
        _ = try source.reencode(into: &appender, progress: { _ in }) { appender, formatOne in
            guard let (sequence, bytes) = appender.batch.records.last else { return }
            appender.batch = EngineBatch()
            compared += 1
            pending.append((sequence, bytes, formatOne))
            if pending.count >= 4096 { try compare() }
        }
        try compare()
        check.compared = compared
        check.difference = difference
        return check
    }

    private static func describe(_ formatOne: ClosedRange<UInt64>) -> String {
        formatOne.count == 1 ? "format-1 record \(formatOne.lowerBound)" : "format-1 records \(formatOne.lowerBound) to \(formatOne.upperBound)"
    }
}

extension LedgerEvent {
    /// A fact: the first event of a decided submission (format 1 kept its attempts in `submissions`).
    var isFact: Bool {
        switch self {
        case .transactionSubmitted, .notificationReceived, .accountDeletionRequested: true
        default: false
        }
    }
}

/// A format-1 store opened for reading only (``LMDBEnvironment/Mode/snapshot(required:)`` under an
/// exclusive `ledger.lock`).
final class FormatOneSource {
    static let databases = ["log", "event-ids", "lineage-index", "account-index", "meta", "read-models", "identities", "submissions"]

    let directory: URL
    /// Where the old key files are: `directory`, or the key directory given when `directory` has none.
    let keyDirectory: URL
    let lock: StoreLock
    let environment: LMDBEnvironment

    /// Opens the format-1 store in `directory`; with `checkingKey`, its `ledger.key` (in `directory`,
    /// else in `keyDirectory`) must be the one the store was made with (an upgrade copies it; a check
    /// of its log needs no key).
    init(directory: URL, keyDirectory: URL? = nil, checkingKey: Bool = true) throws {
        self.directory = directory
        let beside = try FileAccess.exists(directory.appendingPathComponent(LedgerKeys.fileName).path)
        self.keyDirectory = beside ? directory : keyDirectory ?? directory
        let dataFile = directory.appendingPathComponent("data.mdb").path
        guard try FileAccess.exists(dataFile) else { throw LedgerStoreError.notInitialized(directory: directory.path) }
        lock = try StoreLock(directory: directory, mode: .exclusive, busy: .storeInUse(directory: directory.path))
        let keys = checkingKey ? try LedgerKeys.load(from: self.keyDirectory.appendingPathComponent(LedgerKeys.fileName)) : nil
        do {
            environment = try LMDBEnvironment(path: directory.path, databaseNames: Self.databases, mode: .snapshot(required: "meta"))
        } catch let error as LMDBError where error.isNotFound {
            throw LedgerStoreError.corrupt("\(dataFile) holds no ledger metadata: it is not a format-1 ledger")
        } catch let error as LMDBError where error.code == EACCES || error.code == EPERM {
            throw FileAccess.deniedEnvironment(in: directory, code: error.code)
        }
        let (format, keyCheck) = try environment.read { txn in
            (try txn.get("meta", Array("format-version".utf8)).flatMap(u32), try txn.get("meta", Array("key-check".utf8)))
        }
        guard format == 1, environment.databases["submissions"] != nil, environment.databases["log"] != nil else {
            if let format, format == LedgerStore.formatVersion || format == LMDBEngine.recentFormatVersion {
                throw LedgerStoreError.corrupt(
                    checkingKey
                        ? "\(directory.path) is already a format-\(format) store: there is nothing to upgrade"
                        : "\(directory.path) is a format-\(format) store")
            }
            throw LedgerStoreError.corrupt("\(directory.path) is not a format-1 ledger (format \(format.map(String.init) ?? "unknown"))")
        }
        if let keys, keyCheck != keys.checkValue {
            throw LedgerStoreError.wrongKey(path: self.keyDirectory.appendingPathComponent(LedgerKeys.fileName).path)
        }
    }

    func meta(_ name: String) throws -> [UInt8]? { try environment.read { txn in try txn.get("meta", Array(name.utf8)) } }

    /// The old key files, the signing key checked against the fingerprint the old store recorded.
    func keyFiles() throws -> LedgerStore.KeyFiles {
        let ledgerKey = Data(try FileAccess.readKeyFile(keyDirectory.appendingPathComponent(LedgerKeys.fileName)))
        let signingURL = keyDirectory.appendingPathComponent(SigningKey.fileName)
        let recorded = try meta("signing-key")
        guard try FileAccess.exists(signingURL.path) else {
            if recorded != nil { throw LedgerStoreError.missingSigningKey(path: signingURL.path) }
            return LedgerStore.KeyFiles(ledgerKey: ledgerKey, signingKey: nil)
        }
        let key = try SigningKey.load(from: signingURL)
        let found = try SigningKey.fingerprint(key.publicKey)
        if let recorded, recorded != found {
            throw LedgerStoreError.wrongSigningKey(path: signingURL.path, recorded: recorded.hex, found: found.hex)
        }
        return LedgerStore.KeyFiles(ledgerKey: ledgerKey, signingKey: Data(try FileAccess.readKeyFile(signingURL)))
    }

    struct Summary {
        var records: UInt64
        var headHash: Digest32
        var merkleRoot: Digest32
        var firstRecordedAt: Timestamp?
        var configuration: [UInt8]
        /// The format-2 records the old log becomes: its commands (``FormatOne/Batcher``).
        var batches: UInt64
        /// The root of the first `rootAt` records, when ``verify(rootAt:progress:)`` was asked for one
        /// and the log holds that many.
        var rootAtSize: Digest32?
    }

    /// The old log does not verify: a record is missing, undecodable, or does not match its hash or
    /// its predecessor's, or the log does not end at the head its metadata names.
    struct BrokenChain: Error {
        var message: String
    }

    /// Streams the old log once: each record decodes, is the next sequence, links to the previous
    /// hash and hashes to its stored hash; the last one is the head the metadata names. Counts the
    /// commands the records group into (the format-2 records the upgrade writes). With `rootAt`,
    /// also the root of the log's first `rootAt` records. Throws ``BrokenChain`` when the chain does
    /// not verify.
    func verify(rootAt size: UInt64? = nil, progress: (UInt64, UInt64) -> Void) throws -> Summary {
        try environment.read { txn in
            guard let headSequence = try txn.get("meta", Array("head-sequence".utf8)).flatMap(u64),
                let headHash = try txn.get("meta", Array("head-hash".utf8)).flatMap(Digest32.init)
            else { throw BrokenChain(message: "\(directory.path): the format-1 metadata has no head") }
            let hasher = try LogHasher()
            var frontier: [Digest32] = []
            var previous = Digest32.zero
            var count: UInt64 = 0
            var first: Timestamp?
            var batcher = FormatOne.Batcher()
            var batches: UInt64 = 0
            var rootAtSize: Digest32? = size == 0 ? try MerkleLog.emptyRoot() : nil
            try txn.scan("log", from: []) { key, stored in
                guard let sequence = u64(key), sequence == count + 1 else {
                    throw BrokenChain(message: "format-1 record \(count + 1) is missing: the old chain does not verify")
                }
                let record: FormatOne.Record
                let (body, hash): (ArraySlice<UInt8>, Digest32)
                do throws(RecordDecodingError) {
                    record = try FormatOne.decode(stored, sequence: sequence)
                    (body, hash) = try FormatOne.split(stored, sequence: sequence)
                } catch {
                    throw BrokenChain(message: "format-1 record \(sequence) does not decode (\(error.reason)): the old chain does not verify")
                }
                guard record.previousHash == previous, try Digest.sha256(previous.bytes, Array(body)) == hash.bytes else {
                    throw BrokenChain(
                        message: "format-1 record \(sequence) does not match its hash or its predecessor's: the old chain does not verify")
                }
                try MerkleLog.append(try hasher.leafHash(stored), count: count, frontier: &frontier, hasher: hasher) { _, _, _ in }
                previous = hash
                count = sequence
                if sequence == size { rootAtSize = try MerkleLog.root(frontier: frontier, hasher: hasher) }
                batches += UInt64(batcher.add(record).count)
                if first == nil { first = record.recordedAt }
                if sequence % 10_000 == 0 { progress(sequence, headSequence) }
                return true
            }
            guard count == headSequence, previous == headHash else {
                throw BrokenChain(
                    message: "the format-1 log ends at record \(count) but its head names record \(headSequence): the old chain does not verify")
            }
            progress(count, headSequence)
            return Summary(
                records: count, headHash: headHash, merkleRoot: try MerkleLog.root(frontier: frontier, hasher: hasher), firstRecordedAt: first,
                configuration: try txn.get("meta", Array("configuration".utf8)) ?? [], batches: batches + (batcher.finish() == nil ? 0 : 1),
                rootAtSize: rootAtSize)
        }
    }

    /// Re-encodes every format-1 batch (one command) as one format-2 record appended to `appender`,
    /// which holds record 1 (`store-upgraded`): `at` is the batch's format-1 time, `recordedAt` the
    /// same made non-decreasing by the appender; the command key is the first 16 bytes of the
    /// batch's first event id, or for the latest attempt of a retried submission the submission's key
    /// and attempt from the old `submissions`. Calls `appended` after each record with the format-1
    /// sequence numbers it holds (the record is the last of `appender.batch.records`). Returns the
    /// superseded attempts keyed by their own batch id. The same records an upgrade writes, so
    /// ``FormatOneUpgrade/checkOrigin(of:upgraded:from:size:)`` can compare a store with them.
    func reencode(
        into appender: inout LogAppender, progress: (UInt64) -> Void, appended: (inout LogAppender, ClosedRange<UInt64>) throws -> Void
    ) throws -> Int {
        let latestAttempts = try latestAttempts()
        var caseLineages: [String: LineageKey] = [:]
        var superseded = 0
        func add(_ batch: [FormatOne.Record], _ appender: inout LogAppender) throws {
            let first = batch[0]
            var command = first.eventId.prefix128
            var attempt: UInt32 = 0
            if let latest = latestAttempts[first.sequence] {
                (command, attempt) = (latest.submission, latest.attempt)
            } else if first.event.isFact, try !isSubmission(first.eventId) {
                superseded += 1
            }
            if case .transferRequested(let request) = first.event { caseLineages[request.plan.caseId] = request.plan.lineage }
            try appender.append(
                recordedAt: first.recordedAt, at: first.recordedAt, command: command, attempt: attempt, events: batch.map(\.event),
                caseLineage: { caseLineages[$0] })
            try appended(&appender, first.sequence...(batch.last?.sequence ?? first.sequence))
        }
        var batcher = FormatOne.Batcher()
        try forEachRecord { record in
            for batch in batcher.add(record) { try add(batch, &appender) }
            if record.sequence % 10_000 == 0 { progress(record.sequence) }
        }
        if let last = batcher.finish() { try add(last, &appender) }
        return superseded
    }

    /// Visits every record in order (decoded; the chain was verified by ``verify(progress:)``).
    func forEachRecord(_ body: (FormatOne.Record) throws -> Void) throws {
        try environment.read { txn in
            try txn.scan("log", from: []) { key, stored in
                guard let sequence = u64(key) else { throw LedgerStoreError.corrupt("format-1 log key of \(key.count) bytes") }
                try body(try FormatOne.decode(stored, sequence: sequence))
                return true
            }
        }
    }

    /// The first sequence of the latest attempt of each retried submission (attempt 1 or more), with
    /// the submission's key truncated to format 2's command key.
    func latestAttempts() throws -> [UInt64: (submission: Key128, attempt: UInt32)] {
        var out: [UInt64: (submission: Key128, attempt: UInt32)] = [:]
        try environment.read { txn in
            try txn.scan("submissions", from: []) { key, value in
                guard key.count == 32, value.count == 12, let submission = Key128(prefixOf: key), let attempt = u32(Array(value[0..<4])),
                    let first = u64(Array(value[4..<12]))
                else { throw LedgerStoreError.corrupt("format-1 submissions entry of \(key.count)+\(value.count) bytes") }
                if attempt > 0 { out[first] = (submission, attempt) }
                return true
            }
        }
        return out
    }

    /// Whether `eventId` is the key of a submission (the first event id of its first attempt).
    func isSubmission(_ eventId: Digest32) throws -> Bool {
        try environment.read { txn in try txn.get("submissions", eventId.bytes) != nil }
    }

    /// The identity vault in chunks: `u` ‖ HMAC(uid) (32 bytes) → pseudonym, with the sealed UID
    /// stored under `p` ‖ pseudonym (legacy: ``SealedUID/legacy``, copied as is).
    func forEachIdentity(_ body: ([(vaultKey: Key128, account: AccountID, sealedUID: [UInt8])]) throws -> Void) throws {
        var chunk: [(vaultKey: Key128, account: AccountID, sealedUID: [UInt8])] = []
        try environment.read { txn in
            try txn.scan("identities", prefix: [LMDBAccess.vaultPrefix]) { key, value in
                guard key.count == 33, let vaultKey = Key128(prefixOf: Array(key.dropFirst())), value.count == 16,
                    let account = AccountID(value)
                else { throw LedgerStoreError.corrupt("format-1 identity entry of \(key.count)+\(value.count) bytes") }
                guard let sealed = try txn.get("identities", [LMDBAccess.earlierSealedPrefix] + value) else {
                    throw LedgerStoreError.corrupt("format-1 identity vault: account \(account) has no sealed UID")
                }
                chunk.append((vaultKey, account, [SealedUID.legacy] + sealed))
                if chunk.count >= FormatOneUpgrade.groupSize {
                    try body(chunk)
                    chunk = []
                }
            }
        }
        if !chunk.isEmpty { try body(chunk) }
    }
}

private func u64(_ bytes: [UInt8]) -> UInt64? {
    guard bytes.count == 8 else { return nil }
    return bytes.reduce(0) { $0 << 8 | UInt64($1) }
}
