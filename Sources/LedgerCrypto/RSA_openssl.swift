import COpenSSL
import Foundation

/// The RSA public key of an X.509 certificate, for RS256 signatures (RSASSA-PKCS1-v1_5 with
/// SHA-256), as Google's Firebase ID token certificates carry. Safe to use from many threads.
public final class RSAPublicKey: @unchecked Sendable {
    /// libcrypto's `RSA*`, decoded once: each signature goes to `RSA_verify` with no EVP set-up.
    private let key: OpaquePointer
    /// The modulus size in bits.
    public let bits: Int

    /// The key of the single PEM certificate `certificatePEM`; nil when it is not a certificate
    /// or its key is not RSA.
    /// - Throws: ``CryptoError`` when libcrypto itself fails (no verdict on the certificate).
    public init?(certificatePEM: String) throws(CryptoError) {
        let bytes = Array(certificatePEM.utf8)
        // BIO_new_mem_buf does not copy, so the buffer must outlive the read.
        let read = bytes.withUnsafeBufferPointer { buffer -> (bio: Bool, certificate: OpaquePointer?) in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(clamping: buffer.count)) else { return (false, nil) }
            defer { BIO_free(bio) }
            return (true, PEM_read_bio_X509(bio, nil, nil, nil))
        }
        guard read.bio else { throw CryptoError("BIO_new_mem_buf") }
        let certificate = read.certificate
        defer { ERR_clear_error() }  // a refusal is the answer; OpenSSL's queued reasons are not needed
        guard let certificate else { return nil }
        defer { X509_free(certificate) }
        guard let publicKey = X509_get_pubkey(certificate) else { return nil }
        defer { EVP_PKEY_free(publicKey) }
        guard EVP_PKEY_get_base_id(publicKey) == EVP_PKEY_RSA else { return nil }
        guard let key = ledger_pkey_get1_rsa(publicKey) else { throw CryptoError("EVP_PKEY_get1_RSA") }
        self.key = key
        bits = Int(EVP_PKEY_get_bits(publicKey))
    }

    deinit { ledger_rsa_free(key) }

    /// True when `signature` is this key's RS256 signature of `message`, false when it is not.
    /// - Throws: ``CryptoError`` when libcrypto itself fails (no verdict on the signature).
    public func isValidRS256Signature(_ signature: [UInt8], for message: [UInt8]) throws(CryptoError) -> Bool {
        guard !signature.isEmpty, let length = UInt32(exactly: signature.count) else { return false }
        let digest = try message.withUnsafeBytes { bytes in Result { () throws(CryptoError) in try Digest.sha256(bytes) } }.get()
        // RSASSA-PKCS1-v1_5: the decrypted block must be exactly the padded DigestInfo of SHA-256(message).
        let verified = digest.withBytes { digest in
            signature.withUnsafeBufferPointer { signature in
                ledger_rsa_verify_sha256(digest.baseAddress?.assumingMemoryBound(to: UInt8.self), signature.baseAddress, length, key)
            }
        }
        ERR_clear_error()  // a signature that does not verify queues its reasons
        return verified == 1
    }
}

/// RSASSA-PKCS1-v1_5 signatures with a PEM private key, for the tools and tests that build tokens
/// (Firebase's RS256, and the RS512 a verifier must refuse). Nothing in the ledger signs with RSA.
public enum RSASigner {
    /// The hash signed over.
    public enum Hash: Sendable {
        case sha256, sha512
    }

    /// The signature of `message` with the RSA key in `privateKeyPEM` (PKCS#8 or PKCS#1), hashed with `hash`.
    /// - Throws: ``CryptoError`` naming the call when the key does not parse or libcrypto fails.
    /// The key of the last PEM signed with is kept parsed: libcrypto 3 takes milliseconds to decode a
    /// PEM key, ten times an RSA-2048 signature, and tools sign thousands of tokens with one key.
    public static func sign(_ message: [UInt8], privateKeyPEM: String, hash: Hash) throws -> [UInt8] {
        let key = try lastKey.parsed(privateKeyPEM) { pem in
            let key = try EVPKey.pem(
                pem, algorithm: "RSA", invalid: { CryptoError("PEM_read_bio_PrivateKey", detail: $0) }, read: EVPKey.readPrivateKey)
            guard EVP_PKEY_get_base_id(key.pointer) == EVP_PKEY_RSA else {
                throw CryptoError("PEM_read_bio_PrivateKey", detail: "the key is not an RSA key")
            }
            return key
        }
        switch hash {
        case .sha256: return try key.sign(message, digest: EVP_sha256(), "RS256")
        case .sha512: return try key.sign(message, digest: EVP_sha512(), "RS512")
        }
    }

    private static let lastKey = LastParsedKey<EVPKey>()
}

/// The last key parsed from a PEM text, kept for the next use of the same text (thread-safe). For
/// the signing tools: libcrypto's keys are safe to sign with from many threads at once.
package final class LastParsedKey<Key>: @unchecked Sendable {
    private let lock = NSLock()
    private var last: (pem: String, key: Key)?

    package init() {}

    /// The key of `pem`: the one kept when `pem` is the last text parsed, else `parse(pem)`, kept.
    package func parsed(_ pem: String, _ parse: (String) throws -> Key) throws -> Key {
        if let last = lock.withLock({ last }), last.pem == pem { return last.key }
        let key = try parse(pem)
        lock.withLock { last = (pem, key) }
        return key
    }
}
