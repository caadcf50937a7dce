import Foundation
public import LedgerCore
import LedgerCrypto

/// What ``LedgerStore/migrate(from:to:progress:)`` copied and checked.
public struct MigrationReport: Sendable {
    public var records: UInt64
    public var readModels: Int
    public var identities: Int
    /// The source's head at the start of the copy, which the copy's head equals.
    public var head: LogHead
    /// The Merkle root of those records (a checkpoint's root), the same in both stores.
    public var root: Digest32
    /// The copy's full verification (chain, Merkle nodes, invariants, read models, indexes).
    public var verification: ReplayReport
}

extension LedgerStore {
    /// Records (and vault entries, read-model entries) per write group of a copy.
    static let migrationChunk = 5_000

    /// Copies the ledger in `source` into a new store at `target` (refused unless empty: a store
    /// directory that holds no ledger, a database without the ledger's tables), with the same key
    /// files and configuration, from one snapshot of the source:
    /// - every record byte for byte, in order, each with the index entries and Merkle nodes it
    ///   implies (recomputed, not copied), so the copy's chain hash and Merkle root are computed
    ///   afresh from its bytes and must equal the source's head and root;
    /// - the persisted read models and the identity vault (which the log cannot reproduce);
    /// then verifies the copy in full (as `ledger verify`). Throws ``LedgerStoreError/corrupt(_:)``
    /// when the copy's chain or root differs from the source's, or the copy does not verify.
    /// `progress` gets (stage, done, total). Writers to the source should be stopped first: what
    /// they append after the snapshot is not copied (and is reported by comparing heads after).
    /// - Complexity: O(n) in one pass over the source, memory bounded by the chunk size and the
    ///   number of transfer cases.
    public static func migrate(
        from source: LedgerStore, to target: StoreLocation, progress: ((String, UInt64, UInt64) -> Void)? = nil
    ) throws -> (LedgerStore, MigrationReport) {
        let keyFiles = KeyFiles(
            ledgerKey: Data(try FileAccess.readKeyFile(source.keyDirectory.appendingPathComponent(LedgerKeys.fileName))),
            signingKey: try FileAccess.exists(source.signingKeyURL.path) ? Data(try FileAccess.readKeyFile(source.signingKeyURL)) : nil)
        let copy = try create(at: target, configuration: try source.configuration(), keyFiles: keyFiles)
        let hasher = try LogHasher()
        var report = try source.read { reader -> MigrationReport in
            let head = try reader.head()
            // Records, with what each implies, appended as the copy's own log would append them.
            var appender = try LogAppender(head: LogHead())
            var caseLineages: [String: LineageKey] = [:]
            var next: UInt64 = 1
            while next <= head.sequence {
                let last = min(head.sequence, next + UInt64(migrationChunk) - 1)
                try reader.forEachRecord(from: next, through: last) { sequence, bytes in
                    guard sequence == appender.head.sequence + 1 else {
                        throw LedgerStoreError.corrupt("record \(appender.head.sequence + 1) is missing from the source")
                    }
                    let record = try appender.append(stored: Array(bytes)) { caseLineages[$0] }
                    for case .transferRequested(let request) in record.events { caseLineages[request.plan.caseId] = request.plan.lineage }
                    return true
                }
                guard appender.head.sequence == last else {
                    throw LedgerStoreError.corrupt("record \(appender.head.sequence + 1) is missing from the source")
                }
                let batch = appender.batch
                try copy.write { _, writer in try writer.apply(batch) }
                appender.batch = EngineBatch()
                progress?("records", last, head.sequence)
                next = last + 1
            }
            guard appender.head.sequence == head.sequence, appender.head.chainHash == head.chainHash, appender.head.frontier == head.frontier
            else {
                throw LedgerStoreError.corrupt(
                    "the source's records do not hash to its head (chain \(appender.head.chainHash) over \(appender.head.sequence) records, head \(head.chainHash)): run `ledger verify` on the source"
                )
            }
            // Read models and the identity vault, in chunks.
            var readModels = 0
            var pending: [([UInt8], [UInt8])] = []
            func flushModels() throws {
                let entries = pending
                try copy.write { _, writer in try writer.putReadModels(entries) }
                readModels += entries.count
                pending = []
            }
            try reader.forEachReadModel(from: []) { key, value in
                pending.append((key, value))
                if pending.count == migrationChunk { try flushModels() }
                return true
            }
            try flushModels()
            var identities = 0
            var batch = EngineBatch()
            func flushIdentities() throws {
                let full = batch
                try copy.write { _, writer in try writer.apply(full) }
                identities += full.vaultInserts.count
                batch = EngineBatch()
            }
            try reader.forEachIdentity { vaultKey, account, sealed in
                batch.vaultInserts.append((vaultKey, account, sealed))
                if batch.vaultInserts.count == migrationChunk { try flushIdentities() }
                return true
            }
            try flushIdentities()
            let root = try MerkleLog.root(frontier: head.frontier, hasher: hasher)
            return MigrationReport(
                records: head.sequence, readModels: readModels, identities: identities, head: head, root: root,
                verification: ReplayReport(
                    verifiedRecords: 0, events: 0, chainFault: nil, violations: [], readModelDifferences: [], indexDifferences: [],
                    lineages: 0))
        }
        progress?("verify", 0, report.records)
        report.verification = try copy.replay { done, total in progress?("verify", done, total) }
        let (copiedHead, copiedRoot) = try copy.read { reader in
            let head = try reader.head()
            return (head, try MerkleLog.root(size: head.sequence, reader: reader, hasher: hasher))
        }
        guard copiedHead == report.head, copiedRoot == report.root else {
            throw LedgerStoreError.corrupt(
                "the copy's head (\(copiedHead.sequence) records, chain \(copiedHead.chainHash), root \(copiedRoot)) differs from the source's (\(report.head.sequence), \(report.head.chainHash), \(report.root))"
            )
        }
        return (copy, report)
    }
}
