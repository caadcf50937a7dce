import Foundation

/// A compact JWS or JWT (`header.payload.signature`, RFC 7515 §7.1) located in its UTF-8 bytes without
/// copying them: the byte ranges of its three base64url segments (not yet decoded).
public struct CompactJWS: Sendable, Equatable {
    public let header: Range<Int>
    public let payload: Range<Int>
    public let signature: Range<Int>

    /// `header.payload`: the bytes the signature covers.
    public var signingInput: Range<Int> { header.lowerBound..<payload.upperBound }

    /// The segments of `bytes` (indices from 0); nil unless it holds exactly two dots.
    public init?(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let first = Self.dot(in: bytes, from: 0), let second = Self.dot(in: bytes, from: first + 1),
            Self.dot(in: bytes, from: second + 1) == nil
        else { return nil }
        header = 0..<first
        payload = (first + 1)..<second
        signature = (second + 1)..<bytes.count
    }

    /// How many dot-separated segments `bytes` has (empty ones included): what to report when it is not 3.
    public static func segmentCount(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
        var count = 1
        var next = 0
        while let found = dot(in: bytes, from: next) {
            count += 1
            next = found + 1
        }
        return count
    }

    /// The index of the first `.` at or after `start`.
    private static func dot(in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        guard let base = bytes.baseAddress, start < bytes.count,
            let found = memchr(base + start, Int32(UInt8(ascii: ".")), bytes.count - start)
        else { return nil }
        return UnsafeRawPointer(base).distance(to: UnsafeRawPointer(found))
    }
}
