import COpenSSL
import Foundation
import Testing

@testable import LedgerCrypto

@Suite struct DigestTests {
    /// RFC 4231 §4.2–4.8 (test case 5, a truncated output, does not apply).
    static let rfc4231: [(key: [UInt8], data: [UInt8], mac: String)] = [
        ([UInt8](repeating: 0x0b, count: 20), Array("Hi There".utf8), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (Array("Jefe".utf8), Array("what do ya want for nothing?".utf8), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        (
            [UInt8](repeating: 0xaa, count: 20), [UInt8](repeating: 0xdd, count: 50),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"
        ),
        (Array(1...25), [UInt8](repeating: 0xcd, count: 50), "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
        (
            [UInt8](repeating: 0xaa, count: 131), Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        ),
        (
            [UInt8](repeating: 0xaa, count: 131),
            Array(
                "This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm."
                    .utf8),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"
        ),
    ]

    @Test func hmacMatchesRFC4231() throws {
        for (index, vector) in Self.rfc4231.enumerated() {
            #expect(toHex(try Digest.hmacSHA256(key: vector.key, message: vector.data)) == vector.mac, "test case \(index + 1)")
            let mac = try vector.data.withUnsafeBytes { try HMACSHA256Key(vector.key).authenticate($0) }
            #expect(mac.hex == vector.mac, "test case \(index + 1), key hashed once")
        }
    }

    /// The same bytes as libcrypto's one-shot `HMAC()`, for keys around the 64-byte block size and messages of every length class.
    @Test func hmacAgreesWithLibcrypto() throws {
        var random = SystemRandomNumberGenerator()
        for keyLength in [0, 1, 31, 32, 63, 64, 65, 127, 128, 200] {
            for messageLength in [0, 1, 55, 56, 63, 64, 65, 1000] {
                let key = (0..<keyLength).map { _ in UInt8.random(in: 0...255, using: &random) }
                let message = (0..<messageLength).map { _ in UInt8.random(in: 0...255, using: &random) }
                var expected = [UInt8](repeating: 0, count: 32)
                var length: UInt32 = 0
                _ = HMAC(EVP_sha256(), key, Int32(keyLength), message, messageLength, &expected, &length)
                #expect(length == 32)
                #expect(try Digest.hmacSHA256(key: key, message: message) == expected, "key \(keyLength) bytes, message \(messageLength)")
                let prepared = try HMACSHA256Key(key)
                for _ in 0..<2 {  // a prepared key is used again and again: its states are copied, never changed
                    let mac = try message.withUnsafeBytes { try prepared.authenticate($0) }
                    #expect(mac.bytes == expected, "key \(keyLength) bytes hashed once, message \(messageLength)")
                }
            }
        }
    }

    @Test func sha256OfPartsIsTheHashOfTheirConcatenation() throws {
        #expect(toHex(try Digest.sha256([])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(toHex(try Digest.sha256(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(try Digest.sha256(Array("a".utf8), [], Array("bc".utf8)) == Digest.sha256(Array("abc".utf8)))
    }

    /// The short-message SHA-256 (padded by the project, hashed by libcrypto's block function) gives
    /// the same digest as libcrypto's EVP SHA-256 for every length up to five blocks, wherever the
    /// message is split in two: the padding's edge cases (55, 56, 63, 64 bytes…) included.
    @Test func shortMessageSHA256AgreesWithEVP() throws {
        var random = SystemRandomNumberGenerator()
        for length in 0...320 {
            let message = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            let expected = try Digest.sha256(parts: [message])
            for split in Set([0, min(1, length), length / 2, max(length - 1, 0), length]) {
                let digest = try message.withUnsafeBytes { raw in
                    try Digest.sha256(UnsafeRawBufferPointer(rebasing: raw[0..<split]), UnsafeRawBufferPointer(rebasing: raw[split...]))
                }
                #expect(digest.bytes == expected, "\(length) bytes split at \(split)")
            }
        }
    }

    /// Lengths libcrypto takes as `int` are checked: a length over 2 GiB is a thrown error, not a trap.
    @Test func lengthsOverInt32AreErrorsNotTraps() throws {
        #expect(try int32Length(Int(Int32.max), "op") == Int32.max)
        let error = try #require(throws: CryptoError.self) { try int32Length(Int(Int32.max) + 1, "EVP_EncryptUpdate") }
        #expect(error.description == "EVP_EncryptUpdate failed: 2147483648 bytes is more than it accepts (2147483647)")
        #expect(throws: CryptoError.self) { try Digest.randomBytes(Int(Int32.max) + 1) }
    }

    /// A short or wrong key, or a sealed value too short to hold nonce and tag, is an error naming the problem.
    @Test func sealedBoxRefusesBadKeysAndShortValues() throws {
        let key = try Digest.randomBytes(32)
        let sealed = try SealedBox.seal(Array("uid".utf8), key: key)
        #expect(try SealedBox.open(sealed, key: key) == Array("uid".utf8))
        let shortKey = try #require(throws: CryptoError.self) { try SealedBox.seal([1], key: [1, 2]) }
        #expect(shortKey.description == "AES-GCM key failed: the key is 2 bytes, not 32")
        let short = try #require(throws: CryptoError.self) { try SealedBox.open(Array(sealed.prefix(27)), key: key) }
        #expect(short.description == "AES-GCM open failed: the sealed value is 27 bytes, shorter than nonce and tag")
        var tampered = sealed
        tampered[13] ^= 1
        #expect(throws: CryptoError.self) { try SealedBox.open(tampered, key: key) }
    }

    /// A value read back from storage that is not what `seal` made under the key is nil (the caller
    /// reports damage); only a failure of libcrypto itself, or a wrong-sized key, is thrown.
    @Test func openIfAuthenticTellsAChangedValueFromAFailure() throws {
        let key = try Digest.randomBytes(32)
        let sealed = try SealedBox.seal(Array("uid".utf8), key: key)
        #expect(try SealedBox.openIfAuthentic(sealed, key: key) == Array("uid".utf8))
        for index in sealed.indices {
            var changed = sealed
            changed[index] ^= 0x40
            #expect(try SealedBox.openIfAuthentic(changed, key: key) == nil, "byte \(index)")
        }
        #expect(try SealedBox.openIfAuthentic(Array(sealed.prefix(27)), key: key) == nil)
        #expect(try SealedBox.openIfAuthentic([], key: key) == nil)
        #expect(try SealedBox.openIfAuthentic(sealed, key: try Digest.randomBytes(32)) == nil)
        #expect(throws: CryptoError.self) { try SealedBox.openIfAuthentic(sealed, key: [1, 2]) }
        // Associated data: authenticated, not stored; only the sealer's opens.
        let bound = try SealedBox.seal(Array("uid".utf8), key: key, associatedData: [1, 2, 3])
        #expect(bound.count == sealed.count)
        #expect(try SealedBox.openIfAuthentic(bound, key: key, associatedData: [1, 2, 3]) == Array("uid".utf8))
        #expect(try SealedBox.openIfAuthentic(bound, key: key, associatedData: [1, 2, 4]) == nil)
        #expect(try SealedBox.openIfAuthentic(bound, key: key) == nil)
        #expect(try SealedBox.openIfAuthentic(sealed, key: key, associatedData: [1, 2, 3]) == nil)
    }

    /// A pool hands out every byte once: draws of any size, within a block, across blocks and larger
    /// than a block, never repeat one another (22-byte draws of random bytes colliding would take
    /// ~2^88 draws), and nonces drawn from it seal values that open.
    @Test func aRandomPoolNeverHandsOutTheSameBytesTwice() throws {
        for blockSize in [1, 22, 100, 4_096] {
            let pool = RandomPool(blockSize: blockSize)
            var seen = Set<[UInt8]>()
            for size in [22, 1, 22, 5_000, 22, 12, 22] + Array(repeating: 22, count: 300) {
                let bytes = try pool.bytes(size)
                #expect(bytes.count == size)
                if size >= 12 { #expect(seen.insert(bytes).inserted, "block \(blockSize): a draw of \(size) bytes repeated") }
            }
        }
        let key = try Digest.randomBytes(32)
        let pool = RandomPool(blockSize: 64)
        let sealed = try (0..<20).map { try SealedBox.seal(Array("uid-\($0)".utf8), key: key, random: pool) }
        #expect(Set(sealed.map { $0.prefix(12) }).count == 20)
        for (index, value) in sealed.enumerated() { #expect(try SealedBox.open(value, key: key) == Array("uid-\(index)".utf8)) }
    }

    /// A ``SealingKey`` reuses its cipher contexts: every value it seals opens to itself, with its own
    /// nonce and associated data, also right after a value that failed authentication and from several
    /// threads at once; what it seals opens with a one-off key, and the other way round.
    @Test func aSealingKeyReusesItsContextsWithoutMixingValues() throws {
        let key = try Digest.randomBytes(32)
        let sealing = try SealingKey(key)
        let pool = RandomPool(blockSize: 4_096)
        let values = (0..<40).map { Array("uid-\($0)-".utf8) + [UInt8](repeating: UInt8($0), count: $0) }
        let sealed = try values.indices.map { try sealing.seal(values[$0], associatedData: [UInt8($0)], random: pool) }
        #expect(Set(sealed.map { $0.prefix(12) }).count == values.count)
        for (index, value) in sealed.enumerated() {
            var tampered = value
            tampered[12 + index % (tampered.count - 12)] ^= 1
            #expect(try sealing.openIfAuthentic(tampered, associatedData: [UInt8(index)]) == nil)
            #expect(try sealing.openIfAuthentic(value, associatedData: [UInt8(index + 1)]) == nil)
            #expect(try sealing.open(value, associatedData: [UInt8(index)]) == values[index])
            #expect(try SealedBox.open(value, key: key, associatedData: [UInt8(index)]) == values[index])
        }
        let oneOff = try SealedBox.seal(values[7], key: key, associatedData: [9])
        #expect(try sealing.open(oneOff, associatedData: [9]) == values[7])
        #expect(throws: CryptoError.self) { try SealingKey([1, 2]) }

        let wrong = NSLock()
        nonisolated(unsafe) var mismatches = 0
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            let threadPool = RandomPool(blockSize: 256)
            for round in 0..<200 {
                let index = (thread * 7 + round) % sealed.count
                let value = Array("uid-\(thread)-\(round)".utf8)
                let roundTrip = try? sealing.open(sealing.seal(value, random: threadPool))
                let earlier = try? sealing.open(sealed[index], associatedData: [UInt8(index)])
                if roundTrip != value || earlier != values[index] { wrong.withLock { mismatches += 1 } }
            }
        }
        #expect(mismatches == 0)
    }
}
