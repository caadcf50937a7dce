/// Appends big-endian integers, varints and length-prefixed fields to a byte buffer.
public struct ByteWriter: Sendable {
    public private(set) var output: [UInt8] = []

    public init(capacity: Int = 0) { output.reserveCapacity(capacity) }

    public mutating func u8(_ value: UInt8) { output.append(value) }
    public mutating func u16(_ value: UInt16) { integer(value) }
    public mutating func u32(_ value: UInt32) { integer(value) }
    public mutating func u64(_ value: UInt64) { integer(value) }
    public mutating func i64(_ value: Int64) { integer(UInt64(bitPattern: value)) }
    public mutating func bool(_ value: Bool) { output.append(value ? 1 : 0) }

    /// The low 48 bits, big-endian.
    public mutating func u48(_ value: UInt64) {
        for shift in stride(from: 40, through: 0, by: -8) { output.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
    }

    /// LEB128: 7 bits per byte, least significant first, high bit set on every byte but the last.
    public mutating func varint(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            output.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        output.append(UInt8(rest))
    }

    /// A signed value as a zigzag varint (small magnitudes, either sign, take few bytes).
    public mutating func zigzag(_ value: Int64) { varint(UInt64(bitPattern: (value << 1) ^ (value >> 63))) }

    /// 32 bytes.
    public mutating func digest(_ digest: Digest32) { digest.withBytes { output.append(contentsOf: $0) } }

    /// 16 bytes.
    public mutating func key(_ key: Key128) {
        integer(key.high)
        integer(key.low)
    }

    /// Bytes with no length prefix (fixed-size fields such as digests).
    public mutating func raw(_ bytes: [UInt8]) { output.append(contentsOf: bytes) }

    /// Bytes with a u32 length prefix (format 1 and read models).
    public mutating func bytes(_ bytes: [UInt8]) {
        u32(UInt32(bytes.count))
        output.append(contentsOf: bytes)
    }

    /// UTF-8 with a u32 length prefix (format 1 and read models).
    public mutating func string(_ value: String) { bytes(Array(value.utf8)) }

    /// Bytes with a varint length prefix.
    public mutating func shortBytes(_ bytes: [UInt8]) {
        varint(UInt64(bytes.count))
        output.append(contentsOf: bytes)
    }

    /// UTF-8 with a varint length prefix.
    public mutating func shortString(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            varint(UInt64(utf8.count))
            output.append(contentsOf: utf8)
        }
    }

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
/// It reads the buffer in place, so it is valid only while that buffer is (inside the
/// `withUnsafeBytes` or the transaction that gave it); ``reading(_:_:)`` wraps an array.
public struct ByteReader {
    private let buffer: UnsafeRawBufferPointer
    public private(set) var offset: Int

    public init(_ buffer: UnsafeRawBufferPointer, offset: Int = 0) {
        self.buffer = buffer
        self.offset = offset
    }

