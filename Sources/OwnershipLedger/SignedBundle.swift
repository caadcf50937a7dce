import Foundation
import LedgerCore
import LedgerCrypto
import LedgerStore

/// What dispute bundles and release evidence share: one file of canonical JSON (sorted keys, no
/// insignificant whitespace, slashes and non-ASCII unescaped, one line ending in a newline), signed
/// as a whole by the ledger's signing key after a label naming the file's kind, holding a checkpoint
/// signed at export and records each proven against it (docs/forensics.md).
enum SignedBundle {
    /// Runs a verification, passing on ``DisputeBundle/Failure`` (the file does not verify) and
    /// ``CryptoError`` (libcrypto failed, which says nothing about the file) and turning anything else
    /// (a decoding error) into a failure.
    static func verifying<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as DisputeBundle.Failure {
            throw error
        } catch let error as CryptoError {
            throw error
        } catch {
            throw DisputeBundle.Failure("\(error)")
        }
    }

    /// Canonical JSON: sorted keys, no insignificant whitespace, slashes unescaped.
    static func canonical(_ object: Any) throws -> Data {
        try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
    }

    /// The bytes the bundle signature covers: `label` (ending in a newline), then the canonical JSON of
    /// every field but `bundleSignature`.
    static func signedBytes(_ body: [String: Any], label: String) throws -> [UInt8] { Array(label.utf8) + Array(try canonical(body)) }

    /// Signs `body` and returns the file: canonical JSON with `bundleSignature`, and a newline.
    static func seal(_ body: [String: Any], label: String, signer: any LedgerSigner) throws -> Data {
        var bundle = body
        bundle["bundleSignature"] = Data(try signer.sign(try signedBytes(body, label: label))).base64EncodedString()
        return try canonical(bundle) + Data("\n".utf8)
    }

    /// The entry of a record proven against a checkpoint of `size` records: `seq`, `stored` (base64),
    /// `record` (decoded JSON, as `ledger log`) and `inclusionProof` (base64 hashes).
    static func entry(_ record: Record, stored: [UInt8], size: UInt64, reader: any EngineReader, hasher: LogHasher) throws -> [String: Any] {
        [
            "seq": record.sequence, "stored": Data(stored).base64EncodedString(), "record": RecordJSON.render(record),
            "inclusionProof": try inclusionProof(of: record.sequence, size: size, reader: reader, hasher: hasher),
        ]
    }

    /// The RFC 6962 inclusion proof of record `sequence` in the first `size` records, base64.
    static func inclusionProof(of sequence: UInt64, size: UInt64, reader: any EngineReader, hasher: LogHasher) throws -> [String] {
        try MerkleLog.inclusionProof(of: sequence, size: size, reader: reader, hasher: hasher).map { Data($0).base64EncodedString() }
    }

    /// A file checked up to its records: parsed, canonical, of one of `labels`' formats (format →
    /// signature label), signed by `publicKey` (which the file must embed) over its label and body,
    /// with a checkpoint signed by the same key. Returns the body without `bundleSignature`.
    static func open(
        _ data: Data, publicKey: Ed25519PublicKey, labels: [String: String]
    ) throws -> (body: [String: Any], checkpoint: Checkpoint, origin: String) {
        guard let object = try? JSONSerialization.jsonObject(with: data), var body = object as? [String: Any] else {
            throw DisputeBundle.Failure("not a JSON object")
        }
        guard try canonical(body) + Data("\n".utf8) == data else {
            throw DisputeBundle.Failure("the file is not in canonical form: it was edited after export")
        }
        guard let format = body["format"] as? String, let label = labels[format] else {
            throw DisputeBundle.Failure("format is not one of \(labels.keys.sorted().joined(separator: ", "))")
        }
        guard let signatureText = body.removeValue(forKey: "bundleSignature") as? String, let signature = Base64.decode(signatureText)
        else { throw DisputeBundle.Failure("bundleSignature is missing or not base64") }
        guard let pem = body["publicKey"] as? String, let embedded = try? Ed25519PublicKey(pem: pem) else {
            throw DisputeBundle.Failure("publicKey is not an Ed25519 PEM key")
        }
        guard embedded == publicKey else { throw DisputeBundle.Failure("the file was signed by another key than the one given") }
        guard let checkpointText = body["checkpoint"] as? String else { throw DisputeBundle.Failure("checkpoint is missing") }
        let origin: String
        let checkpoint: Checkpoint
        do {
            origin = try Checkpoint.parse(checkpointText).checkpoint.origin
            checkpoint = try Checkpoint.verify(checkpointText, publicKey: publicKey, keyName: origin)
        } catch let error as CheckpointError {
            throw DisputeBundle.Failure("checkpoint: \(error)")
        }
        // The origin names the log: a checkpoint of this key's log has the origin the key gives
        // (docs/forensics.md), whatever name the signature line claims.
        let trusted = try Forensics.origin(for: publicKey)
        guard origin == trusted else {
            throw DisputeBundle.Failure("checkpoint: its origin \(origin) is not the trusted key's log (\(trusted))")
        }
        guard try publicKey.isValidSignature(signature, for: try signedBytes(body, label: label)) else {
            throw DisputeBundle.Failure("the bundle signature does not verify")
        }
        return (body, checkpoint, origin)
    }

    /// An entry's sequence number: present, after `last`, within the checkpoint.
    static func sequence(_ entry: [String: Any], position: Int, after last: UInt64, checkpoint: Checkpoint) throws -> UInt64 {
        guard let seq = (entry["seq"] as? NSNumber)?.uint64Value, seq >= 1, seq <= checkpoint.size, seq > last else {
            throw DisputeBundle.Failure("record \(position + 1): sequence number missing, out of order or outside the checkpoint")
        }
        return seq
    }

    /// Checks that `leafHash` is leaf `seq` of the checkpoint's tree by the entry's inclusion proof.
    static func proveInclusion(_ entry: [String: Any], seq: UInt64, leafHash: [UInt8], checkpoint: Checkpoint) throws {
        guard let treeSize = Int(exactly: checkpoint.size) else { throw DisputeBundle.Failure("checkpoint size \(checkpoint.size) is too large") }
        let proof = try (entry["inclusionProof"] as? [String] ?? []).map { text -> [UInt8] in
            guard let bytes = Base64.decode(text) else { throw DisputeBundle.Failure("record \(seq): inclusion proof is not base64") }
            return bytes
        }
        guard
            try MerkleTree.verifyInclusion(leafHash: leafHash, index: Int(seq - 1), treeSize: treeSize, proof: proof, root: checkpoint.rootHash)
        else { throw DisputeBundle.Failure("record \(seq): the inclusion proof does not lead to the checkpoint's root") }
    }

    /// A format-2 record entry checked against the checkpoint: its stored bytes are leaf `seq`, they
    /// decode, and its `record` JSON is exactly their decoding.
    static func record(_ entry: [String: Any], seq: UInt64, checkpoint: Checkpoint) throws -> Record {
        guard let storedText = entry["stored"] as? String, let stored = Base64.decode(storedText) else {
            throw DisputeBundle.Failure("record \(seq): stored bytes missing")
        }
        try proveInclusion(entry, seq: seq, leafHash: try MerkleTree.leafHash(stored), checkpoint: checkpoint)
        let record: Record
        do {
            record = try RecordCodec.decode(stored, sequence: seq)
        } catch {
            throw DisputeBundle.Failure("record \(seq): \(error)")
        }
        try matchesDecoding(entry, RecordJSON.render(record), seq: seq)
        return record
    }

    /// Checks an entry's `record` JSON is exactly `rendered`.
    static func matchesDecoding(_ entry: [String: Any], _ rendered: JSONObject, seq: UInt64) throws {
        guard let decoded = entry["record"] as? [String: Any], try canonical(decoded) == canonical(rendered) else {
            throw DisputeBundle.Failure("record \(seq): the decoded JSON does not match the stored bytes")
        }
    }
}
