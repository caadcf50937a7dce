public import Foundation
public import LedgerCore
import LedgerCrypto

/// `ledger upgrade`: copies a format-1 store into a new format-2 store, leaving the old one as it was.
///
/// 1. Takes the old store's `ledger.lock` exclusively (no other process may have it open) and opens its
///    environment read-only without LMDB's lock file: no file of the old store is written.
/// 2. Verifies the old hash chain record by record against its head, and computes the RFC 6962 root
///    its checkpoints were signed over (leaf = the stored record bytes).
/// 3. Creates the new store with the same `ledger.key` and `ledger-signing.key` and configuration,
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
    /// and when the new store does not verify.
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
        let summary = try source.verify { progress?(.verifyingOld, $0, $1) }
        // 3. The new store.
        let keyFiles = try source.keyFiles()
        let store = try LedgerStore.create(at: new, keyDirectory: keyDirectory, configuration: summary.configuration, keyFiles: keyFiles)
        var appender = try LogAppender(head: LogHead())
        let upgraded = StoreUpgraded(
            fromFormat: 1, records: summary.records, headHash: summary.headHash, merkleRoot: summary.merkleRoot,
            copiedRecords: summary.batches)
        try appender.append(
            recordedAt: summary.firstRecordedAt ?? clock(), at: clock(),
            command: try store.keys.command("upgrade|format 1|\(summary.headHash.hex)"), attempt: 0, events: [.storeUpgraded(upgraded)])
        // 4. Every batch as one record.
        let latestAttempts = try source.latestAttempts()
        var caseLineages: [String: LineageKey] = [:]
        var superseded = 0
        var pending = 0
        func flush() throws {
            let batch = appender.batch
            try store.write { _, writer in try writer.apply(batch) }
            appender.batch = EngineBatch()
            pending = 0
        }
        func add(_ batch: [FormatOne.Record]) throws {
            let first = batch[0]
            var command = first.eventId.prefix128
            var attempt: UInt32 = 0
            if let latest = latestAttempts[first.sequence] {
                (command, attempt) = (latest.submission, latest.attempt)
            } else if first.event.isFact, try !source.isSubmission(first.eventId) {
                superseded += 1
            }
            if case .transferRequested(let request) = first.event { caseLineages[request.plan.caseId] = request.plan.lineage }
            try appender.append(
                recordedAt: first.recordedAt, at: first.recordedAt, command: command, attempt: attempt, events: batch.map(\.event),
                caseLineage: { caseLineages[$0] })
            pending += 1
            if pending >= groupSize { try flush() }
        }
        var batcher = FormatOne.Batcher()
        try source.forEachRecord { record in
            for batch in batcher.add(record) { try add(batch) }
            if record.sequence % 10_000 == 0 { progress?(.copying, record.sequence, summary.records) }
        }
        if let last = batcher.finish() { try add(last) }
        try flush()
        guard appender.head.sequence == 1 + summary.batches else {
            throw LedgerStoreError.corrupt(
                "the upgrade wrote \(appender.head.sequence - 1) records after record 1, which announced \(summary.batches): the new store in \(newPath) is left for inspection; the old store is unchanged"
            )
        }
        progress?(.copying, summary.records, summary.records)
        // 5. The vault, then read models and indexes from the log, then the new store's verify.
        var identities = 0
        try source.forEachIdentity { chunk in
            var batch = EngineBatch()
            batch.vaultInserts = chunk
            try store.write { _, writer in try writer.apply(batch) }
            identities += chunk.count
        }
        _ = try store.replay(repair: true) { progress?(.rebuilding, $0, $1) }
        let verification = try store.replay(repair: false) { progress?(.verifyingNew, $0, $1) }
        guard verification.isIntact else {
            throw LedgerStoreError.corrupt(
                "the upgraded store in \(newPath) does not verify (\((verification.chainFault.map { "\($0)" } ?? "") + (verification.indexDifferences + verification.readModelDifferences + verification.vaultDifferences).prefix(3).joined(separator: "; "))): it is left for inspection; the old store is unchanged"
            )
        }
        return Report(
            formatOneRecords: summary.records, events: summary.records, records: try store.head().sequence, headHash: summary.headHash,
            merkleRoot: summary.merkleRoot, identities: identities, supersededAttempts: superseded, verification: verification)
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
    let keys: LedgerKeys
    let environment: LMDBEnvironment

    init(directory: URL, keyDirectory: URL? = nil) throws {
        self.directory = directory
        let beside = try FileAccess.exists(directory.appendingPathComponent(LedgerKeys.fileName).path)
        self.keyDirectory = beside ? directory : keyDirectory ?? directory
        let dataFile = directory.appendingPathComponent("data.mdb").path
        guard try FileAccess.exists(dataFile) else { throw LedgerStoreError.notInitialized(directory: directory.path) }
        lock = try StoreLock(directory: directory, mode: .exclusive, busy: .storeInUse(directory: directory.path))
        keys = try LedgerKeys.load(from: self.keyDirectory.appendingPathComponent(LedgerKeys.fileName))
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
            if format == LedgerStore.formatVersion {
                throw LedgerStoreError.corrupt(
                    "\(directory.path) is already a format-\(LedgerStore.formatVersion) store: there is nothing to upgrade")
            }
            throw LedgerStoreError.corrupt("\(directory.path) is not a format-1 ledger (format \(format.map(String.init) ?? "unknown"))")
        }
        guard keyCheck == keys.checkValue else {
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
    }

    /// Streams the old log once: each record decodes, is the next sequence, links to the previous
    /// hash and hashes to its stored hash; the last one is the head the metadata names. Counts the
    /// commands the records group into (the format-2 records the upgrade writes).
    func verify(progress: (UInt64, UInt64) -> Void) throws -> Summary {
        try environment.read { txn in
            guard let headSequence = try txn.get("meta", Array("head-sequence".utf8)).flatMap(u64),
                let headHash = try txn.get("meta", Array("head-hash".utf8)).flatMap(Digest32.init)
            else { throw LedgerStoreError.corrupt("\(directory.path): the format-1 metadata has no head") }
            let hasher = try LogHasher()
            var frontier: [Digest32] = []
            var previous = Digest32.zero
            var count: UInt64 = 0
            var first: Timestamp?
            var batcher = FormatOne.Batcher()
            var batches: UInt64 = 0
            try txn.scan("log", from: []) { key, stored in
                guard let sequence = u64(key), sequence == count + 1 else {
                    throw LedgerStoreError.corrupt("format-1 record \(count + 1) is missing: the old chain does not verify; nothing was upgraded")
                }
                let record = try FormatOne.decode(stored, sequence: sequence)
                let (body, hash) = try FormatOne.split(stored, sequence: sequence)
                guard record.previousHash == previous, try Digest.sha256(previous.bytes, Array(body)) == hash.bytes else {
                    throw LedgerStoreError.corrupt(
                        "format-1 record \(sequence) does not match its hash or its predecessor's: the old chain does not verify; nothing was upgraded"
                    )
                }
                try MerkleLog.append(try hasher.leafHash(stored), count: count, frontier: &frontier, hasher: hasher) { _, _, _ in }
                previous = hash
                count = sequence
                batches += UInt64(batcher.add(record).count)
                if first == nil { first = record.recordedAt }
                if sequence % 10_000 == 0 { progress(sequence, headSequence) }
                return true
            }
            guard count == headSequence, previous == headHash else {
                throw LedgerStoreError.corrupt(
                    "the format-1 log ends at record \(count) but its head names record \(headSequence): the old chain does not verify; nothing was upgraded"
                )
            }
            progress(count, headSequence)
            return Summary(
                records: count, headHash: headHash, merkleRoot: try MerkleLog.root(frontier: frontier, hasher: hasher), firstRecordedAt: first,
                configuration: try txn.get("meta", Array("configuration".utf8)) ?? [], batches: batches + (batcher.finish() == nil ? 0 : 1))
        }
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
    /// stored under `p` ‖ pseudonym.
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
                chunk.append((vaultKey, account, sealed))
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
