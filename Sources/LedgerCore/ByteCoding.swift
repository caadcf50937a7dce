/// Appends big-endian fixed-width integers and length-prefixed fields to a byte buffer.
public struct ByteWriter: Sendable {
    public private(set) var output: [UInt8] = []

    public init() {}

    public mutating func u8(_ value: UInt8) { output.append(value) }
    public mutating func u16(_ value: UInt16) { integer(value) }
    public mutating func u32(_ value: UInt32) { integer(value) }
    public mutating func u64(_ value: UInt64) { integer(value) }
    public mutating func i64(_ value: Int64) { integer(UInt64(bitPattern: value)) }
    public mutating func bool(_ value: Bool) { output.append(value ? 1 : 0) }

    /// Bytes with no length prefix (fixed-size fields such as digests).
    public mutating func raw(_ bytes: [UInt8]) { output.append(contentsOf: bytes) }

    /// Bytes with a u32 length prefix.
    public mutating func bytes(_ bytes: [UInt8]) {
        u32(UInt32(bytes.count))
        output.append(contentsOf: bytes)
    }

    /// UTF-8 with a u32 length prefix.
    public mutating func string(_ value: String) { bytes(Array(value.utf8)) }

    /// A presence byte (0 or 1) followed, when present, by the value.
    public mutating func optional<T>(_ value: T?, _ write: (inout ByteWriter, T) -> Void) {
        if let value {
            u8(1)
            write(&self, value)
        } else {
            u8(0)
        }
    }

    private mutating func integer<T: FixedWidthInteger>(_ value: T) {
        var big = value.bigEndian
        withUnsafeBytes(of: &big) { output.append(contentsOf: $0) }
    }
}

/// Why bytes could not be decoded.
public struct DecodingFailure: Error, Equatable, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Reads what ``ByteWriter`` wrote, checking every bound: never traps on short or corrupt input.
public struct ByteReader {
    private let buffer: [UInt8]
    public private(set) var offset: Int

    public init(_ bytes: [UInt8], offset: Int = 0) {
        self.buffer = bytes
        self.offset = offset
    }

    public var remaining: Int { buffer.count - offset }

    public mutating func u8() throws(DecodingFailure) -> UInt8 {
        try ensure(1)
        defer { offset += 1 }
        return buffer[offset]
    }
    public mutating func u16() throws(DecodingFailure) -> UInt16 { try integer() }
    public mutating func u32() throws(DecodingFailure) -> UInt32 { try integer() }
    public mutating func u64() throws(DecodingFailure) -> UInt64 { try integer() }
    public mutating func i64() throws(DecodingFailure) -> Int64 { Int64(bitPattern: try integer()) }

    public mutating func bool() throws(DecodingFailure) -> Bool {
        switch try u8() {
        case 0: return false
        case 1: return true
        case let other: throw DecodingFailure("invalid boolean byte \(other) at offset \(offset - 1)")
        }
    }

    public mutating func raw(_ count: Int) throws(DecodingFailure) -> [UInt8] { try take(count) }

    public mutating func digest() throws(DecodingFailure) -> Digest32 { Digest32(unchecked: try take(32)) }

    public mutating func bytes() throws(DecodingFailure) -> [UInt8] {
        let count = try u32()
        return try take(Int(count))
    }

    public mutating func string() throws(DecodingFailure) -> String {
        let start = offset
        let count = Int(try u32())
        try ensure(count)
        guard let text = String(validating: buffer[offset..<offset + count], as: UTF8.self) else {
            throw DecodingFailure("invalid UTF-8 in string at offset \(start)")
        }
        offset += count
        return text
    }

    public mutating func optional<T>(_ read: (inout ByteReader) throws(DecodingFailure) -> T) throws(DecodingFailure) -> T? {
        switch try u8() {
        case 0: return nil
        case 1: return try read(&self)
        case let other: throw DecodingFailure("invalid presence byte \(other) at offset \(offset - 1)")
        }
    }

    /// Fails unless every byte was consumed.
    public func expectEnd() throws(DecodingFailure) {
        guard remaining == 0 else { throw DecodingFailure("\(remaining) unexpected trailing bytes") }
    }

    private mutating func take(_ count: Int) throws(DecodingFailure) -> [UInt8] {
        try ensure(count)
        defer { offset += count }
        return Array(buffer[offset..<offset + count])
    }

    private func ensure(_ count: Int) throws(DecodingFailure) {
        guard count >= 0, count <= remaining else {
            throw DecodingFailure("truncated: needed \(count) bytes at offset \(offset), \(remaining) left")
        }
    }

    private mutating func integer<T: FixedWidthInteger>() throws(DecodingFailure) -> T {
        let size = MemoryLayout<T>.size
        try ensure(size)
        var value: T = 0
        for index in offset..<offset + size { value = value << 8 | T(buffer[index]) }
        offset += size
        return value
    }
}
