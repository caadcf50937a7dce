import COpenSSL
import Foundation

/// Problems with Ed25519 key material or encodings (as opposed to failures inside libcrypto, which are ``CryptoError``).
public enum Ed25519Error: Error, CustomStringConvertible, Sendable, Equatable {
    /// A raw key had the wrong number of bytes (Ed25519 keys are 32 bytes).
    case invalidKeyLength(Int)
    /// The PEM text could not be parsed; the associated value carries OpenSSL's reason, if any.
    case invalidPEM(String)
    /// The PEM text holds a key of another algorithm.
    case notEd25519

    /// The reason, in words.
    public var description: String {
        switch self {
        case .invalidKeyLength(let count): return "Ed25519 key must be 32 bytes, got \(count)"
        case .invalidPEM(let detail): return detail.isEmpty ? "not a valid PEM key" : "not a valid PEM key: \(detail)"
        case .notEd25519: return "PEM key is not an Ed25519 key"
        }
    }
}

/// Owns one libcrypto `EVP_PKEY` and frees it when the last reference goes away. Used transiently, never shared.
final class EVPKey {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) { self.pointer = pointer }

    deinit { EVP_PKEY_free(pointer) }

    /// An Ed25519 private key from its 32-byte seed.
    static func ed25519Private(seed: [UInt8]) throws -> EVPKey {
        guard seed.count == 32 else { throw Ed25519Error.invalidKeyLength(seed.count) }
        guard let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, seed, seed.count) else {
            throw CryptoError("EVP_PKEY_new_raw_private_key(ED25519)")
        }
        return EVPKey(key)
    }

    /// An Ed25519 public key from its 32 raw bytes.
    static func ed25519Public(raw: [UInt8]) throws -> EVPKey {
        guard raw.count == 32 else { throw Ed25519Error.invalidKeyLength(raw.count) }
        guard let key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, raw, raw.count) else {
            throw CryptoError("EVP_PKEY_new_raw_public_key(ED25519)")
        }
        return EVPKey(key)
    }

    /// Parses a PEM block with `read` (a `PEM_read_bio_*` call) holding an `algorithm` key (OpenSSL's
    /// name: `ED25519`, `EC`, `RSA`); `invalid` makes the error for text that does not parse, from
    /// OpenSSL's reason. A libcrypto that cannot handle `algorithm` at all (no provider offers it)
    /// fails every parse the same way a malformed file does: that is a ``CryptoError``, never `invalid`,
    /// so a broken installation is not reported as a bad key file.
    static func pem(
        _ pem: String, algorithm: String, invalid: (String) -> any Error, read: (OpaquePointer) -> OpaquePointer?
    ) throws -> EVPKey {
        let bytes = Array(pem.utf8)
        guard !bytes.isEmpty else { throw invalid("empty text") }
        return try bytes.withUnsafeBytes { buffer in
            // The memory BIO only borrows `buffer`, so it must not outlive this closure.
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, try int32Length(buffer.count, "BIO_new_mem_buf")) else {
                throw CryptoError("BIO_new_mem_buf")
            }
            defer { BIO_free(bio) }
            guard let parsed = read(bio) else {
                let reason = CryptoError.drainErrorQueue()
                guard let management = EVP_KEYMGMT_fetch(nil, algorithm, nil) else {
                    throw CryptoError("EVP_KEYMGMT_fetch(\(algorithm))")
                }
                EVP_KEYMGMT_free(management)
                throw invalid(reason)
            }
            return EVPKey(parsed)
        }
    }

    /// Reads a PEM private key (PKCS#8, or the algorithm's own form such as SEC1 or PKCS#1) from a
    /// BIO: the one `PEM_read_bio_PrivateKey` call every private key parse goes through. A non-nil
    /// empty passphrase keeps OpenSSL from prompting on the terminal for an encrypted key.
    static func readPrivateKey(_ bio: OpaquePointer) -> OpaquePointer? {
        "".withCString { PEM_read_bio_PrivateKey(bio, nil, nil, UnsafeMutableRawPointer(mutating: $0)) }
    }

    /// A signature of `message` with this private key (`EVP_DigestSign`): hashed with `digest`, or
    /// none for Ed25519, which signs the message itself. `name` names the calls in errors.
    func sign(_ message: [UInt8], digest: OpaquePointer?, _ name: String) throws -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        try check(EVP_DigestSignInit(context, nil, digest, nil, pointer), "EVP_DigestSignInit(\(name))")
        var length = 0
        try check(EVP_DigestSign(context, nil, &length, message, message.count), "EVP_DigestSign(\(name), size)")
        var signature = [UInt8](repeating: 0, count: length)
        try check(EVP_DigestSign(context, &signature, &length, message, message.count), "EVP_DigestSign(\(name))")
        return Array(signature.prefix(length))
    }

    /// Parses a PEM block with `read` (a `PEM_read_bio_*` call) and checks the key is Ed25519.
    static func ed25519(pem: String, read: (OpaquePointer) -> OpaquePointer?) throws -> EVPKey {
        let key = try EVPKey.pem(pem, algorithm: "ED25519", invalid: Ed25519Error.invalidPEM, read: read)
        guard EVP_PKEY_get_id(key.pointer) == EVP_PKEY_ED25519 else { throw Ed25519Error.notEd25519 }
        return key
    }

    /// The 32 raw public key bytes.
    func rawPublicKey() throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length = out.count
        try check(EVP_PKEY_get_raw_public_key(pointer, &out, &length), "EVP_PKEY_get_raw_public_key")
        guard length == 32 else { throw Ed25519Error.invalidKeyLength(length) }
        return out
    }

    /// The 32-byte private seed.
    func rawPrivateKey() throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length = out.count
        try check(EVP_PKEY_get_raw_private_key(pointer, &out, &length), "EVP_PKEY_get_raw_private_key")
        guard length == 32 else { throw Ed25519Error.invalidKeyLength(length) }
        return out
    }
}

