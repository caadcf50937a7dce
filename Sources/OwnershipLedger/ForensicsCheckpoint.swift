public import Foundation
public import LedgerCore
public import LedgerCrypto
import LedgerStore
public import Projections

extension Forensics {
    /// A projection reducer: `StateProjection.evolve` in production; tests substitute a changed one.
    public typealias Reducer = (inout LedgerState, LedgerEvent) -> Void

    /// The extension-line prefix naming a projection state hash: `projection state v<version> <hex>`.
    public static let stateLinePrefix = "projection state v"

    /// SHA-256 over the canonical encoding of the state's read-model entries: the entry count, then
    /// each entry in ascending key order as u32 key length, key, u32 value length, value.
    /// Independent of dictionary order, so the same state always hashes the same.
    public static func stateHash(_ state: LedgerState) throws -> [UInt8] { try stateHash(entries: ReadModel.entries(of: state)) }

    /// The hash of read-model entries as ``stateHash(_:)`` computes it (e.g. of the persisted read models).
    public static func stateHash(entries: ReadModel.Entries) throws -> [UInt8] {
        var w = ByteWriter()
        w.u64(UInt64(entries.count))
        for key in entries.keys.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            w.bytes(key)
            w.bytes(entries[key] ?? [])
        }
        return try Digest.sha256(w.output)
    }

    /// `projection state v<version> <hex>`.
    public static func stateLine(version: UInt32, hash: [UInt8]) -> String { "\(stateLinePrefix)\(version) \(hash.hex)" }

    /// Parses a `projection state v<version> <hex>` line.
    public static func parseStateLine(_ line: String) -> (version: UInt32, hash: [UInt8])? {
        guard line.hasPrefix(stateLinePrefix) else { return nil }
        let parts = line.dropFirst(stateLinePrefix.count).split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 2, let version = UInt32(parts[0]), let hash = [UInt8](hex: String(parts[1])), hash.count == 32 else {
            return nil
        }
        return (version, hash)
    }

    /// The checkpoint origin (and signature key name) of the ledger whose signing key is `publicKey`:
    /// `ownership-ledger/<first 8 hex digits of SHA-256 of the raw public key>`.
    public static func origin(for publicKey: Ed25519PublicKey) throws -> String {
        "ownership-ledger/" + String(try Digest.sha256(publicKey.rawRepresentation).hex.prefix(8))
    }

    /// The hash ``stateHash(entries:)`` gives the persisted read models, streamed in key order
    /// (equal to a fresh replay's when `ledger verify` finds no read-model difference).
    static func persistedStateHash(_ reader: any EngineReader) throws -> [UInt8] {
        var count: UInt64 = 0
        try reader.forEachReadModel(from: []) { _, _ in
            count += 1
            return true
        }
        let hash = try SHA256Hasher()
        try hash.begin()
        var w = ByteWriter()
        w.u64(count)
        try hash.update(w.output)
        try reader.forEachReadModel(from: []) { key, value in
            var w = ByteWriter()
            w.bytes(key)
            w.bytes(value)
            try hash.update(w.output)
            return true
        }
        return try hash.finish()
    }

    /// One pass over the stored log for a checkpoint of `size` records: the chain (the first fault
    /// and where), the root of the first `size` records and of all, and the state after `size`
    /// records folded with `reducer` (nil when one of them cannot be decoded).
    struct LogScan {
        var head = LogHead()
        var fault: ChainFault?
        var rootAtSize: Digest32?
        var root = Digest32.zero
        var state: LedgerState?
        var upgraded: StoreUpgraded?
    }

    static func scan(_ reader: any EngineReader, size: UInt64, reducer: Reducer) throws -> LogScan {
        var scan = LogScan(head: try reader.head())
        var walk = try ChainWalk(head: scan.head)
        var state = LedgerState()
        var stateValid = true
        if size == 0 { scan.rootAtSize = try MerkleLog.emptyRoot() }
        try reader.forEachRecord(from: 1, through: scan.head.sequence) { sequence, bytes in
            guard try walk.add(sequence, bytes, reader: reader) else { return false }
            if sequence == size { scan.rootAtSize = try walk.root() }
            do {
                let record = try RecordCodec.decode(bytes, sequence: sequence)
                if sequence == 1, case .storeUpgraded(let upgraded)? = record.events.first { scan.upgraded = upgraded }
                if sequence <= size, stateValid { for event in record.events { reducer(&state, event) } }
            } catch {
                if sequence <= size { stateValid = false }
                walk.stop(ChainFault(sequence: sequence, through: sequence, reason: "\(error)"))
            }
            return true
        }
        scan.fault = walk.finish()
        scan.root = try walk.root()
        scan.state = stateValid ? state : nil
        return scan
    }
}

