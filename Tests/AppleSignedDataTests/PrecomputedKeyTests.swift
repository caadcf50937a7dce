import Foundation
import Testing

@testable import AppleSignedData

/// A leaf key in steady use verifies ES256 signatures with its multiples precomputed: its verdicts
/// are exactly libcrypto's `ECDSA_do_verify` verdicts, for valid, tampered and out-of-range signatures.
@Suite struct PrecomputedKeyTests {
    /// n, the order of P-256, big-endian.
    static let order: [UInt8] = [
        0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51,
    ]

    func leafKey(precomputeAfter: Int) throws -> PublicKey {
        try #require(X509Certificate(der: Vectors.testLeaf)).publicKey(precomputeAfter: precomputeAfter).get()
    }

    func sign(_ message: [UInt8]) throws -> [UInt8] { try TestJWSSigner.signES256(message, privateKeyPEM: Vectors.leafKey) }

    func verify(_ key: PublicKey, _ signature: [UInt8], _ message: [UInt8]) throws -> Bool {
        try message.withUnsafeBytes { bytes throws(VerificationError) in try key.verifyES256(signature: signature, message: bytes) }
    }

    /// `a − b` for 32-byte big-endian numbers with a ≥ b.
    static func subtract(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] {
        var result = [UInt8](repeating: 0, count: 32)
        var borrow = 0
        for index in (0..<32).reversed() {
            var digit = Int(a[index]) - Int(b[index]) - borrow
            borrow = digit < 0 ? 1 : 0
            if digit < 0 { digit += 256 }
            result[index] = UInt8(digit)
        }
        return result
    }

    @Test func aKeyIsPrecomputedOnlyAfterEnoughSignaturesVerified() throws {
        let key = try leafKey(precomputeAfter: 3)
        let message = Array("a message".utf8)
        let signature = try sign(message)
        var tampered = signature
        tampered[40] ^= 1
        for _ in 0..<5 { #expect(try !verify(key, tampered, message)) }  // failures do not count
        #expect(!key.hasPrecomputedMultiples)
        for _ in 0..<2 { #expect(try verify(key, signature, message)) }
        #expect(!key.hasPrecomputedMultiples)
        #expect(try verify(key, signature, message))
        #expect(key.hasPrecomputedMultiples)
        #expect(try verify(key, signature, message))
        #expect(try !verify(key, tampered, message))
    }

    @Test func verdictsWithPrecomputedMultiplesAreLibcryptosVerdicts() throws {
        let precomputed = try leafKey(precomputeAfter: 1)
        let plain = try leafKey(precomputeAfter: .max)
        let first = Array("warm-up".utf8)
        #expect(try verify(precomputed, try sign(first), first))
        #expect(precomputed.hasPrecomputedMultiples)
        for index in 0..<40 {
            let message = Array("transaction \(index)".utf8)
            let signature = try sign(message)
            let r = Array(signature[..<32])
            let s = Array(signature[32...])
            var cases: [(name: String, signature: [UInt8], message: [UInt8], valid: Bool)] = [
                ("valid", signature, message, true),
                // (r, n − s) is the same signature's other form: ECDSA accepts both.
                ("n - s", r + Self.subtract(Self.order, s), message, true),
                ("other message", signature, message + [0], false),
                ("swapped", s + r, message, false),
                ("r = 0", [UInt8](repeating: 0, count: 32) + s, message, false),
                ("s = 0", r + [UInt8](repeating: 0, count: 32), message, false),
                ("r = n", Self.order + s, message, false),
                ("s = n", r + Self.order, message, false),
                ("r = 2^256 - 1", [UInt8](repeating: 0xFF, count: 32) + s, message, false),
                ("s = 2^256 - 1", r + [UInt8](repeating: 0xFF, count: 32), message, false),
                ("short", Array(signature.dropLast()), message, false),
            ]
            for bit in [0, 7, 100, 255, 256, 300, 511] {
                var flipped = signature
                flipped[bit / 8] ^= UInt8(1 << (bit % 8))
                cases.append(("bit \(bit)", flipped, message, false))
            }
            for test in cases {
                let withTable = try verify(precomputed, test.signature, test.message)
                let without = try verify(plain, test.signature, test.message)
                #expect(withTable == test.valid && without == test.valid, "\(test.name), message \(index)")
            }
        }
        #expect(!plain.hasPrecomputedMultiples)
    }

    @Test func manyThreadsVerifyWhileTheKeyIsPrecomputed() throws {
        let key = try leafKey(precomputeAfter: PublicKey.signaturesBeforePrecomputing)
        let signed = try (0..<64).map { index in
            let message = Array("purchase \(index)".utf8)
            return (message, try sign(message))
        }
        let verdicts = Verdicts()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for (index, (message, signature)) in signed.enumerated() {
                var bad = signature
                bad[index % 64] ^= 0x10
                let good = (try? verify(key, signature, message)) == true
                let refused = (try? verify(key, bad, message)) == false
                verdicts.lock.withLock { verdicts.wrong += (good ? 0 : 1) + (refused ? 0 : 1) }
            }
        }
        #expect(verdicts.wrong == 0)
        #expect(key.hasPrecomputedMultiples)
    }

    final class Verdicts: @unchecked Sendable {
        let lock = NSLock()
        var wrong = 0
    }
}
