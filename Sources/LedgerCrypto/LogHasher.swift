import COpenSSL

/// The hashes of a storage-format-2 log, on libcrypto's low-level SHA-256 (a log has millions of
/// short messages; the EVP layer sets a context up for each, which costs more than hashing a record):
///
/// - leaf hash of a record: SHA-256(0x00 ‖ record bytes) (RFC 6962);
/// - chain hash of record n: SHA-256(chain(n − 1) ‖ u64 n ‖ leaf(n)), chain(0) = 32 zero bytes;
/// - Merkle node: SHA-256(0x01 ‖ left ‖ right) (RFC 6962).
///
/// Each throws ``CryptoError`` when libcrypto fails (never a zero hash).
public final class LogHasher {
    public init() throws {}

    public func leafHash(_ record: UnsafeRawBufferPointer) throws -> Digest32 {
        var prefix: UInt8 = 0
        return try withUnsafeBytes(of: &prefix) { try Digest.sha256($0, record) }
    }

    public func leafHash(_ record: [UInt8]) throws -> Digest32 { try record.withUnsafeBytes { try leafHash($0) } }

    public func chain(_ previous: Digest32, sequence: UInt64, leaf: Digest32) throws -> Digest32 {
        var message = Message()
        message.append(previous)
        message.append(sequence)
        message.append(leaf)
        return try message.withBytes { try Digest.sha256($0) }
    }

    public func node(_ left: Digest32, _ right: Digest32) throws -> Digest32 {
        var message = Message()
        message.append(1 as UInt8)
        message.append(left)
        message.append(right)
        return try message.withBytes { try Digest.sha256($0) }
    }

    /// A chain or node message (at most 72 bytes), assembled on the stack and hashed in one update.
    private struct Message {
        private var storage: (Digest32, Digest32, Digest32) = (.zero, .zero, .zero)
        private var count = 0

        mutating func append(_ digest: Digest32) { digest.withBytes { append($0) } }

        mutating func append(_ value: UInt64) { withUnsafeBytes(of: value.bigEndian) { append($0) } }

        mutating func append(_ value: UInt8) { withUnsafeBytes(of: value) { append($0) } }

        private mutating func append(_ bytes: UnsafeRawBufferPointer) {
            let start = count
            withUnsafeMutableBytes(of: &storage) { UnsafeMutableRawBufferPointer(rebasing: $0[start..<start + bytes.count]).copyMemory(from: bytes) }
            count += bytes.count
        }

        mutating func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
            let count = count
            return try withUnsafeBytes(of: &storage) { try body(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        }
    }
}
