/// Milliseconds since 1970-01-01T00:00:00Z. The core never reads a clock: every time arrives in a
/// command or an envelope.
public typealias Timestamp = Int64

/// A 32-byte digest used as an opaque identifier (lineage keys, event ids, keyed hashes).
public struct Digest32: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The 32 bytes.
    public let bytes: [UInt8]

    /// Wraps `bytes`; nil unless there are exactly 32.
    public init?(_ bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    /// 32 zero bytes: the previous hash of the first record.
    public static let zero = Digest32(unchecked: [UInt8](repeating: 0, count: 32))

    init(unchecked bytes: [UInt8]) { self.bytes = bytes }

    public static func < (lhs: Digest32, rhs: Digest32) -> Bool { lhs.bytes.lexicographicallyPrecedes(rhs.bytes) }

    /// Lowercase hexadecimal.
    public var hex: String { hexString(bytes) }
    public var description: String { hex }
}

/// The platform- and environment-scoped keyed hash of an original transaction identity:
/// HMAC-SHA256(ledger key, "apple|<environment>|<originalTransactionId>"). The Apple identifier
/// itself never reaches the log.
public struct LineageKey: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let digest: Digest32
    public init(_ digest: Digest32) { self.digest = digest }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.digest < rhs.digest }
    public var description: String { digest.hex }
}

/// The pseudonym of an account (a random 16-byte value issued by the identity vault). Events
/// name accounts only by pseudonym; the UID mapping is deleted with the account.
public struct AccountID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]
    /// Wraps `bytes`; nil unless there are exactly 16.
    public init?(_ bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        self.bytes = bytes
    }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.bytes.lexicographicallyPrecedes(rhs.bytes) }
    public var description: String { hexString(bytes) }
}

/// Identifies an enrolled support staff member (chosen by the roster administrator, e.g. "alice").
public typealias StaffID = String

func hexString(_ bytes: [UInt8]) -> String { bytes.hex }

extension Array where Element == UInt8 {
    /// Lowercase hexadecimal.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(count * 2)
        for byte in self {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses hexadecimal (either case); nil when `text` is not hex.
    public init?(hex text: String) {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: return c - 48
            case 97...102: return c - 87
            case 65...70: return c - 55
            default: return nil
            }
        }
        var out = [UInt8]()
        out.reserveCapacity(chars.count / 2)
        var index = 0
        while index < chars.count {
            guard let high = nibble(chars[index]), let low = nibble(chars[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        self = out
    }
}
