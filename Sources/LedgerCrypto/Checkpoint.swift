import Foundation

/// Why a checkpoint could not be built, parsed or verified; ``message`` names the problem.
public struct CheckpointError: Error, CustomStringConvertible, Sendable, Equatable {
    /// A human-readable reason, e.g. "checkpoint is malformed: line 2 is not a tree size".
    public let message: String

    /// An error with `message`.
    public init(_ message: String) { self.message = message }

    /// The same as ``message``.
    public var description: String { message }

    static func malformed(_ reason: String) -> CheckpointError { CheckpointError("checkpoint is malformed: \(reason)") }
}

/// A transparency-log checkpoint (C2SP tlog-checkpoint) carried in a signed note (C2SP signed-note):
///
///     <origin>\n
///     <tree size, decimal>\n
///     <root hash, standard base64>\n
///     <extension line>\n ...           (zero or more)
///     \n
///     — <key name> <base64(4-byte key hash ‖ 64-byte Ed25519 signature)>\n   (one or more)
///
/// The signature covers the note body: every line up to and including the newline before the blank line.
/// Text lines may not be empty or contain control characters (so no newlines); the whole note may contain
/// no control character other than newline.
public struct Checkpoint: Equatable, Sendable {
    /// The log's origin line (identifies the log; conventionally a schema-less URL).
    public let origin: String
    /// The number of leaves in the tree.
    public let size: UInt64
    /// The 32-byte RFC 6962 root hash of the tree of `size` leaves.
    public let rootHash: [UInt8]
    /// Extension lines after the root hash, e.g. "projection bindings v1 <hex sha256>".
    public let extensions: [String]

    /// A checkpoint; throws ``CheckpointError`` when `rootHash` is not 32 bytes, or `origin` or an extension line is
    /// empty or contains a control character (such as a newline).
    public init(origin: String, size: UInt64, rootHash: [UInt8], extensions: [String] = []) throws {
        guard Checkpoint.isValidTextLine(origin) else {
            throw CheckpointError("checkpoint origin must be non-empty with no newline or control character")
        }
        guard rootHash.count == 32 else {
            throw CheckpointError("checkpoint root hash must be 32 bytes, got \(rootHash.count)")
        }
        for (offset, line) in extensions.enumerated() where !Checkpoint.isValidTextLine(line) {
            throw CheckpointError(
                "checkpoint extension line \(offset + 1) must be non-empty with no newline or control character")
        }
        self.origin = origin
        self.size = size
        self.rootHash = rootHash
        self.extensions = extensions
    }

    /// The signed note body: origin, size, base64 root hash and extension lines, each ending in a newline.
    public var body: String {
        ([origin, String(size), Data(rootHash).base64EncodedString()] + extensions).map { $0 + "\n" }.joined()
    }

    /// Checkpoints are equal when their bodies are byte-for-byte equal (not merely Unicode-equivalent).
    public static func == (lhs: Checkpoint, rhs: Checkpoint) -> Bool {
        lhs.body.utf8.elementsEqual(rhs.body.utf8)
    }

    /// The signed note: ``body``, a blank line, and one signature line by `key` under `keyName`.
    /// Throws ``CheckpointError`` for a key name that is empty or contains whitespace, "+" or a control character.
    public func signed(by key: some LedgerSigner, keyName: String) throws -> String {
        guard Checkpoint.isValidKeyName(keyName) else {
            throw CheckpointError("key name must be non-empty with no whitespace, '+' or control character")
        }
        let text = body
        let signature = try key.sign(Array(text.utf8))
        let blob = try key.publicKey.keyHash(name: keyName) + signature
        return text + "\n" + "\u{2014} \(keyName) \(Data(blob).base64EncodedString())\n"
    }

    /// Parses a signed checkpoint without verifying any signature. Signature lines must be well formed but may be
    /// by any key (and any algorithm): each is returned as its key name, 4-byte key hash and remaining signature
    /// bytes. Throws ``CheckpointError`` naming the first problem found. O(text length).
    public static func parse(_ text: String) throws -> (
        checkpoint: Checkpoint, signatures: [(keyName: String, keyHash: [UInt8], signature: [UInt8])]
    ) {
        let parsed = try parseNote(Array(text.utf8))
        return (parsed.checkpoint, parsed.signatures)
    }

    /// Parses `text` and checks it carries a valid Ed25519 signature by `publicKey` under `keyName` (signature lines
    /// by other keys are ignored). Returns the checkpoint; throws ``CheckpointError`` when the text is malformed,
    /// has no signature line with that key name and key hash, or the signature does not verify; ``CryptoError``
    /// when libcrypto fails.
    public static func verify(_ text: String, publicKey: Ed25519PublicKey, keyName: String) throws -> Checkpoint {
        let parsed = try parseNote(Array(text.utf8))
        let keyHash = try publicKey.keyHash(name: keyName)
        let candidates = parsed.signatures.filter { $0.keyName == keyName && $0.keyHash == keyHash }
        guard !candidates.isEmpty else {
            throw CheckpointError("no signature by key \(keyName) with hash \(lowercaseHex(keyHash))")
        }
        for candidate in candidates where try publicKey.isValidSignature(candidate.signature, for: parsed.body) {
            return parsed.checkpoint
        }
        throw CheckpointError("signature does not verify")
    }

    // MARK: - Parsing internals

