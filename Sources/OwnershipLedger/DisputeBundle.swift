public import AppleSignedData
public import Foundation
public import LedgerCore
public import LedgerCrypto
import LedgerStore
import Projections

/// A self-contained, offline-verifiable account of one lineage's history: its records (stored bytes
/// and decoded JSON), an RFC 6962 inclusion proof for each against a checkpoint signed at export, the
/// checkpoint, and the signing public key. The whole file is canonical JSON (sorted keys, one line)
/// and is itself signed, so any changed byte fails verification.
public enum DisputeBundle {
    /// Bundles of storage-format-2 records.
    public static let format = "ownership-ledger-dispute/v2"
    /// Bundles exported before an upgrade, of format-1 records: they keep verifying.
    public static let formatOne = "ownership-ledger-dispute/v1"

    /// Why a bundle does not verify.
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public let message: String
        public init(_ message: String) { self.message = message }
        public var description: String { message }
    }

    /// What a verified bundle proves.
    public struct Verified: Sendable {
        public var origin: String
        public var checkpointSize: UInt64
        public var lineage: LineageKey
        public var subject: [String: String]
        /// The format-2 records shown in full.
        public var records: [Record]
        /// For a bundle exported before an upgrade, its format-1 records shown in full.
        public var formatOneRecords: [FormatOne.Record]
        public var timeline: [Forensics.Step]
        public var requestingAccount: AccountID?
        /// Records proven to exist (by leaf hash and inclusion proof) whose content was withheld.
        public var withheld: [UInt64]

        /// The records shown in full, format-2 and format-1 (a bundle holds one kind).
        public var shownRecords: Int { records.count + formatOneRecords.count }
    }

    /// Record kinds `withholdPrivate` leaves out: the transfer plan (its private reason, the target's
    /// authentication and the ownership evidence) and refusals (internal safeguard details).
    public static func isPrivate(_ event: LedgerEvent) -> Bool {
        switch event {
        case .transferRequested, .transferRefused: true
        default: false
        }
    }

    /// Whether a record holds a private event.
    public static func isPrivate(_ record: Record) -> Bool { record.events.contains(where: isPrivate) }

    /// The label before the canonical JSON each format's bundle signature covers.
    static let signatureLabels = [format: "ownership-ledger/dispute-bundle/v2\n", formatOne: "ownership-ledger/dispute-bundle/v1\n"]

    /// Verifies `data` offline against the trusted `publicKey` and returns what it proves. Throws
    /// ``Failure`` when the bundle does not verify, and ``CryptoError`` when libcrypto fails (which says
    /// nothing about the bundle).
    /// - Complexity: O(bundle size + records × log₂ checkpoint size).
    public static func verify(_ data: Data, publicKey: Ed25519PublicKey) throws -> Verified {
        try SignedBundle.verifying { try verifyThrowing(data, publicKey: publicKey) }
    }

    private static func verifyThrowing(_ data: Data, publicKey: Ed25519PublicKey) throws -> Verified {
        let (bundle, checkpoint, origin) = try SignedBundle.open(data, publicKey: publicKey, labels: signatureLabels)
        let version = bundle["format"] as? String
        // Format 1 wrote 32-byte lineage keys; the first 16 bytes are the key today.
        guard let lineageHex = bundle["lineage"] as? String, let lineageBytes = [UInt8](hex: lineageHex),
            lineageBytes.count == (version == formatOne ? 32 : 16), let key = Key128(prefixOf: lineageBytes)
        else { throw Failure("lineage is missing") }
        let lineage = LineageKey(key)
        guard let entries = bundle["records"] as? [[String: Any]] else { throw Failure("records are missing") }
        var records: [Record] = []
        var formatOneRecords: [FormatOne.Record] = []
        var withheld: [UInt64] = []
        var lastSequence: UInt64 = 0
        for (position, entry) in entries.enumerated() {
            let seq = try SignedBundle.sequence(entry, position: position, after: lastSequence, checkpoint: checkpoint)
            lastSequence = seq
            if entry["withheld"] != nil {
                // Only the leaf hash is disclosed: the record is proven to exist at `seq`, its content is not shown.
                guard let leafText = entry["leafHash"] as? String, let leaf = Base64.decode(leafText) else {
                    throw Failure("withheld record \(seq): leafHash is missing or not base64")
                }
                try SignedBundle.proveInclusion(entry, seq: seq, leafHash: leaf, checkpoint: checkpoint)
                withheld.append(seq)
                continue
            }
            guard version == formatOne else {
                records.append(try SignedBundle.record(entry, seq: seq, checkpoint: checkpoint))
                continue
            }
            guard let storedText = entry["stored"] as? String, let stored = Base64.decode(storedText) else {
                throw Failure("record \(position + 1): stored bytes missing")
            }
            try SignedBundle.proveInclusion(entry, seq: seq, leafHash: try MerkleTree.leafHash(stored), checkpoint: checkpoint)
            let record: FormatOne.Record
            do {
                record = try FormatOne.decode(stored, sequence: seq)
            } catch {
                throw Failure("record \(position + 1): \(error)")
            }
            let (body, hash) = try FormatOne.split(stored, sequence: seq)
            guard try Digest.sha256(record.previousHash.bytes, Array(body)) == hash.bytes else {
                throw Failure("record \(seq): its hash does not match its bytes")
            }
            guard Forensics.concerns(record.event, lineage: lineage) else { throw Failure("record \(seq) belongs to another lineage") }
            try SignedBundle.matchesDecoding(entry, RecordJSON.render(record), seq: seq)
            formatOneRecords.append(record)
        }
        for record in records where !concerns(record, lineage: lineage, visible: records, withheld: !withheld.isEmpty) {
            throw Failure("record \(record.sequence) belongs to another lineage")
        }
        var requesting: AccountID?
        if let requester = bundle["requestingAccount"] as? [String: Any] {
            guard let hex = requester["account"] as? String, let account = [UInt8](hex: hex).flatMap(AccountID.init) else {
                throw Failure("requestingAccount is malformed")
            }
            requesting = account
        }
        // Format-1 records are one event each: grouped into the commands that made them, for the timeline.
        let batches = FormatOne.batches(formatOneRecords)
        let grouped = batches.map { batch in
            Record(
                sequence: batch[0].sequence, recordedAt: batch[0].recordedAt, at: batch[0].recordedAt, command: .zero, attempt: 0,
                events: batch.map(\.event))
        }
        let timeline =
            version == formatOne
            ? Forensics.timeline(of: grouped, lineage: lineage, eventSequences: batches.map { $0.map(\.sequence) })
            : Forensics.timeline(of: records, lineage: lineage)
        return Verified(
            origin: origin, checkpointSize: checkpoint.size, lineage: lineage, subject: (bundle["subject"] as? [String: String]) ?? [:],
            records: records, formatOneRecords: formatOneRecords, timeline: timeline, requestingAccount: requesting, withheld: withheld)
    }

    /// Whether a format-2 record belongs to `lineage`'s history: it names the lineage, or it is a step
    /// of a transfer case (an approval or refusal, which name only the case) that a request or apply
    /// among `visible` (the bundle's records shown in full) ties to the lineage; with records withheld
    /// (the request itself may be one), a case step cannot be tied and is accepted as the exporter says.
    static func concerns(_ record: Record, lineage: LineageKey, visible: [Record], withheld: Bool) -> Bool {
        if record.lineages.contains(lineage) { return true }
        let caseIds = record.events.compactMap { event -> String? in
            switch event {
            case .transferApproved(let e): e.caseId
            case .transferRefused(let e): e.caseId
            default: nil
            }
        }
        guard caseIds.count == record.events.count else { return false }
        return withheld
            || caseIds.allSatisfy { caseId in
                visible.contains { other in
                    other.events.contains {
                        switch $0 {
                        case .transferRequested(let r): r.plan.caseId == caseId && r.plan.lineage == lineage
                        case .transferApplied(let a): a.caseId == caseId && a.lineage == lineage
                        default: false
                        }
                    }
                }
            }
    }
}