    /// Runs `body` with a reader over `bytes`. Inlinable, so that each caller gets it specialized for
    /// its result type (a generic call cost more than the decoding of a lineage's read model).
    @inlinable
    public static func reading<T>(_ bytes: [UInt8], _ body: (inout ByteReader) throws(DecodingFailure) -> T) throws(DecodingFailure) -> T {
        let result: Result<T, DecodingFailure> = bytes.withUnsafeBytes { raw in
            var reader = ByteReader(raw)
            do throws(DecodingFailure) {
                return .success(try body(&reader))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
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

    /// 48 bits, big-endian.
    public mutating func u48() throws(DecodingFailure) -> UInt64 {
        try ensure(6)
        var value: UInt64 = 0
        for index in offset..<offset + 6 { value = value << 8 | UInt64(buffer[index]) }
        offset += 6
        return value
    }

    /// A LEB128 varint in its shortest form (no trailing zero byte) whose value fits 64 bits.
    @inline(__always)
    public mutating func varint() throws(DecodingFailure) -> UInt64 {
        // One byte (a value under 128): most varints of a record (times, lengths, counts).
        if offset < buffer.count, buffer[offset] < 0x80 {
            defer { offset += 1 }
            return UInt64(buffer[offset])
        }
        return try longVarint()
    }

    /// ``varint()`` of more than one byte (or none left).
    private mutating func longVarint() throws(DecodingFailure) -> UInt64 {
        let start = offset
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try u8()
            if shift == 63 && byte > 1 { throw DecodingFailure("varint at offset \(start) overflows 64 bits") }
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 {
                if byte == 0 && shift > 0 { throw DecodingFailure("varint at offset \(start) is not in its shortest form") }
                return value
            }
            shift += 7
        }
    }

    /// A varint that must fit an `Int` (lengths, counts).
    public mutating func count() throws(DecodingFailure) -> Int {
        let value = try varint()
        guard value <= UInt64(Int.max) else { throw DecodingFailure("length \(value) at offset \(offset) is too large") }
        return Int(value)
    }

    public mutating func zigzag() throws(DecodingFailure) -> Int64 {
        let value = try varint()
        return Int64(bitPattern: value >> 1) ^ -Int64(bitPattern: value & 1)
    }

    public mutating func key() throws(DecodingFailure) -> Key128 {
        try ensure(16)
        defer { offset += 16 }
        return Key128(loading: buffer, at: offset)
    }

    public mutating func bool() throws(DecodingFailure) -> Bool {
        switch try u8() {
        case 0: return false
        case 1: return true
        case let other: throw DecodingFailure("invalid boolean byte \(other) at offset \(offset - 1)")
        }
    }

    public mutating func raw(_ count: Int) throws(DecodingFailure) -> [UInt8] { try take(count) }

    public mutating func digest() throws(DecodingFailure) -> Digest32 {
        try ensure(32)
        defer { offset += 32 }
        return Digest32(loading: buffer, at: offset)
    }

    /// Bytes with a u32 length prefix.
    public mutating func bytes() throws(DecodingFailure) -> [UInt8] {
        let count = try u32()
        return try take(Int(count))
    }

    /// UTF-8 with a u32 length prefix.
    public mutating func string() throws(DecodingFailure) -> String { try utf8(count: Int(try u32())) }

    /// Bytes with a varint length prefix.
    public mutating func shortBytes() throws(DecodingFailure) -> [UInt8] { try take(try count()) }

    /// UTF-8 with a varint length prefix.
    public mutating func shortString() throws(DecodingFailure) -> String { try utf8(count: try count()) }

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

    /// The bytes of a ``shortBytes()`` value, lent in place (valid while the buffer is).
    mutating func shortBytesInPlace() throws(DecodingFailure) -> UnsafeRawBufferPointer {
        let count = try count()
        try ensure(count)
        defer { offset += count }
        return UnsafeRawBufferPointer(rebasing: buffer[offset..<offset + count])
    }

    /// ``shortString()``, looked up first among the strings `strings` has seen (each was validated
    /// when first decoded), so a string seen before costs neither validation nor allocation.
    mutating func shortString(through strings: DecodedStrings) throws(DecodingFailure) -> String {
        let count = try count()
        try ensure(count)
        let bytes = UnsafeRawBufferPointer(rebasing: buffer[offset..<offset + count])
        if let known = strings.string(bytes) {
            offset += count
            return known
        }
        let value = try utf8(count: count)
        strings.remember(bytes, value)
        return value
    }

    private mutating func utf8(count: Int) throws(DecodingFailure) -> String {
        let start = offset
        try ensure(count)
        let bytes = UnsafeRawBufferPointer(rebasing: buffer[offset..<offset + count])
        // ASCII (product ids, most stored text) is valid UTF-8 as it is: copied without the validator.
        let ascii = bytes.allSatisfy { $0 < 0x80 }
        guard let text = ascii ? String(decoding: bytes, as: UTF8.self) : String(validating: bytes, as: UTF8.self) else {
            throw DecodingFailure("invalid UTF-8 in string at offset \(start)")
        }
        offset += count
        return text
    }

    private mutating func take(_ count: Int) throws(DecodingFailure) -> [UInt8] {
        try ensure(count)
        defer { offset += count }
        return Array(buffer[offset..<offset + count])
    }

    @inline(__always)
    private func ensure(_ count: Int) throws(DecodingFailure) {
        guard count >= 0, count <= remaining else { throw truncated(count) }
    }

    /// The failure of ``ensure(_:)``, out of line: the check itself stays a compare in its callers.
    @inline(never)
    private func truncated(_ count: Int) -> DecodingFailure {
        DecodingFailure("truncated: needed \(count) bytes at offset \(offset), \(remaining) left")
    }

    private mutating func integer<T: FixedWidthInteger>() throws(DecodingFailure) -> T {
        let size = MemoryLayout<T>.size
        try ensure(size)
        defer { offset += size }
        return T(bigEndian: buffer.loadUnaligned(fromByteOffset: offset, as: T.self))
    }
}

/// The strings a ``RecordDecoder`` has decoded (product ids, a few distinct ones repeated in
/// millions of records), with their UTF-8 bytes. At most ``limit`` are kept. Not for sharing
/// between threads.
final class DecodedStrings {
    static let limit = 64
    private var known: [(bytes: [UInt8], value: String)] = []

    /// The string whose UTF-8 is `bytes`, if seen before.
    func string(_ bytes: UnsafeRawBufferPointer) -> String? {
        for entry in known where entry.bytes.count == bytes.count {
            if entry.bytes.withUnsafeBytes({ Self.equal($0, bytes) }) { return entry.value }
        }
        return nil
    }

    /// Whether two buffers of the same length hold the same bytes (compared 8 at a time).
    static func equal(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset + 8 <= a.count {
            guard a.loadUnaligned(fromByteOffset: offset, as: UInt64.self) == b.loadUnaligned(fromByteOffset: offset, as: UInt64.self) else {
                return false
            }
            offset += 8
        }
        while offset < a.count {
            guard a[offset] == b[offset] else { return false }
            offset += 1
        }
        return true
    }

    func forget() { known.removeAll(keepingCapacity: true) }

    func remember(_ bytes: UnsafeRawBufferPointer, _ value: String) {
        if known.count < Self.limit { known.append((Array(bytes), value)) }
    }
}
