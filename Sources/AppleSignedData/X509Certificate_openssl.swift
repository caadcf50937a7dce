import COpenSSL
import Foundation
import LedgerCrypto

/// Owns one OpenSSL `X509*`, freed in `deinit`.
final class X509Certificate {
    let pointer: OpaquePointer

    /// Parses DER; nil when the bytes are not exactly one DER certificate.
    init?(der: [UInt8]) {
        guard !der.isEmpty, der.count < Int(Int32.max) else { return nil }
        var parsed: OpaquePointer?
        var consumed = 0
        der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            parsed = d2i_X509(nil, &cursor, buffer.count)
            if let cursor, let base = buffer.baseAddress { consumed = cursor - base }
        }
        _ = CryptoError("d2i_X509")  // drain the error queue whatever happened
        guard let parsed else { return nil }
        guard consumed == der.count else {  // trailing bytes: not exactly one certificate
            X509_free(parsed)
            return nil
        }
        pointer = parsed
    }

    deinit { X509_free(pointer) }

    /// True when the certificate carries an extension with this dotted OID (value not inspected).
    func hasExtension(oid: String) -> Bool {
        guard let object = OBJ_txt2obj(oid, 1) else { return false }
        defer { ASN1_OBJECT_free(object) }
        return X509_get_ext_by_OBJ(pointer, object, -1) >= 0
    }

    /// Subject in OpenSSL's one-line form, e.g. `/C=US/O=Leaf`.
    var subject: String {
        guard let name = X509_get_subject_name(pointer) else { return "" }
        var buffer = [CChar](repeating: 0, count: 512)
        _ = X509_NAME_oneline(name, &buffer, Int32(buffer.count))
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The public key (owned by the returned object).
    func publicKey() -> PublicKey? {
        guard let key = X509_get_pubkey(pointer) else { return nil }
        return PublicKey(key)
    }
}

/// Owns one OpenSSL `EVP_PKEY*`, freed in `deinit`.
final class PublicKey {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
    deinit { EVP_PKEY_free(pointer) }

    /// True for an EC key on P-256 (prime256v1).
    var isP256: Bool {
        guard EVP_PKEY_get_base_id(pointer) == EVP_PKEY_EC else { return false }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(pointer, &name, name.count, &length) == 1 else {
            _ = CryptoError("EVP_PKEY_get_group_name")
            return false
        }
        let group = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return group == "prime256v1" || group == "P-256"
    }

    /// Verifies a DER ECDSA signature over SHA-256(`message`).
    func verifySHA256(derSignature: [UInt8], message: [UInt8]) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, pointer) == 1 else {
            _ = CryptoError("EVP_DigestVerifyInit")
            return false
        }
        let result = EVP_DigestVerify(context, derSignature, derSignature.count, message, message.count)
        _ = CryptoError("EVP_DigestVerify")
        return result == 1
    }
}

/// Owns one OpenSSL `ECDSA_SIG*`, freed in `deinit`; converts JOSE R‖S to DER and back.
final class ECDSASignature {
    let pointer: OpaquePointer

    /// From the 64-byte JOSE form (32-byte big-endian R then S).
    init?(raw: [UInt8]) {
        guard raw.count == 64 else { return nil }
        let r = BN_bin2bn(raw, 32, nil)
        let s = Array(raw[32...]).withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        guard let r, let s, let signature = ECDSA_SIG_new() else {
            if let r { BN_free(r) }
            if let s { BN_free(s) }
            return nil
        }
        pointer = signature
        ECDSA_SIG_set0(signature, r, s)  // takes ownership of r and s
    }

    /// From DER (what `EVP_DigestSign` produces).
    init?(der: [UInt8]) {
        var parsed: OpaquePointer?
        der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            parsed = d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let parsed else { return nil }
        pointer = parsed
    }

    deinit { ECDSA_SIG_free(pointer) }

    var der: [UInt8]? {
        let length = i2d_ECDSA_SIG(pointer, nil)
        guard length > 0 else { return nil }
        var out = [UInt8](repeating: 0, count: Int(length))
        let written = out.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_ECDSA_SIG(pointer, &cursor)
        }
        return written == length ? out : nil
    }

    /// The 64-byte JOSE form.
    var raw: [UInt8]? {
        guard let r = ECDSA_SIG_get0_r(pointer), let s = ECDSA_SIG_get0_s(pointer) else { return nil }
        var out = [UInt8](repeating: 0, count: 64)
        let ok = out.withUnsafeMutableBufferPointer { buffer -> Bool in
            guard let base = buffer.baseAddress else { return false }
            return BN_bn2binpad(r, base, 32) == 32 && BN_bn2binpad(s, base + 32, 32) == 32
        }
        return ok ? out : nil
    }
}