/// Wraps DER in PEM armour with 64-character base64 lines, as OpenSSL writes it.
func pemEncode(_ der: [UInt8], label: String) -> String {
    let base64 = Array(Data(der).base64EncodedString().utf8)
    var lines: [String] = []
    var start = 0
    while start < base64.count {
        let end = min(start + 64, base64.count)
        lines.append(String(decoding: base64[start..<end], as: UTF8.self))
        start = end
    }
    return "-----BEGIN \(label)-----\n" + lines.joined(separator: "\n") + "\n-----END \(label)-----\n"
}

/// An Ed25519 signing key (RFC 8032), held as its 32-byte seed. Its `description` shows only the public key.
public struct Ed25519PrivateKey: Sendable, CustomStringConvertible {
    /// The 32-byte seed.
    public let rawRepresentation: [UInt8]
    /// The matching verification key.
    public let publicKey: Ed25519PublicKey

    /// "Ed25519PrivateKey(public: <hex>)": never the seed, so keys can be logged or interpolated safely.
    public var description: String {
        let digits = Array("0123456789abcdef".utf8)
        let hex = publicKey.rawRepresentation.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0f)]] }
        return "Ed25519PrivateKey(public: \(String(decoding: hex, as: UTF8.self)))"
    }

    /// A new key from libcrypto's secure random generator.
    public static func generate() throws -> Ed25519PrivateKey {
        try Ed25519PrivateKey(rawRepresentation: Digest.randomBytes(32))
    }

    /// A key from its 32-byte seed (the "secret key" of RFC 8032); throws ``Ed25519Error/invalidKeyLength(_:)`` otherwise.
    public init(rawRepresentation seed: [UInt8]) throws {
        let key = try EVPKey.ed25519Private(seed: seed)
        self.rawRepresentation = seed
        self.publicKey = try Ed25519PublicKey(rawRepresentation: key.rawPublicKey())
    }

    /// Parses a PEM private key (PKCS#8 `BEGIN PRIVATE KEY`); throws when it is not an unencrypted Ed25519 key.
    public init(pem: String) throws {
        let key = try EVPKey.ed25519(pem: pem, read: EVPKey.readPrivateKey)
        try self.init(rawRepresentation: key.rawPrivateKey())
    }

    /// The key as PKCS#8 PEM (`BEGIN PRIVATE KEY`, RFC 8410), suitable for a key file.
    public var pem: String {
        // PrivateKeyInfo { version 0, AlgorithmIdentifier { id-Ed25519 }, OCTET STRING { OCTET STRING seed } }
        let prefix: [UInt8] = [
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
        ]
        return pemEncode(prefix + rawRepresentation, label: "PRIVATE KEY")
    }

    /// Signs `message` (pure Ed25519, no pre-hashing); the signature is 64 bytes. O(message length).
    public func sign(_ message: [UInt8]) throws -> [UInt8] {
        let signature = try EVPKey.ed25519Private(seed: rawRepresentation).sign(message, digest: nil, "ED25519")
        guard signature.count == 64 else { throw CryptoError("EVP_DigestSign(ED25519)", detail: "returned \(signature.count) bytes, not 64") }
        return signature
    }
}