extension Ledger {
    /// Exports a dispute bundle for one lineage: a checkpoint of the whole log signed now, and each
    /// of the lineage's records with its inclusion proof. With `requestingUID` (a live account), the
    /// bundle names that account's pseudonym and UID so the requester can find themselves in it;
    /// every other account appears only as a pseudonym. With `withholdPrivate`, support-private records
    /// (``DisputeBundle/isPrivate(_:)``) appear only as their leaf hash and inclusion proof.
    public func exportDispute(
        originalTransactionId: String, environment: AppleEnvironment? = nil, requestingUID: String? = nil, withholdPrivate: Bool = false
    ) throws -> Data {
        let key = try signer()
        let lineage = try lineage(originalTransactionId: originalTransactionId, environment: environment)
        let hasher = try LogHasher()
        // One snapshot: the checkpoint, the records and their proofs all describe the same log.
        let (text, entries, requesting) = try store.read { reader -> (String, [[String: Any]], AccountID?) in
            let (text, checkpoint) = try Self.checkpoint(of: reader, key: key)
            let entries: [[String: Any]] = try Forensics.lineageRecords(lineage, in: reader).map { entry in
                let sequence = entry.record.sequence
                guard withholdPrivate && DisputeBundle.isPrivate(entry.record) else {
                    return try SignedBundle.entry(entry.record, stored: entry.stored, size: checkpoint.size, reader: reader, hasher: hasher)
                }
                return [
                    "seq": sequence, "withheld": entry.record.events.map(\.name).joined(separator: ","),
                    "leafHash": Data(try hasher.leafHash(entry.stored).bytes).base64EncodedString(),
                    "inclusionProof": try SignedBundle.inclusionProof(of: sequence, size: checkpoint.size, reader: reader, hasher: hasher),
                ]
            }
            return (text, entries, try requestingUID.flatMap { try store.pseudonym(ofUID: $0, in: reader) })
        }
        var bundle: [String: Any] = [
            "format": DisputeBundle.format, "lineage": lineage.description, "checkpoint": text, "publicKey": key.publicKey.pem,
            "subject": [
                "originalTransactionId": originalTransactionId, "environment": (environment ?? configuration.environment).rawValue,
            ],
            "exportedAt": LedgerTime.format(clock()), "records": entries,
        ]
        if let requestingUID {
            guard let requesting else { throw DisputeBundle.Failure("no live account has the UID \(requestingUID)") }
            bundle["requestingAccount"] = ["uid": requestingUID, "account": requesting.description]
        }
        return try SignedBundle.seal(bundle, label: DisputeBundle.signatureLabels[DisputeBundle.format] ?? "", signer: key)
    }
}
