import COpenSSL
import Foundation
@_exported import LedgerCore

/// Failures of a libcrypto call, with OpenSSL's error queue drained into the message.
public struct CryptoError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let detail: String

    /// The failure of `operation`, with the reasons OpenSSL queued on this thread (the queue is emptied).
    public init(_ operation: String) {
        self.operation = operation
        self.detail = CryptoError.drainErrorQueue()
    }

    /// The failure of `operation` for a reason found before calling libcrypto; clears the error queue.
    public init(_ operation: String, detail: String) {
        self.operation = operation
        _ = CryptoError.drainErrorQueue()
        self.detail = detail
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

/// A length as the `int` a libcrypto call takes; a ``CryptoError`` (never a trap) above `Int32.max`.
@inline(__always)
func int32Length(_ count: Int, _ operation: @autoclosure () -> String) throws -> Int32 {
    guard let length = Int32(exactly: count) else {
        throw CryptoError(operation(), detail: "\(count) bytes is more than it accepts (\(Int32.max))")
    }
    return length
}

/// SHA-256, HMAC-SHA256 and random bytes from libcrypto. Every libcrypto return code is checked: a
/// failure (out of memory, no usable SHA-256 provider) is a thrown ``CryptoError``, never a zero digest.
public enum Digest {
    /// SHA-256 of the concatenation of `parts`.
    public static func sha256(_ parts: [UInt8]...) throws -> [UInt8] { try sha256(parts: parts) }

    /// SHA-256 of the concatenation of `parts`.
    public static func sha256(parts: [[UInt8]]) throws -> [UInt8] {
        let hasher = try SHA256Hasher()
        try hasher.begin()
        for part in parts { try hasher.update(part) }
        return try hasher.finish()
    }

    /// SHA-256 of `first` ‖ `second` on libcrypto's low-level functions, with no context to set up or
    /// algorithm to fetch: for short messages hashed one at a time (a log's records, a JWS signing input).
    public static func sha256(
        _ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0)
    ) throws(CryptoError) -> Digest32 {
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        guard
            withUnsafeMutableBytes(
                of: &words,
                {
                    ledger_sha256_two(
                        first.baseAddress, first.count, second.baseAddress, second.count, $0.baseAddress?.assumingMemoryBound(to: UInt8.self))
                }) == 1
        else { throw CryptoError("SHA256_Init/Transform") }
        return withUnsafeBytes(of: &words) { Digest32(loading: $0, at: 0) }
    }

    /// HMAC-SHA256 (RFC 2104) of `message` under `key`, for a key used once (a key that authenticates
    /// many messages is prepared once as an ``HMACSHA256Key``). Several times faster than libcrypto's
    /// one-shot `HMAC()`, which looks its algorithms up on every call. Checked against RFC 4231 and
    /// against `HMAC()` in the tests.
    public static func hmacSHA256(key: [UInt8], message: [UInt8]) throws -> [UInt8] {
        try message.withUnsafeBytes { try HMACSHA256Key(key).authenticate($0) }.bytes
    }

    /// Cryptographically secure random bytes.
    public static func randomBytes(_ count: Int) throws -> [UInt8] {
        let length = try int32Length(count, "RAND_bytes")
        var out = [UInt8](repeating: 0, count: count)
        try check(RAND_bytes(&out, length), "RAND_bytes")
        return out
    }
}

/// An HMAC-SHA256 key (RFC 2104) with its padded key blocks hashed once: the inner and outer
/// SHA-256 states after their first block are kept, so each MAC hashes only the message and the
/// inner digest (two compressions fewer per MAC, no context to set up or array to allocate).
/// ``Digest/hmacSHA256(key:message:)`` is this with a key used once.
public struct HMACSHA256Key: @unchecked Sendable {  // two plain C structs, never mutated after init
    private let inner: SHA256_CTX
    private let outer: SHA256_CTX

