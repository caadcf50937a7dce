public import LedgerCore
import LedgerCrypto
public import Projections

/// The first record whose bytes, hash or link is wrong.
public struct ChainFault: Equatable, Sendable, CustomStringConvertible {
    public var sequence: UInt64
    public var reason: String
    public var description: String { "record \(sequence): \(reason)" }
}

/// What one pass over the whole log found.
public struct ReplayReport: Sendable {
    /// Records whose hash and link verified before the first fault (all of them when intact).
    public var verifiedRecords: UInt64
    public var chainFault: ChainFault?
    public var violations: [InvariantViolation]
    /// Read-model entries that differ between the persisted models and a fresh replay.
    public var readModelDifferences: [String]
    /// The state a fresh replay produced.
    public var state: LedgerState

    public var isIntact: Bool { chainFault == nil && violations.isEmpty && readModelDifferences.isEmpty }
}

extension LedgerStore {
    /// Streams the whole log once: checks every record's structure, hash and link, runs the
    /// invariant checker, folds the projections, and compares them with the persisted read models.
    /// With `repair`, replaces the persisted read models with the fresh ones in the same pass.
    /// `progress` is called with (records done, total) every 10,000 records.
    /// - Complexity: O(records).
    public func replay(repair: Bool = false, progress: ((UInt64, UInt64) -> Void)? = nil) throws -> ReplayReport {
        let work = { (session: ReadSession) throws -> ReplayReport in
            let total = try session.head().sequence
            var checker = InvariantChecker(signatures: .libcrypto)
            var previousHash = Digest32.zero
            var expected: UInt64 = 1
            var fault: ChainFault?
            try session.forEachStoredRecord { sequence, stored in
                guard sequence == expected else {
                    fault = ChainFault(sequence: expected, reason: "missing (next stored record is \(sequence))")
                    return false
                }
                do {
                    let record = try RecordCodec.decode(stored, sequence: sequence)
                    let (body, hash) = try RecordCodec.split(stored, sequence: sequence)
                    guard record.previousHash == previousHash else {
                        fault = ChainFault(sequence: sequence, reason: "link broken: previous hash does not match record \(sequence - 1)")
                        return false
                    }
                    guard Digest.sha256(previousHash.bytes, Array(body)) == hash.bytes else {
                        fault = ChainFault(sequence: sequence, reason: "hash mismatch: the record's bytes were changed")
                        return false
                    }
                    previousHash = hash
                    checker.check(record)
                } catch {
                    fault = ChainFault(sequence: sequence, reason: "\(error)")
                    return false
                }
                if sequence % 10_000 == 0 { progress?(sequence, total) }
                expected += 1
                return true
            }
            let head = try session.head()
            if fault == nil, expected - 1 != head.sequence || previousHash != head.hash {
                fault = ChainFault(sequence: expected, reason: "head metadata says \(head.sequence) records ending in \(head.hash.hex)")
            }
            progress?(expected - 1, total)
            let fresh = ReadModel.entries(of: checker.state)
            let persisted = try session.readModelEntries()
            var differences: [String] = []
            for key in Set(fresh.keys).union(persisted.keys).sorted(by: { $0.lexicographicallyPrecedes($1) })
            where fresh[key] != persisted[key] {
                differences.append(
                    "\(ReadModel.describe(key)): " + (persisted[key] == nil ? "missing" : fresh[key] == nil ? "unexpected" : "differs"))
            }
            return ReplayReport(
                verifiedRecords: expected - 1, chainFault: fault, violations: checker.violations,
                readModelDifferences: differences, state: checker.state)
        }
        if repair {
            return try write { session in
                let report = try work(session.reader)
                try session.replaceReadModels(with: ReadModel.entries(of: report.state))
                return report
            }
        }
        return try read(work)
    }

    /// Recomputes the persisted read models from the log alone.
    public func rebuildReadModels(repair: Bool, progress: ((UInt64, UInt64) -> Void)? = nil) throws -> ReplayReport {
        try replay(repair: repair, progress: progress)
    }
}

extension InvariantChecker.SignatureChecks {
    /// Ed25519 and SHA-256 from libcrypto.
    public static let libcrypto = InvariantChecker.SignatureChecks(
        verify: { publicKey, message, signature in
            (try? Ed25519PublicKey(rawRepresentation: publicKey))?.isValidSignature(signature, for: message) ?? false
        },
        sha256: { Digest.sha256($0) })
}
