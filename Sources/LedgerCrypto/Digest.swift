import COpenSSL
import Foundation
@_exported import LedgerCore

/// Failures of a libcrypto call, with OpenSSL's error queue drained into the message.
public struct CryptoError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let detail: String

    public init(_ operation: String) {
        self.operation = operation
        self.detail = CryptoError.drainErrorQueue()
    }

    public var description: String { detail.isEmpty ? "\(operation) failed" : "\(operation) failed: \(detail)" }

    static func drainErrorQueue() -> String {
        var messages: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            messages.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return messages.joined(separator: "; ")
    }
}

/// Turns a libcrypto return code (1 is success) into a thrown ``CryptoError`` naming the call.
@inline(__always)
func check(_ result: Int32, _ operation: @autoclosure () -> String) throws {
    guard result == 1 else { throw CryptoError(operation()) }
}

/// SHA-256, HMAC-SHA256 and random bytes from libcrypto.
public enum Digest {
    /// SHA-256 of the concatenation of `parts`.
    public static func sha256(_ parts: [UInt8]...) -> [UInt8] { sha256(parts: parts) }

    /// SHA-256 of the concatenation of `parts`.
    public static func sha256(parts: [[UInt8]]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        guard let context = EVP_MD_CTX_new() else { return out }
        defer { EVP_MD_CTX_free(context) }
        EVP_DigestInit_ex(context, EVP_sha256(), nil)
        for part in parts { part.withUnsafeBytes { _ = EVP_DigestUpdate(context, $0.baseAddress, $0.count) } }
        var length: UInt32 = 32
        EVP_DigestFinal_ex(context, &out, &length)
        return out
    }

    /// HMAC-SHA256 of `message` under `key`.
    public static func hmacSHA256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 32
        key.withUnsafeBytes { k in
            message.withUnsafeBytes { m in
                _ = HMAC(EVP_sha256(), k.baseAddress, Int32(k.count), m.baseAddress, m.count, &out, &length)
            }
        }
        return out
    }

    /// Cryptographically secure random bytes.
    public static func randomBytes(_ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        try check(RAND_bytes(&out, Int32(count)), "RAND_bytes")
        return out
    }
}
