import Foundation
import LedgerCrypto
import Testing

@Suite struct Ed25519Tests {
    struct RFC8032Vector: Sendable, CustomTestStringConvertible {
        let name: String
        let secretKey: String
        let publicKey: String
        let message: String
        let signature: String
        var testDescription: String { name }
    }

    /// RFC 8032 §7.1 TEST 1 and TEST 2.
    static let rfc8032: [RFC8032Vector] = [
        RFC8032Vector(
            name: "TEST 1",
            secretKey: "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
            publicKey: "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
            message: "",
            signature:
                "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        ),
        RFC8032Vector(
            name: "TEST 2",
            secretKey: "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
            publicKey: "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
            message: "72",
            signature:
                "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
        ),
    ]

    @Test(arguments: rfc8032)
    func rfc8032Vector(_ vector: RFC8032Vector) throws {
        let key = try Ed25519PrivateKey(rawRepresentation: hx(vector.secretKey))
        #expect(toHex(key.publicKey.rawRepresentation) == vector.publicKey)
        #expect(toHex(key.rawRepresentation) == vector.secretKey)
        let signature = try key.sign(hx(vector.message))
        #expect(toHex(signature) == vector.signature)
        let publicKey = try Ed25519PublicKey(rawRepresentation: hx(vector.publicKey))
        #expect(publicKey == key.publicKey)
        #expect(try publicKey.isValidSignature(hx(vector.signature), for: hx(vector.message)))
        #expect(try !publicKey.isValidSignature(hx(vector.signature), for: hx(vector.message) + [0]))
    }

    @Test func signVerifyRoundTrip() throws {
        let key = try Ed25519PrivateKey.generate()
        let other = try Ed25519PrivateKey.generate()
        #expect(key.rawRepresentation != other.rawRepresentation)
        let message = Array("checkpoint body\n".utf8)
        let signature = try key.sign(message)
        #expect(signature.count == 64)
        #expect(try key.publicKey.isValidSignature(signature, for: message))
        #expect(try !other.publicKey.isValidSignature(signature, for: message))
        #expect(try !key.publicKey.isValidSignature(signature, for: Array("checkpoint body".utf8)))
        for index in [0, 31, 32, 63] {
            var bad = signature
            bad[index] ^= 0x80
            #expect(try !key.publicKey.isValidSignature(bad, for: message))
        }
        // Ed25519 is deterministic.
        #expect(try key.sign(message) == signature)
        // A large message.
        let big = [UInt8](repeating: 0xab, count: 1 << 20)
        #expect(try key.publicKey.isValidSignature(try key.sign(big), for: big))
    }

    @Test func wrongLengthsFailCleanly() throws {
        let key = try Ed25519PrivateKey.generate()
        let message: [UInt8] = [1, 2, 3]
        let signature = try key.sign(message)
        for length in [0, 1, 32, 63, 65, 128] {
            let candidate = Array((signature + signature + signature).prefix(length))
            #expect(try !key.publicKey.isValidSignature(candidate, for: message), "signature of \(length) bytes")
        }
        for length in [0, 16, 31, 33, 64] {
            let bytes = [UInt8](repeating: 7, count: length)
            #expect(throws: Ed25519Error.invalidKeyLength(length)) { try Ed25519PublicKey(rawRepresentation: bytes) }
            #expect(throws: Ed25519Error.invalidKeyLength(length)) { try Ed25519PrivateKey(rawRepresentation: bytes) }
        }
        // 32 bytes that are not a canonical curve point: verification is false, not a crash.
        let notAPoint = try Ed25519PublicKey(rawRepresentation: [UInt8](repeating: 0xff, count: 32))
        #expect(try !notAPoint.isValidSignature(signature, for: message))
        #expect(try !notAPoint.isValidSignature([UInt8](repeating: 0, count: 64), for: message))
    }

    @Test func pemRoundTrip() throws {
        let key = try Ed25519PrivateKey.generate()
        let pem = key.pem
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----\n"))
        #expect(pem.hasSuffix("-----END PRIVATE KEY-----\n"))
        let parsed = try Ed25519PrivateKey(pem: pem)
        #expect(parsed.rawRepresentation == key.rawRepresentation)
        #expect(parsed.publicKey == key.publicKey)

        let publicPEM = key.publicKey.pem
        #expect(publicPEM.hasPrefix("-----BEGIN PUBLIC KEY-----\n"))
        #expect(try Ed25519PublicKey(pem: publicPEM) == key.publicKey)
    }

    /// RFC 8410 §10.1 and §10.3 examples (the same key pair), which also pins our PEM encoding byte for byte.
    @Test func rfc8410Examples() throws {
        let privatePEM = """
            -----BEGIN PRIVATE KEY-----
            MC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC
            -----END PRIVATE KEY-----

            """
        let publicPEM = """
            -----BEGIN PUBLIC KEY-----
            MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=
            -----END PUBLIC KEY-----

            """
        let key = try Ed25519PrivateKey(pem: privatePEM)
        #expect(toHex(key.rawRepresentation) == "d4ee72dbf913584ad5b6d8f1f769f8ad3afe7c28cbf1d4fbe097a88f44755842")
        #expect(toHex(key.publicKey.rawRepresentation) == "19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1")
        #expect(key.pem == privatePEM)
        #expect(key.publicKey.pem == publicPEM)
        #expect(try Ed25519PublicKey(pem: publicPEM) == key.publicKey)
    }

    @Test func badPEMIsRejected() throws {
        let p256 = """
            -----BEGIN PRIVATE KEY-----
            MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgHLg4COhwmkJfJJFh
            yV4kFCxi8RE9Yv9Yadkqb580oUOhRANCAARQO8bxTPC7pKUdpb7zpYodM2EJC6X4
            0dCNYMCfyYdd74kh7kBjE0/STbFYfRbb/Bsg3MpIpRzFjaB2kdqpyfOk
            -----END PRIVATE KEY-----
            """
        let ed448Public = """
            -----BEGIN PUBLIC KEY-----
            MEMwBQYDK2VxAzoAJE2hvGRy7AFZ+y7QJO+BxPHLc+eWN7XKcyNT/b7828uUFMb4
            3PSW37zC5gobjF0YVEsD+eKfcWiA
            -----END PUBLIC KEY-----
            """
        // Encrypted with passphrase "secret": must fail (not prompt on a terminal).
        let encrypted = """
            -----BEGIN ENCRYPTED PRIVATE KEY-----
            MIGbMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAjThzVWFPu/hgICCAAw
            DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEEHNnehdBRQ4RWM8cqarDA3oEQK2G
            KQ9yR83iRSWeDs5TDhjdfIhfApUvEsR6Gfev1f32sydHFITe5DRTcQdptgdOBeoc
            2t9635BDyTUHVFgdHZM=
            -----END ENCRYPTED PRIVATE KEY-----
            """
        #expect(throws: Ed25519Error.notEd25519) { try Ed25519PrivateKey(pem: p256) }
        #expect(throws: Ed25519Error.notEd25519) { try Ed25519PublicKey(pem: ed448Public) }
        #expect(throws: Ed25519Error.self) { try Ed25519PrivateKey(pem: encrypted) }

        let key = try Ed25519PrivateKey.generate()
        var corrupted = Array(key.pem.utf8)
        corrupted[40] = UInt8(ascii: "!")
        for text in [
            "", "hello", "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n", key.publicKey.pem,
            String(decoding: corrupted, as: UTF8.self),
        ] {
            #expect(throws: Ed25519Error.self) { try Ed25519PrivateKey(pem: text) }
        }
        for text in ["", "garbage", key.pem] {
            #expect(throws: Ed25519Error.self) { try Ed25519PublicKey(pem: text) }
        }
        // The error says what went wrong, and signing still works afterwards.
        do {
            _ = try Ed25519PublicKey(pem: "garbage")
        } catch {
            #expect("\(error)".hasPrefix("not a valid PEM key"))
        }
        #expect(try key.publicKey.isValidSignature(try key.sign([1]), for: [1]))
    }

    /// The C2SP signed-note key hash and signature agree with the Go reference (golang.org/x/mod/sumdb/note)
    /// example: verifier key PeterNeumann+c74f20a3+ARpc2Qc…, signer key PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFAL….
    @Test func signedNoteReferenceExample() throws {
        let seed = try #require(Data(base64Encoded: "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")).dropFirst()
        let raw = try #require(Data(base64Encoded: "ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")).dropFirst()
        let key = try Ed25519PrivateKey(rawRepresentation: Array(seed))
        #expect(key.publicKey.rawRepresentation == Array(raw))
        #expect(try toHex(key.publicKey.keyHash(name: "PeterNeumann")) == "c74f20a3")
        #expect(try key.publicKey.keyHash(name: "PeterNeumann2") != key.publicKey.keyHash(name: "PeterNeumann"))

        let text = Array("If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n".utf8)
        let blob = try #require(
            Data(base64Encoded: "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="))
        #expect(try Array(blob.prefix(4)) == key.publicKey.keyHash(name: "PeterNeumann"))
        #expect(try key.sign(text) == Array(blob.dropFirst(4)))
        #expect(try key.publicKey.isValidSignature(Array(blob.dropFirst(4)), for: text))
    }

    @Test func descriptionHidesTheSeed() throws {
        let key = try fixedKey()
        let text = "\(key)"
        #expect(!text.contains(toHex(key.rawRepresentation)))
        #expect(text == "Ed25519PrivateKey(public: \(toHex(key.publicKey.rawRepresentation)))")
    }

    @Test func keysAreSendableAndHashable() async throws {
        let key = try Ed25519PrivateKey.generate()
        let signature = try await Task.detached { try key.sign([42]) }.value
        #expect(try key.publicKey.isValidSignature(signature, for: [42]))
        let set: Set<Ed25519PublicKey> = [key.publicKey, try Ed25519PublicKey(rawRepresentation: key.publicKey.rawRepresentation)]
        #expect(set.count == 1)
    }
}