    public init(_ key: [UInt8]) throws {
        var block = [UInt8](repeating: 0, count: SHA256Hasher.blockSize)
        if key.count > block.count {
            let hashed = try key.withUnsafeBytes { try Digest.sha256($0) }
            block.replaceSubrange(0..<32, with: hashed.bytes)
        } else {
            block.replaceSubrange(0..<key.count, with: key)
        }
        func absorbed(_ pad: UInt8) throws(CryptoError) -> SHA256_CTX {
            var context = SHA256_CTX()
            let padded = block.map { $0 ^ pad }
            guard ledger_sha256_init(&context) == 1,
                padded.withUnsafeBytes({ ledger_sha256_update(&context, $0.baseAddress, $0.count) }) == 1
            else { throw CryptoError("SHA256_Init/Update (HMAC key)") }
            return context
        }
        inner = try absorbed(0x36)
        outer = try absorbed(0x5c)
    }

    /// HMAC-SHA256 of `message` under this key.
    public func authenticate(_ message: UnsafeRawBufferPointer) throws(CryptoError) -> Digest32 {
        var context = inner
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        guard ledger_sha256_update(&context, message.baseAddress, message.count) == 1,
            withUnsafeMutableBytes(of: &words, { ledger_sha256_final($0.baseAddress?.assumingMemoryBound(to: UInt8.self), &context) }) == 1
        else { throw CryptoError("SHA256_Update/Final (HMAC inner)") }
        context = outer
        guard withUnsafeBytes(of: &words, { ledger_sha256_update(&context, $0.baseAddress, $0.count) }) == 1,
            withUnsafeMutableBytes(of: &words, { ledger_sha256_final($0.baseAddress?.assumingMemoryBound(to: UInt8.self), &context) }) == 1
        else { throw CryptoError("SHA256_Update/Final (HMAC outer)") }
        return withUnsafeBytes(of: &words) { Digest32(loading: $0, at: 0) }
    }
}

/// SHA-256 as fetched from libcrypto's providers once per process: an implicit fetch (`EVP_sha256()`)
/// costs more than hashing a short message. An `EVP_MD` is immutable and may be shared by threads.
/// A failed fetch is kept with its reason and thrown by every use.
nonisolated(unsafe) private let fetchedSHA256: Result<OpaquePointer, CryptoError> = {
    guard let algorithm = EVP_MD_fetch(nil, "SHA256", nil) else { return .failure(CryptoError("EVP_MD_fetch(SHA256)")) }
    return .success(algorithm)
}()

/// One reusable SHA-256 context: `begin`, `update`s, `finish`, as often as needed. Not for sharing
/// between threads.
public final class SHA256Hasher {
    static let blockSize = 64
    private let context: OpaquePointer

    public init() throws {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError("EVP_MD_CTX_new") }
        self.context = context
    }

    deinit { EVP_MD_CTX_free(context) }

    public func begin() throws {
        try check(EVP_DigestInit_ex2(context, try fetchedSHA256.get(), nil), "EVP_DigestInit_ex2(SHA256)")
    }

    public func update(_ bytes: [UInt8]) throws { try bytes.withUnsafeBytes { try update($0) } }

    public func update(_ buffer: UnsafeRawBufferPointer) throws {
        try check(EVP_DigestUpdate(context, buffer.baseAddress, buffer.count), "EVP_DigestUpdate(SHA256)")
    }

    public func finish() throws -> [UInt8] { try finishDigest().bytes }

    /// ``finish()`` without allocating: the digest held inline.
    public func finishDigest() throws -> Digest32 {
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        var length: UInt32 = 0
        try withUnsafeMutableBytes(of: &words) { out in
            try check(EVP_DigestFinal_ex(context, out.baseAddress?.assumingMemoryBound(to: UInt8.self), &length), "EVP_DigestFinal_ex(SHA256)")
        }
        guard length == 32 else { throw CryptoError("EVP_DigestFinal_ex(SHA256)", detail: "returned \(length) bytes, not 32") }
        return withUnsafeBytes(of: &words) { Digest32(loading: $0, at: 0) }
    }
}