/// An Ed25519 verification key, held as its 32 raw bytes.
public struct Ed25519PublicKey: Sendable, Hashable {
    /// The 32 raw key bytes (RFC 8032 encoding).
    public let rawRepresentation: [UInt8]

    /// A key from its 32 raw bytes; throws ``Ed25519Error/invalidKeyLength(_:)`` for any other length.
    public init(rawRepresentation: [UInt8]) throws {
        guard rawRepresentation.count == 32 else { throw Ed25519Error.invalidKeyLength(rawRepresentation.count) }
        self.rawRepresentation = rawRepresentation
    }

    /// Parses a PEM public key (SubjectPublicKeyInfo, `BEGIN PUBLIC KEY`); throws when it is not Ed25519.
    public init(pem: String) throws {
        let key = try EVPKey.ed25519(pem: pem) { bio in PEM_read_bio_PUBKEY(bio, nil, nil, nil) }
        try self.init(rawRepresentation: key.rawPublicKey())
    }

    /// The key as SubjectPublicKeyInfo PEM (`BEGIN PUBLIC KEY`, RFC 8410).
    public var pem: String {
        // SubjectPublicKeyInfo { AlgorithmIdentifier { id-Ed25519 }, BIT STRING (0 unused bits) key }
        let prefix: [UInt8] = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]
        return pemEncode(prefix + rawRepresentation, label: "PUBLIC KEY")
    }

    /// Whether `signature` is a valid Ed25519 signature of `message` under this key: false for a signature
    /// that is not 64 bytes or does not verify (also when the key is not a curve point). Throws
    /// ``CryptoError`` only when libcrypto itself fails (out of memory), which says nothing about the signature.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) throws -> Bool {
        guard signature.count == 64 else { return false }
        let key = try EVPKey.ed25519Public(raw: rawRepresentation)
        guard let context = EVP_MD_CTX_new() else { throw CryptoError("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        try check(EVP_DigestVerifyInit(context, nil, nil, nil, key.pointer), "EVP_DigestVerifyInit(ED25519)")
        switch EVP_DigestVerify(context, signature, signature.count, message, message.count) {
        case 1: return true
        case 0:
            // A signature that does not verify leaves entries on the thread's error queue; keep them out of later CryptoErrors.
            ERR_clear_error()
            return false
        default: throw CryptoError("EVP_DigestVerify(ED25519)")
        }
    }

    /// The C2SP signed-note key hash: the first 4 bytes of SHA-256(name ‖ 0x0A ‖ 0x01 ‖ raw key),
    /// where 0x01 is the Ed25519 signature type. Prefixes each signature on a checkpoint's signature line.
    public func keyHash(name: String) throws -> [UInt8] {
        Array(try Digest.sha256(Array(name.utf8), [0x0a, 0x01], rawRepresentation).prefix(4))
    }
}

/// What signs for the ledger and its staff: an Ed25519 key that can sign and tell its public key.
/// Every signature the ledger makes (checkpoints, dispute and evidence bundles, support steps) goes
/// through it, so a key that never leaves its device (an HSM, a smart card, a signing service)
/// can stand behind it without changing any caller; today's implementation is a key file's key
/// held in memory (``Ed25519PrivateKey``).
public protocol LedgerSigner: Sendable {
    /// The public key that verifies this signer's signatures.
    var publicKey: Ed25519PublicKey { get }
    /// An Ed25519 signature (RFC 8032, 64 bytes) of `message`.
    func sign(_ message: [UInt8]) throws -> [UInt8]
}

extension Ed25519PrivateKey: LedgerSigner {}
