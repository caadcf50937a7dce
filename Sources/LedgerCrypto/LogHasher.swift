/// The hashes of a storage-format-2 log, on one reused SHA-256 context (a fresh context per hash
/// costs more than hashing a record):
///
/// - leaf hash of a record: SHA-256(0x00 ‖ record bytes) (RFC 6962);
/// - chain hash of record n: SHA-256(chain(n − 1) ‖ u64 n ‖ leaf(n)), chain(0) = 32 zero bytes;
/// - Merkle node: SHA-256(0x01 ‖ left ‖ right) (RFC 6962).
///
/// Each throws ``CryptoError`` when libcrypto fails (never a zero hash). Not for sharing between threads.
public final class LogHasher {
    private let hasher: SHA256Hasher

    public init() throws { hasher = try SHA256Hasher() }

    public func leafHash(_ record: UnsafeRawBufferPointer) throws -> Digest32 {
        var prefix: UInt8 = 0
        return try withUnsafeBytes(of: &prefix) { try hash($0, record) }
    }

    public func leafHash(_ record: [UInt8]) throws -> Digest32 { try record.withUnsafeBytes { try leafHash($0) } }

    public func chain(_ previous: Digest32, sequence: UInt64, leaf: Digest32) throws -> Digest32 {
        var position = sequence.bigEndian
        return try previous.withBytes { p in
            try withUnsafeBytes(of: &position) { n in try leaf.withBytes { l in try hash(p, n, l) } }
        }
    }

    public func node(_ left: Digest32, _ right: Digest32) throws -> Digest32 {
        var prefix: UInt8 = 1
        return try withUnsafeBytes(of: &prefix) { p in try left.withBytes { l in try right.withBytes { r in try hash(p, l, r) } } }
    }

    private func hash(_ parts: UnsafeRawBufferPointer...) throws -> Digest32 {
        try hasher.begin()
        for part in parts { try hasher.update(part) }
        guard let digest = Digest32(try hasher.finish()) else { throw CryptoError("SHA-256", detail: "the digest is not 32 bytes") }
        return digest
    }
}
