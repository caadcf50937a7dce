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

    /// Canonical JSON: sorted keys, no insignificant whitespace, slashes unescaped.
    static func canonical(_ object: Any) throws -> Data {
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    }

    /// The label before the canonical JSON the bundle signature covers: `…/v1` for format-1 bundles.
    static func signedBytes(_ body: [String: Any]) throws -> [UInt8] {
        let label = body["format"] as? String == formatOne ? "ownership-ledger/dispute-bundle/v1\n" : "ownership-ledger/dispute-bundle/v2\n"
        return Array(label.utf8) + Array(try canonical(body))
    }

    /// Verifies `data` offline against the trusted `publicKey` and returns what it proves. Throws
    /// ``Failure`` when the bundle does not verify, and ``CryptoError`` when libcrypto fails (which says
    /// nothing about the bundle).
    /// - Complexity: O(bundle size + records × log₂ checkpoint size).
    public static func verify(_ data: Data, publicKey: Ed25519PublicKey) throws -> Verified {
        do {
            return try verifyThrowing(data, publicKey: publicKey)
        } catch let error as Failure {
            throw error
        } catch let error as CryptoError {
            throw error
        } catch {
            throw Failure("\(error)")
        }
    }

    private static func verifyThrowing(_ data: Data, publicKey: Ed25519PublicKey) throws -> Verified {
        guard let object = try? JSONSerialization.jsonObject(with: data), var bundle = object as? [String: Any] else {
            throw Failure("not a JSON object")
        }
        guard try canonical(bundle) + Data("\n".utf8) == data else {
            throw Failure("the file is not in canonical form: it was edited after export")
        }
        let version = bundle["format"] as? String
        guard version == format || version == formatOne else { throw Failure("format is neither \(format) nor \(formatOne)") }
        guard let signatureText = bundle.removeValue(forKey: "bundleSignature") as? String,
            let signature = Data(base64Encoded: signatureText)
        else { throw Failure("bundleSignature is missing") }
        guard let pem = bundle["publicKey"] as? String, let embedded = try? Ed25519PublicKey(pem: pem) else {
            throw Failure("publicKey is not an Ed25519 PEM key")
        }
        guard embedded == publicKey else { throw Failure("the bundle was signed by another key than the one given") }
        guard let checkpointText = bundle["checkpoint"] as? String else { throw Failure("checkpoint is missing") }
        let origin: String
        do {
            origin = try Checkpoint.parse(checkpointText).checkpoint.origin
        } catch let error as CheckpointError {
            throw Failure("checkpoint: \(error)")
        }
        let checkpoint: Checkpoint
        do {
            checkpoint = try Checkpoint.verify(checkpointText, publicKey: publicKey, keyName: origin)
        } catch let error as CheckpointError {
            throw Failure("checkpoint: \(error)")
        }
        guard try publicKey.isValidSignature(Array(signature), for: try signedBytes(bundle)) else {
            throw Failure("the bundle signature does not verify")
        }
        // Format 1 wrote 32-byte lineage keys; the first 16 bytes are the key today.
        guard let lineageHex = bundle["lineage"] as? String, let lineageBytes = [UInt8](hex: lineageHex),
            lineageBytes.count == (version == formatOne ? 32 : 16), let key = Key128(prefixOf: lineageBytes)
        else { throw Failure("lineage is missing") }
        let lineage = LineageKey(key)
        guard let entries = bundle["records"] as? [[String: Any]] else { throw Failure("records are missing") }
        guard let treeSize = Int(exactly: checkpoint.size) else { throw Failure("checkpoint size \(checkpoint.size) is too large") }
        var records: [Record] = []
        var formatOneRecords: [FormatOne.Record] = []
        var withheld: [UInt64] = []
        var lastSequence: UInt64 = 0
        for (position, entry) in entries.enumerated() {
            let name = "record \(position + 1)"
            guard let seq = (entry["seq"] as? NSNumber)?.uint64Value, seq >= 1, seq <= checkpoint.size, seq > lastSequence else {
                throw Failure("\(name): sequence number missing, out of order or outside the checkpoint")
            }
            lastSequence = seq
            let proof = try (entry["inclusionProof"] as? [String] ?? []).map { text -> [UInt8] in
                guard let bytes = Data(base64Encoded: text) else { throw Failure("record \(seq): inclusion proof is not base64") }
                return Array(bytes)
            }
            if entry["withheld"] != nil {
                // Only the leaf hash is disclosed: the record is proven to exist at `seq`, its content is not shown.
                guard let leafText = entry["leafHash"] as? String, let leaf = Data(base64Encoded: leafText).map(Array.init),
                    try MerkleTree.verifyInclusion(
                        leafHash: leaf, index: Int(seq - 1), treeSize: treeSize, proof: proof, root: checkpoint.rootHash)
                else { throw Failure("withheld record \(seq): the inclusion proof does not lead to the checkpoint's root") }
                withheld.append(seq)
                continue
            }
            guard let storedText = entry["stored"] as? String, let stored = Data(base64Encoded: storedText).map(Array.init) else {
                throw Failure("\(name): stored bytes missing")
            }
            guard
                try MerkleTree.verifyInclusion(
                    leafHash: try MerkleTree.leafHash(stored), index: Int(seq - 1), treeSize: treeSize, proof: proof,
                    root: checkpoint.rootHash)
            else { throw Failure("record \(seq): the inclusion proof does not lead to the checkpoint's root") }
            let rendered: JSONObject
            if version == formatOne {
                let record: FormatOne.Record
                do {
                    record = try FormatOne.decode(stored, sequence: seq)
                } catch {
                    throw Failure("\(name): \(error)")
                }
                let (body, hash) = try FormatOne.split(stored, sequence: seq)
                guard try Digest.sha256(record.previousHash.bytes, Array(body)) == hash.bytes else {
                    throw Failure("record \(seq): its hash does not match its bytes")
                }
                guard Forensics.concerns(record.event, lineage: lineage) else { throw Failure("record \(seq) belongs to another lineage") }
                rendered = RecordJSON.render(record)
                formatOneRecords.append(record)
            } else {
                let record: Record
                do {
                    record = try RecordCodec.decode(stored, sequence: seq)
                } catch {
                    throw Failure("\(name): \(error)")
                }
                rendered = RecordJSON.render(record)
                records.append(record)
            }
            guard let decoded = entry["record"] as? [String: Any], try canonical(decoded) == canonical(rendered) else {
                throw Failure("record \(seq): the decoded JSON does not match the stored bytes")
            }
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
            let (text, checkpoint) = try self.checkpoint(of: reader, key: key)
            let entries: [[String: Any]] = try Forensics.lineageRecords(lineage, in: reader).map { entry in
                let sequence = entry.record.sequence
                let proof = try MerkleLog.inclusionProof(of: sequence, size: checkpoint.size, reader: reader, hasher: hasher)
                    .map { Data($0).base64EncodedString() }
                if withholdPrivate && DisputeBundle.isPrivate(entry.record) {
                    return [
                        "seq": sequence, "withheld": entry.record.events.map(\.name).joined(separator: ","),
                        "leafHash": Data(try hasher.leafHash(entry.stored).bytes).base64EncodedString(), "inclusionProof": proof,
                    ]
                }
                return [
                    "seq": sequence, "stored": Data(entry.stored).base64EncodedString(), "record": RecordJSON.render(entry.record),
                    "inclusionProof": proof,
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
        let signature = try key.sign(try DisputeBundle.signedBytes(bundle))
        bundle["bundleSignature"] = Data(signature).base64EncodedString()
        return try DisputeBundle.canonical(bundle) + Data("\n".utf8)
    }
}
