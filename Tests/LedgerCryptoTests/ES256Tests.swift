import Foundation
import LedgerCrypto
import LedgerTestSupport
import Testing

/// ES256 (ECDSA P-256, SHA-256, JOSE R‖S signatures): the App Store Server API's token signature and
/// the signature of Apple's signed data. Checked against the Apple test vectors, not only against itself.
@Suite struct ES256Tests {
    static let certs = LedgerBinary.packageRoot.appendingPathComponent("Tests/AppleSignedDataTests/Vectors/certs")
    static func file(_ path: String) throws -> Data { try Data(contentsOf: certs.appendingPathComponent(path)) }
    static func text(_ path: String) throws -> String { String(decoding: try file(path), as: UTF8.self) }

    @Test func theAppStoreConnectTestKeySignsAndItsPublicHalfVerifies() throws {
        let key = try ES256PrivateKey(pem: Self.text("testSigningKey.p8"))
        let message = Array("eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJ0ZXN0In0".utf8)
        let first = try key.sign(message)
        let second = try key.sign(message)
        #expect(first.count == 64 && second.count == 64)
        #expect(first != second, "ECDSA signatures are randomised")
        #expect(try key.publicKey.isValidSignature(first, for: message))
        #expect(try key.publicKey.isValidSignature(second, for: message))
        #expect(!(try key.publicKey.isValidSignature(first, for: message + [0x20])))
        var flipped = first
        flipped[63] ^= 1
        #expect(!(try key.publicKey.isValidSignature(flipped, for: message)))
        #expect(!(try key.publicKey.isValidSignature(Array(first.prefix(63)), for: message)))
        #expect(!(try key.publicKey.isValidSignature([UInt8](repeating: 0xff, count: 64), for: message)), "R and S above the group order")
        // The public key survives PEM, and the private key never appears in its description.
        #expect(try ES256PublicKey(pem: key.publicKey.pem) == key.publicKey)
        #expect(!key.description.contains("SpP55E"))
        #expect(key.description.contains(key.publicKey.subjectPublicKeyInfo.hex))
    }

    @Test func verifiesApplesTestVectorSignatureWithTheLeafKey() throws {
        // transactionInfo.jws is signed by the test PKI leaf; its public key is testLeaf.spki.der.
        let spki = [UInt8](try Self.file("testLeaf.spki.der"))
        let pem = "-----BEGIN PUBLIC KEY-----\n" + Data(spki).base64EncodedString() + "\n-----END PUBLIC KEY-----\n"
        let leaf = try ES256PublicKey(pem: pem)
        #expect(leaf.subjectPublicKeyInfo == spki)
        let jws = String(
            decoding: try Data(contentsOf: Self.certs.deletingLastPathComponent().appendingPathComponent("jws/transactionInfo.jws")), as: UTF8.self
        )
        .trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = jws.split(separator: ".")
        try #require(parts.count == 3)
        let input = Array("\(parts[0]).\(parts[1])".utf8)
        let signature = try #require(Base64URL.decode(parts[2]))
        #expect(try leaf.isValidSignature(signature, for: input))
        #expect(!(try leaf.isValidSignature(signature, for: input + [0x2e])))
        // The SEC1 private key of the same leaf has the same public half.
        #expect(try ES256PrivateKey(pem: Self.text("testLeaf.key.pem")).publicKey == leaf)
    }