    /// The most signature lines a note may carry (as in golang.org/x/mod/sumdb/note).
    static let maxSignatures = 100

    static func parseNote(_ bytes: [UInt8]) throws -> (
        checkpoint: Checkpoint, signatures: [(keyName: String, keyHash: [UInt8], signature: [UInt8])], body: [UInt8]
    ) {
        let newline: UInt8 = 0x0a
        if let bad = bytes.firstIndex(where: { $0 < 0x20 && $0 != newline }) {
            throw CheckpointError.malformed("control character 0x\(lowercaseHex([bytes[bad]])) at byte \(bad)")
        }
        guard bytes.last == newline else { throw CheckpointError.malformed("text does not end with a newline") }
        // The body ends at the first newline that is followed by another (the blank separator line).
        var split: Int?
        var index = 0
        while index + 1 < bytes.count {
            if bytes[index] == newline && bytes[index + 1] == newline {
                split = index
                break
            }
            index += 1
        }
        guard let split else { throw CheckpointError.malformed("no blank line between the body and the signatures") }
        let body = Array(bytes[...split])
        let checkpoint = try parseBody(body)
        let signatures = try parseSignatures(Array(bytes[(split + 2)...]))
        return (checkpoint, signatures, body)
    }

    /// Parses the body (ending in a newline, no empty lines).
    static func parseBody(_ body: [UInt8]) throws -> Checkpoint {
        let lines = body.dropLast().split(separator: 0x0a, omittingEmptySubsequences: false).map {
            String(decoding: $0, as: UTF8.self)
        }
        guard let origin = lines.first, !origin.isEmpty else { throw CheckpointError.malformed("line 1 is not an origin") }
        guard lines.count >= 2, let size = parseSize(lines[1]) else {
            throw CheckpointError.malformed("line 2 is not a tree size")
        }
        guard lines.count >= 3, let root = decodeBase64(lines[2]), root.count == 32 else {
            throw CheckpointError.malformed("line 3 is not a base64 SHA-256 root hash")
        }
        do {
            return try Checkpoint(origin: origin, size: size, rootHash: root, extensions: Array(lines.dropFirst(3)))
        } catch let error as CheckpointError {
            throw CheckpointError.malformed(error.message)
        }
    }

    /// Parses the signature block: one or more lines "— <name> <base64>\n".
    static func parseSignatures(_ block: [UInt8]) throws -> [(keyName: String, keyHash: [UInt8], signature: [UInt8])] {
        guard !block.isEmpty else { throw CheckpointError.malformed("no signature lines") }
        let lines = block.dropLast().split(separator: 0x0a, omittingEmptySubsequences: false)
        guard lines.count <= maxSignatures else {
            throw CheckpointError.malformed("more than \(maxSignatures) signature lines")
        }
        let dash = Array("\u{2014} ".utf8)
        var signatures: [(keyName: String, keyHash: [UInt8], signature: [UInt8])] = []
        for (offset, line) in lines.enumerated() {
            let number = offset + 1
            guard line.starts(with: dash) else {
                throw CheckpointError.malformed("signature line \(number) does not start with an em dash and a space")
            }
            let fields = line.dropFirst(dash.count).split(separator: 0x20, omittingEmptySubsequences: false)
            guard fields.count == 2 else {
                throw CheckpointError.malformed("signature line \(number) is not \"— <key name> <base64 signature>\"")
            }
            let name = String(decoding: fields[0], as: UTF8.self)
            guard isValidKeyName(name) else {
                throw CheckpointError.malformed("signature line \(number) has an invalid key name")
            }
            guard let blob = decodeBase64(String(decoding: fields[1], as: UTF8.self)), blob.count > 4 else {
                throw CheckpointError.malformed("signature line \(number) does not hold a base64 key hash and signature")
            }
            signatures.append((name, Array(blob.prefix(4)), Array(blob.dropFirst(4))))
        }
        return signatures
    }

    /// A decimal UInt64 with no sign and no leading zero (so each size has exactly one spelling).
    static func parseSize(_ line: String) -> UInt64? {
        let digits = Array(line.utf8)
        guard !digits.isEmpty, digits.allSatisfy({ (0x30...0x39).contains($0) }),
            digits.count == 1 || digits[0] != 0x30
        else { return nil }
        return UInt64(line)
    }

    /// Standard padded base64, accepted only in its canonical spelling (so no two texts decode to the same bytes).
    static func decodeBase64(_ text: String) -> [UInt8]? {
        guard let data = Data(base64Encoded: text), data.base64EncodedString() == text else { return nil }
        return Array(data)
    }

    /// Non-empty, and no control character (which includes newline).
    static func isValidTextLine(_ line: String) -> Bool {
        !line.isEmpty && !line.unicodeScalars.contains { $0.value < 0x20 }
    }

    /// Non-empty, with no Unicode whitespace, no "+", and no control character (C2SP signed-note key names).
    static func isValidKeyName(_ name: String) -> Bool {
        !name.isEmpty
            && !name.unicodeScalars.contains { $0.value < 0x20 || $0 == "+" || $0.properties.isWhitespace }
    }
}

/// Lowercase hex, local so this file does not depend on where the shared `[UInt8].hex` helper lives.
private func lowercaseHex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789abcdef".utf8)
    return String(decoding: bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0f)]] }, as: UTF8.self)
}