/// What `verify --checkpoint` found.
public struct CheckpointReport: Sendable {
    /// One `projection state` line of the checkpoint and what a replay gives today.
    public struct ProjectionCheck: Sendable {
        public var version: UInt32
        public var recorded: [UInt8]
        /// The hash a replay of the first `size` records gives with today's reducer, when its version matches.
        public var replayed: [UInt8]?
        /// `matches`, `differs`, `other-version` (made by another reducer version: not comparable) or `unavailable`.
        public var status: String
    }

    public var origin: String
    public var size: UInt64
    public var rootHash: [UInt8]
    public var signatureVerified: Bool
    /// Records in today's log.
    public var logSize: UInt64
    /// The root of today's first `size` records, when the log is that long.
    public var recomputedRoot: [UInt8]?
    /// Today's root over the whole log.
    public var currentRoot: [UInt8]
    /// The RFC 6962 consistency proof from the checkpoint to today's log.
    public var consistencyProof: [[UInt8]]
    /// The consistency proof verifies from the checkpointed root to today's root (for a format-1
    /// checkpoint, which no proof joins to today's tree: the format-1 store was given and today's
    /// log extends the upgrade's re-encoding of it, ``FormatOneCopies/match``).
    public var consistent: Bool
    public var projections: [ProjectionCheck]
    /// The first records whose bytes, hash or order are wrong, if any.
    public var chainFault: ChainFault?
    /// The first record known to be bad before the checkpoint, when it can be located.
    public var firstBadSeq: UInt64?
    /// The checkpoint was signed over the format-1 log this store was upgraded from: its size and
    /// root are the ones record 1 (`store-upgraded`) carries, or the format-1 store given (which
    /// record 1 names) has that root at that size. It proves the format-1 log, and the store's copied
    /// records only as ``formatOneCopies`` says.
    public var formatOneOrigin: Bool
    /// What was found of the records an upgrade copied, against the format-1 store.
    public enum FormatOneCopies: String, Sendable {
        /// No format-1 store was given: a format-1 checkpoint covers none of the copied records (not verified).
        case notChecked = "not-checked"
        /// The format-1 store's chain verifies, its log is the one record 1 names, and every copied
        /// record is byte for byte the upgrade's re-encoding of it.
        case match
        /// One of those does not hold (`problems` says which; `firstBadSeq` names the record).
        case differ
    }
    /// Set for a format-1 checkpoint (``formatOneOrigin``) and whenever a format-1 store was given; nil otherwise.
    public var formatOneCopies: FormatOneCopies?
    public var problems: [String]

    public var verified: Bool { problems.isEmpty }
}

extension Ledger {
    /// What signs checkpoints and bundles: the signer given when the ledger was opened (checked
    /// against the signing key the store recorded), else the signing key file (created on first use
    /// for a store made before it existed).
    public func signer() throws -> any LedgerSigner { try store.signer(externalSigner) }

    /// Signs a checkpoint of the whole log as it is now: origin, size, RFC 6962 root over the stored
    /// record bytes (from the head's Merkle frontier) and the projection state hash of the persisted
    /// read models (which `ledger verify` checks equal a fresh replay).
    /// - Complexity: O(read models); no record is read.
    public func makeCheckpoint() throws -> (text: String, checkpoint: Checkpoint) {
        let key = try signer()
        return try store.read { try Self.checkpoint(of: $0, key: key) }
    }

    /// A checkpoint of the log `reader` sees, signed with `key`, with `extensions` after the projection state line.
    static func checkpoint(
        of reader: any EngineReader, key: any LedgerSigner, extensions: [String] = []
    ) throws -> (text: String, checkpoint: Checkpoint) {
        let origin = try Forensics.origin(for: key.publicKey)
        let (head, stateHash) = (try reader.head(), try Forensics.persistedStateHash(reader))
        let checkpoint = try Checkpoint(
            origin: origin, size: head.sequence, rootHash: try MerkleLog.root(frontier: head.frontier, hasher: LogHasher()).bytes,
            extensions: [Forensics.stateLine(version: StateProjection.version, hash: stateHash)] + extensions)
        return (try checkpoint.signed(by: key, keyName: origin), checkpoint)
    }

