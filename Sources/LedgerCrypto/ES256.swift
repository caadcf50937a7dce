import COpenSSL
import Foundation

/// Problems with ES256 (ECDSA P-256) key material, as opposed to failures inside libcrypto (``CryptoError``).
public enum ES256Error: Error, CustomStringConvertible, Sendable, Equatable {
    /// The text is not an unencrypted PEM key; the associated value carries OpenSSL's reason, if any.
    case invalidPEM(String)
    /// The PEM holds a key of another algorithm or curve (named in the associated value).
    case notP256(String)
    /// The private key and the public key stored with it do not belong together (a damaged key file).
    case inconsistentKeyPair
    /// A JOSE signature must be 64 bytes (R‖S); the associated value is the length given.
    case invalidSignatureLength(Int)

    /// The reason, in words.
    public var description: String {
        switch self {
        case .invalidPEM(let detail): return detail.isEmpty ? "not an unencrypted PEM key" : "not an unencrypted PEM key: \(detail)"
        case .notP256(let found): return "the key is \(found), not an EC P-256 key"
        case .inconsistentKeyPair: return "the private key does not match the public key stored with it (the key file is damaged)"
        case .invalidSignatureLength(let count): return "an ES256 signature is 64 bytes (R‖S), not \(count)"
        }
    }
}

/// An ECDSA P-256 signing key for JWS `ES256` (RFC 7518 §3.4): SHA-256, and signatures in JOSE form,
/// the 32-byte big-endian R then S (64 bytes), not DER. Its `description` shows only the public key.
public struct ES256PrivateKey: Sendable, CustomStringConvertible {
    /// The key in libcrypto's own DER form, parsed again for each signature (so the value holds no pointer).
    private let der: [UInt8]
    /// The matching verification key.
    public let publicKey: ES256PublicKey

    /// Parses a PEM private key: PKCS#8 (`BEGIN PRIVATE KEY`, what App Store Connect's `.p8` files hold)
    /// or SEC1 (`BEGIN EC PRIVATE KEY`). Throws ``ES256Error`` unless it is an unencrypted EC P-256 key
    /// whose private scalar matches the public point stored with it.
    public init(pem: String) throws {
        let key = try EVPKey.p256(pem: pem, read: EVPKey.readPrivateKey)
        // A damaged file can hold a valid scalar beside another key's public point: its signatures
        // would never verify. EVP_PKEY_check checks the point and that it is the scalar's.
        guard let context = EVP_PKEY_CTX_new(key.pointer, nil) else { throw CryptoError("EVP_PKEY_CTX_new") }
        defer { EVP_PKEY_CTX_free(context) }
        switch EVP_PKEY_check(context) {
        case 1: break
        case 0:
            ERR_clear_error()
            throw ES256Error.inconsistentKeyPair
        default: throw CryptoError("EVP_PKEY_check")
        }
        der = try key.encoded(i2d_PrivateKey, "i2d_PrivateKey")
        publicKey = try ES256PublicKey(key)
    }

    /// "ES256PrivateKey(public: <hex SubjectPublicKeyInfo>)": never the private scalar.
    public var description: String { "ES256PrivateKey(public: \(publicKey.subjectPublicKeyInfo.hex))" }

    /// Signs `message`: ECDSA over SHA-256(`message`), returned as 64 bytes R‖S. O(message length).
    public func sign(_ message: [UInt8]) throws -> [UInt8] {
        try Self.sign(message, with: try EVPKey.decoded(der, "d2i_AutoPrivateKey") { d2i_AutoPrivateKey(nil, $0, $1) })
    }

    fileprivate static func sign(_ message: [UInt8], with key: EVPKey) throws -> [UInt8] {
        guard let raw = ES256Signature.raw(fromDER: try key.sign(message, digest: EVP_sha256(), "ES256")) else {
            throw CryptoError("EVP_DigestSign(ES256)", detail: "the signature is not one DER ECDSA-Sig-Value of two 256-bit integers")
        }
        return raw
    }
}

/// An ``ES256PrivateKey`` decoded once, for the tools that sign thousands of messages with one key
/// (the benchmarks' workloads): decoding a key costs libcrypto 3 far more than an ES256 signature.
/// libcrypto's keys sign from many threads at once.
package final class ES256Signer: @unchecked Sendable {
    private let key: EVPKey

    /// Checks `pem` as ``ES256PrivateKey/init(pem:)`` does, then keeps it decoded.
    package init(pem: String) throws {
        _ = try ES256PrivateKey(pem: pem)
        key = try EVPKey.p256(pem: pem, read: EVPKey.readPrivateKey)
    }

    /// As ``ES256PrivateKey/sign(_:)``.
    package func sign(_ message: [UInt8]) throws -> [UInt8] { try ES256PrivateKey.sign(message, with: key) }
}

/// An ECDSA P-256 verification key, held as its DER SubjectPublicKeyInfo.
public struct ES256PublicKey: Sendable, Hashable {
    /// The DER SubjectPublicKeyInfo (what `BEGIN PUBLIC KEY` armours).
    public let subjectPublicKeyInfo: [UInt8]

    /// Parses a PEM public key (`BEGIN PUBLIC KEY`); throws ``ES256Error`` unless it is EC P-256.
    public init(pem: String) throws {
        try self.init(EVPKey.p256(pem: pem) { bio in PEM_read_bio_PUBKEY(bio, nil, nil, nil) })
    }

    init(_ key: EVPKey) throws {
        subjectPublicKeyInfo = try key.encoded(i2d_PUBKEY, "i2d_PUBKEY")
    }