    @Test func refusesKeysThatAreNotUnencryptedP256() throws {
        let p384 = """
            -----BEGIN PRIVATE KEY-----
            MIG2AgEAMBAGByqGSM49AgEGBSuBBAAiBIGeMIGbAgEBBDDTFW4muEQ9MuD1fJ2X
            /txGjuqJaAPuQslj9uXA1AQ6o3HoKPZIsZQQ1X5PnWeu/dehZANiAAT0vslQw7J3
            27OZJ7FVqwNk2847goyrdIJ1z3nesQdccOggVmNsE6ox5af6XHccyTPSBh+8988r
            VmmX9/kzTgvjVAEuZies+xevTSIhHl2stKz6PeG19bFBslstOfRpdZM=
            -----END PRIVATE KEY-----
            """
        // P-256, encrypted with passphrase "secret": refused, never a terminal prompt.
        let encrypted = """
            -----BEGIN ENCRYPTED PRIVATE KEY-----
            MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAggsa9vy+hsVwICCAAw
            DAYIKoZIhvcNAgkFADAdBglghkgBZQMEAQIEED0tcXpircYdmdvCG/6TVA0EgZDw
            8MeBqTQsPHKoDnP4J7Si1PflqPDp+rlpMmATMh9EzKbB8oguE/JBKuU70B/4RREU
            8vAH6SDu1pkgH0joP+uyGqOMl8hrwWEkFBKlfIpiSfJAuvg0ECy2JrN9k5GFkUcV
            /Gqqpk1QWf64VFRq9q6cjrsltE+8Y16yFEtr9KG7ODoWVpl6utpsH0eC2cnUzQQ=
            -----END ENCRYPTED PRIVATE KEY-----
            """
        #expect(throws: ES256Error.notP256("id-ecPublicKey on secp384r1")) { try ES256PrivateKey(pem: p384) }
        #expect(throws: ES256Error.notP256("ED25519")) { try ES256PrivateKey(pem: Ed25519PrivateKey.generate().pem) }
        let good = try ES256PrivateKey(pem: Self.text("testSigningKey.p8"))
        var corrupted = Array(try Self.text("testSigningKey.p8").utf8)
        corrupted[60] = UInt8(ascii: "!")
        for text in [
            encrypted, "", "garbage", "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n", good.publicKey.pem,
            String(decoding: corrupted, as: UTF8.self),
        ] {
            #expect(throws: ES256Error.self) { try ES256PrivateKey(pem: text) }
        }
        #expect(throws: ES256Error.self) { try ES256PublicKey(pem: Self.text("testSigningKey.p8")) }
        // One base64 character of the private scalar changed (found by the fuzzer): the scalar is valid,
        // but the public key stored beside it is another key's, so every signature would fail to verify.
        let mismatched = try Self.text("testSigningKey.p8").replacingOccurrences(of: "RqpKIs+2", with: "RqpKBs+2")
        #expect(throws: ES256Error.inconsistentKeyPair) { try ES256PrivateKey(pem: mismatched) }
        // A refusal leaves nothing behind: signing still works.
        #expect(try good.publicKey.isValidSignature(try good.sign([1, 2, 3]), for: [1, 2, 3]))
    }

    @Test func signatureSpellingsConvertBothWays() throws {
        var generator = SeededGenerator(state: 256)
        for round in 0..<64 {
            var raw = (0..<64).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if round % 4 == 0 { raw[0] = 0; raw[1] = 0x7f }  // R with leading zero bytes: a shorter DER INTEGER
            if round % 4 == 1 { raw[32] = 0x80 }  // S with the high bit set: a DER INTEGER with a 0x00 pad
            if round % 4 == 2 { raw[0] = 0; raw[1] = 0; raw[2] = 0 }
            let der = try ES256Signature.der(fromRaw: raw)
            #expect(der.first == 0x30)
            #expect(ES256Signature.raw(fromDER: der) == raw)
            #expect(ES256Signature.raw(fromDER: der + [0]) == nil, "trailing bytes after the signature")
            #expect(ES256Signature.raw(fromDER: Array(der.dropLast())) == nil)
        }
        #expect(throws: ES256Error.invalidSignatureLength(63)) { try ES256Signature.der(fromRaw: [UInt8](repeating: 1, count: 63)) }
        #expect(throws: ES256Error.invalidSignatureLength(0)) { try ES256Signature.der(fromRaw: []) }
        #expect(ES256Signature.raw(fromDER: []) == nil)
        #expect(ES256Signature.raw(fromDER: [0x30, 0x00]) == nil)
        // An INTEGER wider than 32 bytes has no R‖S spelling.
        let wide: [UInt8] = [0x30, 0x26, 0x02, 0x21, 0x01] + [UInt8](repeating: 0, count: 32) + [0x02, 0x01, 0x01]
        #expect(ES256Signature.raw(fromDER: wide) == nil)
    }
}
