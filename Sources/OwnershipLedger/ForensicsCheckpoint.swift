import Foundation
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

    /// One pass over the stored log: leaf hashes, the first chain fault, and the state after `size`
    /// records folded with `reducer` (nil when a record up to `size` cannot be decoded).
    struct LogScan {
        var leafHashes: [[UInt8]] = []
        var chainFault: LogFault?
        var state: LedgerState? = LedgerState()
    }

    static func scan(_ session: ReadSession, stateThrough size: UInt64, reducer: Reducer) throws -> LogScan {
        var scan = LogScan()
        var state = LedgerState()
        var stateValid = true
        var previous = Digest32.zero
        var expected: UInt64 = 1
        try session.forEachStoredRecord { sequence, stored in
            guard sequence == expected else {
                scan.chainFault = scan.chainFault ?? LogFault(sequence: expected, reason: "missing (next stored record is \(sequence))")
                return false
            }
            scan.leafHashes.append(try MerkleTree.leafHash(stored))
            // Only a record that does not decode is a fault; a failing libcrypto is an error, thrown.
            let record: Record
            let body: ArraySlice<UInt8>
            let hash: Digest32
            do throws(RecordDecodingError) {
                record = try RecordCodec.decode(stored, sequence: sequence)
                (body, hash) = try RecordCodec.split(stored, sequence: sequence)
            } catch {
                if sequence <= size { stateValid = false }
                scan.chainFault = scan.chainFault ?? LogFault(sequence: sequence, reason: "\(error)")
                expected += 1
                return true
            }
            if sequence <= size, stateValid { reducer(&state, record.event) }
            if scan.chainFault == nil {
                if record.previousHash != previous {
                    scan.chainFault = LogFault(sequence: sequence, reason: "link broken: previous hash does not match record \(sequence - 1)")
                } else if try Digest.sha256(previous.bytes, Array(body)) != hash.bytes {
                    scan.chainFault = LogFault(sequence: sequence, reason: "hash mismatch: the record's bytes were changed")
                }
                previous = hash
            }
            expected += 1
            return true
        }
        scan.state = stateValid ? state : nil
        return scan
    }
}

/// The first record of a log pass whose bytes, hash or link is wrong.
public struct LogFault: Equatable, Sendable, CustomStringConvertible {
    public var sequence: UInt64
    public var reason: String
    public var description: String { "record \(sequence): \(reason)" }
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
    /// The consistency proof verifies from the checkpointed root to today's root.
    public var consistent: Bool
    public var projections: [ProjectionCheck]
    /// The first record whose bytes, hash or link is wrong, if any.
    public var chainFault: LogFault?
    /// The first record known to be bad before the checkpoint, when it can be located.
    public var firstBadSeq: UInt64?
    public var problems: [String]

    public var verified: Bool { problems.isEmpty }
}

extension Ledger {
    /// The ledger signing key (created on first use for a store made before it existed).
    public func signingKey() throws -> Ed25519PrivateKey { try store.signingKey() }

    /// Signs a checkpoint of the whole log as it is now: origin, size, RFC 6962 root over the stored
    /// record bytes, and the projection state hash of a fresh replay.
    /// - Complexity: O(records).
    public func makeCheckpoint() throws -> (text: String, checkpoint: Checkpoint, leafHashes: [[UInt8]]) {
        let key = try signingKey()
        let origin = try Forensics.origin(for: key.publicKey)
        let scan = try store.read { session in
            try Forensics.scan(session, stateThrough: try session.head().sequence, reducer: StateProjection.evolve)
        }
        if let fault = scan.chainFault { throw LedgerStoreError.corrupt("refusing to sign a checkpoint of a broken log: \(fault)") }
        guard let state = scan.state else { throw LedgerStoreError.corrupt("a record cannot be decoded") }
        let checkpoint = try Checkpoint(
            origin: origin, size: UInt64(scan.leafHashes.count), rootHash: MerkleTree.root(leafHashes: scan.leafHashes),
            extensions: [Forensics.stateLine(version: StateProjection.version, hash: Forensics.stateHash(state))])
        return (try checkpoint.signed(by: key, keyName: origin), checkpoint, scan.leafHashes)
    }

    /// Verifies a signed checkpoint against today's log: the signature (by `publicKey`, the store's
    /// signing key by default), the root of the first `size` records, a consistency proof to today's
    /// root, and the projection state hash of a replay of those records with `reducer`.
    /// Throws ``CheckpointError`` only when the text is not a checkpoint at all.
    /// - Complexity: O(records).
    public func verifyCheckpoint(
        _ text: String, publicKey: Ed25519PublicKey? = nil, reducer: Forensics.Reducer = StateProjection.evolve
    ) throws -> CheckpointReport {
        let parsed = try Checkpoint.parse(text).checkpoint
        let key = try publicKey ?? signingKey().publicKey
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
        let scan = try store.read { try Forensics.scan($0, stateThrough: parsed.size, reducer: reducer) }
        let leaves = scan.leafHashes
        let logSize = UInt64(leaves.count)
        var recomputed: [UInt8]?
        var firstBad: UInt64?
        if parsed.size > logSize {
            problems.append("the log has \(logSize) records, fewer than the checkpoint's \(parsed.size): records were removed")
            firstBad = logSize + 1
        } else {
            let root = try MerkleTree.root(leafHashes: Array(leaves.prefix(Int(parsed.size))))
            recomputed = root
            if root != parsed.rootHash {
                if let fault = scan.chainFault, fault.sequence <= parsed.size {
                    firstBad = fault.sequence
                    problems.append(
                        "the root of the first \(parsed.size) records differs from the checkpoint: history was rewritten; "
                            + "first bad record \(fault.sequence) (\(fault.reason))")
                } else {
                    problems.append(
                        "the root of the first \(parsed.size) records differs from the checkpoint: history before it was rewritten "
                            + "and the hash chain recomputed, so the rewritten record cannot be located from the checkpoint alone")
                }
            }
        }
        let currentRoot = try MerkleTree.root(leafHashes: leaves)
        var proof: [[UInt8]] = []
        var consistent = false
        if parsed.size == 0 {
            consistent = try parsed.rootHash == MerkleTree.emptyRoot
        } else if parsed.size <= logSize {
            proof = try MerkleTree.consistencyProof(oldSize: Int(parsed.size), leafHashes: leaves)
            consistent = try MerkleTree.verifyConsistency(
                oldSize: Int(parsed.size), newSize: leaves.count, oldRoot: parsed.rootHash, newRoot: currentRoot, proof: proof)
        }
        if !consistent && recomputed == parsed.rootHash {
            problems.append("the consistency proof from the checkpoint to today's log does not verify")
        }
        if let fault = scan.chainFault, firstBad == nil {
            if fault.sequence <= parsed.size { firstBad = fault.sequence }
            problems.append("hash chain: \(fault)")
        }
        var projections: [CheckpointReport.ProjectionCheck] = []
        let replayed = try scan.state.map(Forensics.stateHash)
        for line in parsed.extensions {
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
            recomputedRoot: recomputed, currentRoot: currentRoot, consistencyProof: proof, consistent: consistent,
            projections: projections, chainFault: scan.chainFault, firstBadSeq: firstBad, problems: problems)
    }
}