    /// The key as PEM (`BEGIN PUBLIC KEY`).
    public var pem: String { pemEncode(subjectPublicKeyInfo, label: "PUBLIC KEY") }

    /// Whether `signature` (64 bytes R‖S) is a valid ES256 signature of `message` under this key: false
    /// for a signature of another length or one that does not verify. Throws ``CryptoError`` only when
    /// libcrypto itself fails (out of memory), which says nothing about the signature.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8]) throws -> Bool {
        guard signature.count == 64 else { return false }
        let der = try ES256Signature.der(fromRaw: signature)
        let key = try EVPKey.decoded(subjectPublicKeyInfo, "d2i_PUBKEY") { d2i_PUBKEY(nil, $0, $1) }
        guard let context = EVP_MD_CTX_new() else { throw CryptoError("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(context) }
        try check(EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key.pointer), "EVP_DigestVerifyInit(ES256)")
        switch EVP_DigestVerify(context, der, der.count, message, message.count) {
        case 1: return true
        case 0:
            ERR_clear_error()  // a signature that does not verify queues its reason
            return false
        default: throw CryptoError("EVP_DigestVerify(ES256)")
        }
    }
}

/// Conversions between the two spellings of an ECDSA P-256 signature: JOSE (64 bytes, R‖S) and DER
/// (`ECDSA-Sig-Value`, what libcrypto produces and expects).
public enum ES256Signature {
    /// DER from 64 bytes R‖S. Throws ``ES256Error/invalidSignatureLength(_:)`` for any other length and
    /// ``CryptoError`` when libcrypto fails.
    public static func der(fromRaw raw: [UInt8]) throws -> [UInt8] {
        guard raw.count == 64 else { throw ES256Error.invalidSignatureLength(raw.count) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress.map { $0 + 32 }, 32, nil) }
        guard let r, let s, let signature = ECDSA_SIG_new() else {
            BN_free(r)
            BN_free(s)
            throw CryptoError("BN_bin2bn / ECDSA_SIG_new")
        }
        defer { ECDSA_SIG_free(signature) }
        guard ECDSA_SIG_set0(signature, r, s) == 1 else {  // on success it owns r and s
            BN_free(r)
            BN_free(s)
            throw CryptoError("ECDSA_SIG_set0")
        }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { throw CryptoError("i2d_ECDSA_SIG") }
        var out = [UInt8](repeating: 0, count: Int(length))
        let written = out.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &cursor)
        }
        guard written == length else { throw CryptoError("i2d_ECDSA_SIG") }
        return out
    }

    /// 64 bytes R‖S from DER; nil when `der` is not exactly one `ECDSA-Sig-Value` with R and S below 2^256.
    public static func raw(fromDER der: [UInt8]) -> [UInt8]? {
        var consumed = 0
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            guard let start = buffer.baseAddress else { return nil }
            var cursor: UnsafePointer<UInt8>? = start
            let signature = d2i_ECDSA_SIG(nil, &cursor, buffer.count)
            consumed = cursor.map { $0 - start } ?? 0
            return signature
        }
        guard let parsed else {
            ERR_clear_error()
            return nil
        }
        defer { ECDSA_SIG_free(parsed) }
        guard consumed == der.count, let r = ECDSA_SIG_get0_r(parsed), let s = ECDSA_SIG_get0_s(parsed) else { return nil }
        var out = [UInt8](repeating: 0, count: 64)
        let ok = out.withUnsafeMutableBufferPointer { buffer -> Bool in
            guard let base = buffer.baseAddress else { return false }
            return BN_bn2binpad(r, base, 32) == 32 && BN_bn2binpad(s, base + 32, 32) == 32
        }
        return ok ? out : nil
    }
}

extension EVPKey {
    /// Parses a PEM block with `read` (a `PEM_read_bio_*` call) and checks the key is EC on P-256.
    static func p256(pem: String, read: (OpaquePointer) -> OpaquePointer?) throws -> EVPKey {
        let key = try EVPKey.pem(pem, algorithm: "EC", invalid: ES256Error.invalidPEM, read: read)
        let type = EVP_PKEY_get_base_id(key.pointer)
        guard type == EVP_PKEY_EC else { throw ES256Error.notP256(OBJ_nid2sn(type).map { String(cString: $0) } ?? "of type \(type)") }
        let curve = try key.curveName()
        guard curve == "prime256v1" || curve == "P-256" else { throw ES256Error.notP256("id-ecPublicKey on \(curve)") }
        return key
    }

    /// The EC group's name (`prime256v1` for P-256).
    func curveName() throws -> String {
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        try check(EVP_PKEY_get_group_name(pointer, &name, name.count, &length), "EVP_PKEY_get_group_name")
        return String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The key in `der`, read with `decode` (a `d2i_*` call). The bytes were written by ``encoded(_:_:)``,
    /// so a failure is libcrypto's.
    static func decoded(
        _ der: [UInt8], _ name: String, _ decode: (UnsafeMutablePointer<UnsafePointer<UInt8>?>, Int) -> OpaquePointer?
    ) throws -> EVPKey {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor = buffer.baseAddress
            return decode(&cursor, buffer.count)
        }
        guard let parsed else { throw CryptoError(name) }
        return EVPKey(parsed)
    }

    /// The key encoded with `encode` (an `i2d_*` call).
    func encoded(_ encode: (OpaquePointer?, UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32, _ name: String) throws -> [UInt8] {
        let length = encode(pointer, nil)
        guard length > 0 else { throw CryptoError(name) }
        var out = [UInt8](repeating: 0, count: Int(length))
        let written = out.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor = buffer.baseAddress
            return encode(pointer, &cursor)
        }
        guard written == length else { throw CryptoError(name) }
        return out
    }
}