    /// Verifies a signed checkpoint against today's log: the signature (by `publicKey`, the store's
    /// signing key by default), the root of the first `size` records, a consistency proof to today's
    /// root, and the projection state hash of a replay of those records with `reducer`.
    ///
    /// For a store upgraded from format 1, a checkpoint signed over the format-1 log (record 1,
    /// `store-upgraded`, names its size and root) proves that log only: the records the upgrade
    /// copied are covered only when `formatOneStore`, the format-1 store the upgrade left unchanged,
    /// is given and each copied record is the re-encoding of its format-1 records
    /// (``FormatOneUpgrade/checkOrigin(of:upgraded:from:size:)``); without it the report is not
    /// verified (``CheckpointReport/FormatOneCopies/notChecked``). With `formatOneStore`, a format-1
    /// checkpoint of an earlier size is checked against that store too.
    /// Throws ``CheckpointError`` only when the text is not a checkpoint at all, and the store's
    /// errors when `formatOneStore` cannot be opened as a format-1 store.
    /// - Complexity: O(records), and O(format-1 records) with `formatOneStore`.
    public func verifyCheckpoint(
        _ text: String, publicKey: Ed25519PublicKey? = nil, formatOneStore: URL? = nil, reducer: Forensics.Reducer = StateProjection.evolve
    ) throws -> CheckpointReport {
        let parsed = try Checkpoint.parse(text).checkpoint
        let key = try publicKey ?? signer().publicKey
        var problems: [String] = []
        var signatureVerified = true
        do {
            _ = try Checkpoint.verify(text, publicKey: key, keyName: parsed.origin)
        } catch let error as CheckpointError {
            signatureVerified = false
            problems.append("signature: \(error)")
        }
        let origin = try Forensics.origin(for: key)
        if parsed.origin != origin {
            problems.append("origin \(parsed.origin) is not this ledger's (\(origin))")
        }
        let (scan, proof, formatOne) = try store.read { reader -> (Forensics.LogScan, [[UInt8]], FormatOneUpgrade.OriginCheck?) in
            let scan = try Forensics.scan(reader, size: parsed.size, reducer: reducer)
            let proof =
                parsed.size > 0 && parsed.size < scan.head.sequence
                ? try MerkleLog.consistencyProof(from: parsed.size, to: scan.head.sequence, reader: reader, hasher: try LogHasher()) : []
            let formatOne = try formatOneStore.flatMap { old in
                try scan.upgraded.map { try FormatOneUpgrade.checkOrigin(of: reader, upgraded: $0, from: old, size: parsed.size) }
            }
            return (scan, proof, formatOne)
        }
        let logSize = scan.head.sequence
        // Today's root of the first `size` records (nil past the log's end).
        let here = scan.rootAtSize?.bytes
        var recomputed: [UInt8]?
        var firstBad: UInt64?
        var formatOneOrigin = false
        var copies: CheckpointReport.FormatOneCopies?
        var chainFaultReported = false
        if formatOneStore != nil && scan.upgraded == nil {
            problems.append("a format-1 store was given, but this store was not upgraded from format 1 (record 1 is not store-upgraded)")
        }
        // What the format-1 store shows, whatever the checkpoint: its chain, and the copied records.
        if let formatOne {
            copies = formatOne.matches ? .match : .differ
            if let broken = formatOne.brokenChain { problems.append("the format-1 store: \(broken)") }
            if let difference = formatOne.difference {
                firstBad = difference.sequence
                problems.append(difference.reason)
            }
        }
        let ofFormatOneStore = formatOne?.rootAtSize.map { $0.bytes == parsed.rootHash } ?? false
        if here == parsed.rootHash {
            // A checkpoint of this log (a format-2 one, for an upgraded store), whatever its size.
            recomputed = here
        } else if let upgraded = scan.upgraded, parsed.size <= upgraded.records,
            (parsed.size == upgraded.records && upgraded.merkleRoot.bytes == parsed.rootHash)
                || (ofFormatOneStore && formatOne?.difference?.sequence != 1)
        {
            // Signed over the format-1 log this store was upgraded from: record 1 names its final size
            // and root, and the format-1 store (when given) reproduces the checkpoint's root at its size.
            formatOneOrigin = true
            if formatOne == nil {
                copies = .notChecked
                problems.append(
                    "the checkpoint was signed over the format-1 log this store was upgraded from (record 1 names its \(upgraded.records) "
                        + "records and root): it proves that log only, and records 2 to \(1 + upgraded.copiedRecords) are not covered. "
                        + "Check them against the format-1 store, which the upgrade left unchanged (ledger verify --format-one-store OLD), "
                        + "or use a format-2 checkpoint signed after the upgrade")
            } else if formatOne?.brokenChain == nil && !ofFormatOneStore {
                problems.append(
                    "the format-1 store's first \(parsed.size) records do not hash to the checkpoint's root: it is not the format-1 log "
                        + "the checkpoint was signed over")
            }
        } else if let upgraded = scan.upgraded, parsed.size <= upgraded.records {
            recomputed = here
            let ofThisLog = here == nil ? "" : ", nor is it the root of this log's first \(parsed.size) records"
            if parsed.size == upgraded.records {
                problems.append(
                    "record 1 names the format-1 log this store was upgraded from: \(upgraded.records) records with root "
                        + "\(Data(upgraded.merkleRoot.bytes).base64EncodedString()); the checkpoint, of as many records, has another root\(ofThisLog). "
                        + "If it was signed over that log, the format-1 log was rewritten before the upgrade (which checks only the format-1 "
                        + "hash chain, and a rewriter recomputes it); otherwise it is not a checkpoint of this ledger")
            } else if formatOne == nil {
                let mismatch = here == nil ? "claims more records than this log's \(logSize)" : "does not match this log's first \(parsed.size)"
                problems.append(
                    "this store was upgraded from a format-1 log of \(upgraded.records) records (record 1), and the checkpoint of "
                        + "\(parsed.size) records \(mismatch): if it was signed over the format-1 log at that size, check it against the "
                        + "format-1 store, which the upgrade left unchanged (ledger verify --format-one-store OLD); otherwise history was "
                        + "rewritten, or the checkpoint is not of this ledger")
            }
            if let formatOne, formatOne.brokenChain == nil {
                if ofFormatOneStore {
                    problems.append(
                        "the format-1 store given is the log the checkpoint was signed over, but record 1 names another: this store was "
                            + "upgraded from a different or rewritten format-1 log")
                } else {
                    problems.append(
                        "the format-1 store's first \(parsed.size) records do not hash to the checkpoint's root either: history was "
                            + "rewritten (before the upgrade, or after it), or the checkpoint is not of this ledger")
                }
            }
        } else if parsed.size > logSize {
            // No record of this log is to blame: the records the checkpoint claims are not here.
            problems.append(
                "the checkpoint does not match this log: it claims \(parsed.size) records, the log has \(logSize) "
                    + "(records were removed, or the checkpoint is not of this log)")
        } else if let root = here {
            recomputed = root
            if let fault = scan.fault, fault.sequence <= parsed.size {
                firstBad = min(firstBad ?? fault.sequence, fault.sequence)
                chainFaultReported = true
                problems.append(
                    "the root of the first \(parsed.size) records differs from the checkpoint: history was rewritten; "
                        + "first bad records \(fault.sequence) to \(fault.through) (\(fault.reason))")
            } else {
                problems.append(
                    "the root of the first \(parsed.size) records differs from the checkpoint: history before it was rewritten "
                        + "and the hash chain recomputed, so the rewritten record cannot be located from the checkpoint alone")
            }
        }
        let currentRoot = scan.root.bytes
        var consistent = false
        if formatOneOrigin {
            // No consistency proof joins the two trees: the format-1 store joins them, record by record.
            consistent = copies == .match
        } else if parsed.size == 0 {
            consistent = try parsed.rootHash == MerkleTree.emptyRoot
        } else if parsed.size <= logSize {
            consistent = try MerkleTree.verifyConsistency(
                oldSize: Int(parsed.size), newSize: Int(logSize), oldRoot: parsed.rootHash, newRoot: currentRoot, proof: proof)
        }
        if !consistent && recomputed == parsed.rootHash {
            problems.append("the consistency proof from the checkpoint to today's log does not verify")
        }
        if let fault = scan.fault, !chainFaultReported {
            if fault.sequence <= parsed.size { firstBad = min(firstBad ?? fault.sequence, fault.sequence) }
            problems.append("hash chain: \(fault)")
        }
        var projections: [CheckpointReport.ProjectionCheck] = []
        let replayed = try scan.state.map(Forensics.stateHash)
        // Past the log's end there is no state of `size` records to compare (the size problem is
        // reported); a format-1 checkpoint's state line hashes format-1 read models, never comparable.
        for line in parsed.extensions where !formatOneOrigin && parsed.size <= logSize {
            guard let (version, hash) = Forensics.parseStateLine(line) else { continue }
            guard version == StateProjection.version else {
                projections.append(.init(version: version, recorded: hash, replayed: nil, status: "other-version"))
                continue
            }
            guard let replayed else {
                projections.append(.init(version: version, recorded: hash, replayed: nil, status: "unavailable"))
                problems.append("the projection state at size \(parsed.size) cannot be replayed: a record does not decode")
                continue
            }
            let matches = replayed == hash
            projections.append(.init(version: version, recorded: hash, replayed: replayed, status: matches ? "matches" : "differs"))
            if !matches {
                problems.append(
                    "projection state v\(version) after \(parsed.size) records differs from the checkpoint: the records or the reducer "
                        + "changed the past (a reducer change must bump StateProjection.version)")
            }
        }
        return CheckpointReport(
            origin: parsed.origin, size: parsed.size, rootHash: parsed.rootHash, signatureVerified: signatureVerified, logSize: logSize,
            recomputedRoot: recomputed, currentRoot: currentRoot, consistencyProof: formatOneOrigin ? [] : proof, consistent: consistent,
            projections: projections, chainFault: scan.fault, firstBadSeq: firstBad, formatOneOrigin: formatOneOrigin, formatOneCopies: copies,
            problems: problems)
    }
}
