import Foundation
import LedgerCrypto
import Testing

/// The RFC 8032 TEST 1 key, so signed texts are reproducible.
func fixedKey() throws -> Ed25519PrivateKey {
    try Ed25519PrivateKey(rawRepresentation: hx("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))
}

func sampleCheckpoint() throws -> Checkpoint {
    try Checkpoint(
        origin: "ledger.example.com/log",
        size: 8,
        rootHash: hx("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"),
        extensions: ["projection bindings v1 " + String(repeating: "ab", count: 32)])
}

/// Runs `body`, expecting a ``CheckpointError``; returns its message ("" and a recorded issue otherwise).
func checkpointErrorMessage(
    sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
) -> String {
    do {
        try body()
        Issue.record("expected a CheckpointError, got success", sourceLocation: sourceLocation)
    } catch let error as CheckpointError {
        return error.message
    } catch {
        Issue.record("expected a CheckpointError, got \(error)", sourceLocation: sourceLocation)
    }
    return ""
}

@Suite struct CheckpointTests {
    @Test func bodyLayout() throws {
        let checkpoint = try sampleCheckpoint()
        #expect(
            checkpoint.body
                == "ledger.example.com/log\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\nprojection bindings v1 "
                + String(repeating: "ab", count: 32) + "\n")
        let bare = try Checkpoint(origin: "o", size: 0, rootHash: MerkleTree.emptyRoot)
        #expect(bare.body == "o\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n")
    }

    @Test func signVerifyRoundTrip() throws {
        let key = try fixedKey()
        let checkpoint = try sampleCheckpoint()
        let text = try checkpoint.signed(by: key, keyName: "ledger.example.com/log")
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 7)
        #expect(lines[4] == "")
        #expect(lines[5].hasPrefix("\u{2014} ledger.example.com/log "))
        #expect(lines[6] == "")
        #expect(text.hasPrefix(checkpoint.body + "\n\u{2014} "))

        let verified = try Checkpoint.verify(text, publicKey: key.publicKey, keyName: "ledger.example.com/log")
        #expect(verified == checkpoint)
        #expect(verified.origin == checkpoint.origin)
        #expect(verified.size == 8)
        #expect(verified.rootHash == checkpoint.rootHash)
        #expect(verified.extensions == checkpoint.extensions)

        let (parsed, signatures) = try Checkpoint.parse(text)
        #expect(parsed == checkpoint)
        #expect(signatures.count == 1)
        #expect(signatures.first?.keyName == "ledger.example.com/log")
        #expect(try signatures.first?.keyHash == key.publicKey.keyHash(name: "ledger.example.com/log"))
        #expect(signatures.first?.signature == (try key.sign(Array(checkpoint.body.utf8))))
    }

    @Test(arguments: [UInt64(0), 1, 1_000_000, UInt64.max])
    func sizesRoundTrip(size: UInt64) throws {
        let key = try Ed25519PrivateKey.generate()
        let checkpoint = try Checkpoint(origin: "example.org/ünïcode-log", size: size, rootHash: MerkleTree.emptyRoot)
        let text = try checkpoint.signed(by: key, keyName: "k")
        #expect(try Checkpoint.verify(text, publicKey: key.publicKey, keyName: "k") == checkpoint)
    }

    /// Every single-byte change of a signed checkpoint (and every truncation) is rejected with an error.
    @Test func everySingleByteChangeFails() throws {
        let key = try fixedKey()
        let text = try sampleCheckpoint().signed(by: key, keyName: "ledger.example.com/log")
        let bytes = Array(text.utf8)
        var rejected = 0
        for index in bytes.indices {
            let replacements = Set([bytes[index] ^ 0x01, bytes[index] ^ 0x20, 0x0a, 0x20, 0x41, 0x30, 0x2b, 0x00, 0xff])
            for replacement in replacements where replacement != bytes[index] {
                var mutated = bytes
                mutated[index] = replacement
                let mutatedText = String(decoding: mutated, as: UTF8.self)
                #expect(throws: CheckpointError.self, "byte \(index) → \(replacement)") {
                    try Checkpoint.verify(mutatedText, publicKey: key.publicKey, keyName: "ledger.example.com/log")
                }
                rejected += 1
            }
        }
        for length in 0..<bytes.count {
            let prefix = String(decoding: bytes[..<length], as: UTF8.self)
            #expect(throws: CheckpointError.self, "prefix of \(length) bytes") {
                try Checkpoint.verify(prefix, publicKey: key.publicKey, keyName: "ledger.example.com/log")
            }
        }
        #expect(rejected > bytes.count * 5)
    }

    @Test func wrongKeyFails() throws {
        let key = try fixedKey()
        let other = try Ed25519PrivateKey.generate()
        let checkpoint = try sampleCheckpoint()
        let text = try checkpoint.signed(by: key, keyName: "log")

        let otherHash = try other.publicKey.keyHash(name: "log")
        let message = checkpointErrorMessage { _ = try Checkpoint.verify(text, publicKey: other.publicKey, keyName: "log") }
        #expect(message == "no signature by key log with hash \(toHex(otherHash))")

        let renamed = checkpointErrorMessage { _ = try Checkpoint.verify(text, publicKey: key.publicKey, keyName: "log2") }
        #expect(renamed.hasPrefix("no signature by key log2 with hash "))

        // A line claiming the right name and key hash but carrying another key's signature.
        let forgedSignature = try other.sign(Array(checkpoint.body.utf8))
        let forged =
            checkpoint.body + "\n\u{2014} log "
            + Data(try key.publicKey.keyHash(name: "log") + forgedSignature).base64EncodedString() + "\n"
        let forgedMessage = checkpointErrorMessage { _ = try Checkpoint.verify(forged, publicKey: key.publicKey, keyName: "log") }
        #expect(forgedMessage == "signature does not verify")
    }

    @Test func cosignedNoteVerifiesUnderEachKey() throws {
        let log = try fixedKey()
        let witness = try Ed25519PrivateKey.generate()
        let checkpoint = try sampleCheckpoint()
        let signedByLog = try checkpoint.signed(by: log, keyName: "log")
        let signedByWitness = try checkpoint.signed(by: witness, keyName: "witness")
        let witnessLine = try #require(signedByWitness.split(separator: "\n").last)
        // A signature of another algorithm (key hash + 10 bytes) is parsed but ignored by verify.
        let foreignLine = "\u{2014} foreign " + Data([1, 2, 3, 4] + [UInt8](repeating: 9, count: 10)).base64EncodedString()
        let cosigned = signedByLog + witnessLine + "\n" + foreignLine + "\n"

        #expect(try Checkpoint.verify(cosigned, publicKey: log.publicKey, keyName: "log") == checkpoint)
        #expect(try Checkpoint.verify(cosigned, publicKey: witness.publicKey, keyName: "witness") == checkpoint)
        let (_, signatures) = try Checkpoint.parse(cosigned)
        #expect(signatures.map(\.keyName) == ["log", "witness", "foreign"])
        #expect(signatures.last?.signature.count == 10)
    }

    struct Malformed: Sendable, CustomTestStringConvertible {
        let name: String
        let text: String
        let message: String
        var testDescription: String { name }
    }

    static let goodBody = "example.org/log\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n"
    static let someSignature = "\u{2014} log " + Data([UInt8](repeating: 1, count: 68)).base64EncodedString() + "\n"

    static let malformed: [Malformed] = [
        Malformed(name: "empty", text: "", message: "checkpoint is malformed: text does not end with a newline"),
        Malformed(
            name: "no final newline", text: goodBody + "\n" + someSignature.dropLast(),
            message: "checkpoint is malformed: text does not end with a newline"),
        Malformed(
            name: "no blank line", text: goodBody + someSignature,
            message: "checkpoint is malformed: no blank line between the body and the signatures"),
        Malformed(
            name: "no signatures", text: goodBody + "\n",
            message: "checkpoint is malformed: no signature lines"),
        Malformed(
            name: "empty origin", text: "\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n\n" + someSignature,
            message: "checkpoint is malformed: line 1 is not an origin"),
        Malformed(
            name: "missing size", text: "example.org/log\n\n" + someSignature,
            message: "checkpoint is malformed: line 2 is not a tree size"),
        Malformed(
            name: "size with leading zero", text: "example.org/log\n08\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n\n" + someSignature,
            message: "checkpoint is malformed: line 2 is not a tree size"),
        Malformed(
            name: "negative size", text: "example.org/log\n-8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n\n" + someSignature,
            message: "checkpoint is malformed: line 2 is not a tree size"),
        Malformed(
            name: "size overflows UInt64",
            text: "example.org/log\n18446744073709551616\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n\n" + someSignature,
            message: "checkpoint is malformed: line 2 is not a tree size"),
        Malformed(
            name: "hex root hash",
            text: "example.org/log\n8\n5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328\n\n" + someSignature,
            message: "checkpoint is malformed: line 3 is not a base64 SHA-256 root hash"),
        Malformed(
            name: "short root hash", text: "example.org/log\n8\nXcnaeacGWamtVZy3Ad7Zoqudgjqt\n\n" + someSignature,
            message: "checkpoint is malformed: line 3 is not a base64 SHA-256 root hash"),
        Malformed(
            name: "non-canonical base64 root",
            text: "example.org/log\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyh=\n\n" + someSignature,
            message: "checkpoint is malformed: line 3 is not a base64 SHA-256 root hash"),
        Malformed(
            name: "missing root hash", text: "example.org/log\n8\n\n" + someSignature,
            message: "checkpoint is malformed: line 3 is not a base64 SHA-256 root hash"),
        Malformed(
            name: "carriage return", text: "example.org/log\r\n8\nXcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=\n\n" + someSignature,
            message: "checkpoint is malformed: control character 0x0d at byte 15"),
        Malformed(
            name: "hyphen instead of em dash", text: goodBody + "\n- log AAAA\n",
            message: "checkpoint is malformed: signature line 1 does not start with an em dash and a space"),
        Malformed(
            name: "blank signature line", text: goodBody + "\n" + someSignature + "\n",
            message: "checkpoint is malformed: signature line 2 does not start with an em dash and a space"),
        Malformed(
            name: "signature line with three fields", text: goodBody + "\n\u{2014} log extra AAAAAAAA\n",
            message: "checkpoint is malformed: signature line 1 is not \"— <key name> <base64 signature>\""),
        Malformed(
            name: "signature line without signature", text: goodBody + "\n\u{2014} log\n",
            message: "checkpoint is malformed: signature line 1 is not \"— <key name> <base64 signature>\""),
        Malformed(
            name: "key name with plus", text: goodBody + "\n\u{2014} lo+g AAAAAAAA\n",
            message: "checkpoint is malformed: signature line 1 has an invalid key name"),
        Malformed(
            name: "signature not base64", text: goodBody + "\n\u{2014} log not*base64\n",
            message: "checkpoint is malformed: signature line 1 does not hold a base64 key hash and signature"),
        Malformed(
            name: "signature shorter than a key hash", text: goodBody + "\n\u{2014} log AAAAAA==\n",
            message: "checkpoint is malformed: signature line 1 does not hold a base64 key hash and signature"),
        Malformed(
            name: "too many signatures", text: goodBody + "\n" + String(repeating: someSignature, count: 101),
            message: "checkpoint is malformed: more than 100 signature lines"),
    ]

    @Test(arguments: malformed)
    func malformedInputNamesTheProblem(_ input: Malformed) throws {
        let key = try fixedKey()
        let parseMessage = checkpointErrorMessage { _ = try Checkpoint.parse(input.text) }
        #expect(parseMessage == input.message)
        let verifyMessage = checkpointErrorMessage { _ = try Checkpoint.verify(input.text, publicKey: key.publicKey, keyName: "log") }
        #expect(verifyMessage == input.message)
    }

    @Test func invalidFieldsAreRejectedWhenBuilding() throws {
        let root = try MerkleTree.emptyRoot
        #expect(throws: CheckpointError.self) { try Checkpoint(origin: "", size: 1, rootHash: root) }
        #expect(throws: CheckpointError.self) { try Checkpoint(origin: "a\nb", size: 1, rootHash: root) }
        #expect(throws: CheckpointError.self) { try Checkpoint(origin: "a\rb", size: 1, rootHash: root) }
        #expect(throws: CheckpointError.self) { try Checkpoint(origin: "o", size: 1, rootHash: Array(root.dropLast())) }
        #expect(throws: CheckpointError.self) { try Checkpoint(origin: "o", size: 1, rootHash: root, extensions: [""]) }
        #expect(throws: CheckpointError.self) { try Checkpoint(origin: "o", size: 1, rootHash: root, extensions: ["ok", "x\ny"]) }
        let checkpoint = try Checkpoint(origin: "o", size: 1, rootHash: root)
        let key = try fixedKey()
        for name in ["", "a b", "a+b", "a\nb", "tab\tname", "nbsp\u{00a0}name"] {
            #expect(throws: CheckpointError.self, "key name \(name.debugDescription)") {
                try checkpoint.signed(by: key, keyName: name)
            }
        }
    }

    @Test func equalityIsByteForByte() throws {
        let composed = try Checkpoint(origin: "caf\u{e9}", size: 1, rootHash: MerkleTree.emptyRoot)
        let decomposed = try Checkpoint(origin: "cafe\u{301}", size: 1, rootHash: MerkleTree.emptyRoot)
        #expect(composed.origin == decomposed.origin)  // Swift String equality is canonical equivalence...
        #expect(composed != decomposed)  // ...but the signed bytes differ, so the checkpoints do not.
    }
}
