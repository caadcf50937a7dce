/// Milliseconds since 1970-01-01T00:00:00Z. The core never reads a clock: every time arrives in a
/// command or an envelope.
public typealias Timestamp = Int64

/// A 32-byte digest: hashes (the hash chain, Merkle nodes, plan digests) and format-1 identifiers.
/// Held inline (four big-endian words, no heap storage).
public struct Digest32: Hashable, Comparable, Sendable, CustomStringConvertible {
    private var w0: UInt64, w1: UInt64, w2: UInt64, w3: UInt64

    /// Wraps `bytes`; nil unless there are exactly 32.
    public init?(_ bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self = bytes.withUnsafeBytes { Digest32(loading: $0, at: 0) }
    }

    /// Reads 32 bytes at `offset` of `buffer` (the caller checked the bounds).
    @inline(__always)
    public init(loading buffer: UnsafeRawBufferPointer, at offset: Int) {
        func word(_ index: Int) -> UInt64 { UInt64(bigEndian: buffer.loadUnaligned(fromByteOffset: offset + index * 8, as: UInt64.self)) }
        (w0, w1, w2, w3) = (word(0), word(1), word(2), word(3))
    }

    /// 32 zero bytes: the chain hash before the first record.
    public static let zero = Digest32(words: (0, 0, 0, 0))

    init(words: (UInt64, UInt64, UInt64, UInt64)) { (w0, w1, w2, w3) = words }

    public static func < (lhs: Digest32, rhs: Digest32) -> Bool { (lhs.w0, lhs.w1, lhs.w2, lhs.w3) < (rhs.w0, rhs.w1, rhs.w2, rhs.w3) }

    /// The 32 bytes.
    public var bytes: [UInt8] { withBytes { Array($0) } }

    /// Runs `body` with the 32 bytes in a stack buffer.
    @inline(__always)
    public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var words = (w0.bigEndian, w1.bigEndian, w2.bigEndian, w3.bigEndian)
        return try withUnsafeBytes(of: &words) { try body($0) }
    }

    /// The first 16 bytes.
    public var prefix128: Key128 { Key128(high: w0, low: w1) }

    /// Bytes 16 to 31.
    public var suffix128: Key128 { Key128(high: w2, low: w3) }

    /// Lowercase hexadecimal.
    public var hex: String { bytes.hex }
    public var description: String { hex }
}

/// 128 bits held inline (two big-endian words, no heap storage): keyed identifiers (lineages,
/// transactions, commands, vault lookups) are the first 16 bytes of an HMAC-SHA256 under a secret
/// key, and account pseudonyms are 16 random bytes. Ordered as its bytes.
public struct Key128: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Bytes 0 to 7, big-endian.
    public var high: UInt64
    /// Bytes 8 to 15, big-endian.
    public var low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The first 16 bytes of `bytes`; nil when there are fewer.
    public init?(prefixOf bytes: [UInt8]) {
        guard bytes.count >= 16 else { return nil }
        self = bytes.withUnsafeBytes { Key128(loading: $0, at: 0) }
    }

    /// Wraps exactly 16 bytes; nil otherwise.
    public init?(_ bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        self.init(prefixOf: bytes)
    }

    /// Reads 16 bytes at `offset` of `buffer` (the caller checked the bounds).
    @inline(__always)
    public init(loading buffer: UnsafeRawBufferPointer, at offset: Int) {
        high = UInt64(bigEndian: buffer.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        low = UInt64(bigEndian: buffer.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self))
    }

    public static let zero = Key128(high: 0, low: 0)

    public static func < (lhs: Self, rhs: Self) -> Bool { (lhs.high, lhs.low) < (rhs.high, rhs.low) }

    public func hash(into hasher: inout Hasher) { hasher.combine(_rawHashValue(seed: 0)) }

    /// A multiply-xorshift mix of both words and the table's seed, instead of SipHash: the writer
    /// hashes keys in its dictionaries millions of times a minute. Safe from flooding because no
    /// caller chooses a key: each is a keyed hash (HMAC with the ledger's key), a digest, or a
    /// pseudonym whose last ten bytes are random; and Swift seeds each table per process.
    public func _rawHashValue(seed: Int) -> Int {
        var mixed = (high ^ UInt64(UInt(bitPattern: seed))) &* 0x9E37_79B9_7F4A_7C15
        mixed ^= low &+ (mixed >> 29)
        mixed = (mixed ^ (mixed >> 32)) &* 0xD6E8_FEB8_6659_FD93
        return Int(truncatingIfNeeded: mixed ^ (mixed >> 32))
    }

    /// The 16 bytes.
    public var bytes: [UInt8] { withBytes { Array($0) } }

    /// Runs `body` with the 16 bytes in a stack buffer.
    @inline(__always)
    public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var words = (high.bigEndian, low.bigEndian)
        return try withUnsafeBytes(of: &words) { try body($0) }
    }

    /// Lowercase hexadecimal (32 digits).
    public var hex: String { bytes.hex }
    public var description: String { hex }
}

/// The platform- and environment-scoped keyed hash of an original transaction identity: the first
/// 16 bytes of HMAC-SHA256(ledger key, "apple|<environment>|<originalTransactionId>"). The Apple
/// identifier itself never reaches the log. (Format 1 stored all 32 bytes: truncated, a format-1
/// key equals the format-2 key, so lookups by original transaction id survive the upgrade.)
public struct LineageKey: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let key: Key128
    public init(_ key: Key128) { self.key = key }
    public func hash(into hasher: inout Hasher) { key.hash(into: &hasher) }
    public func _rawHashValue(seed: Int) -> Int { key._rawHashValue(seed: seed) }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.key < rhs.key }
    public var bytes: [UInt8] { key.bytes }
    public var description: String { key.hex }
}

/// The pseudonym of an account (16 bytes issued by the identity vault: the log position at issue,
/// then 10 random bytes; `LedgerStore.issuePseudonym`). Events
/// name accounts only by pseudonym; the UID mapping is deleted with the account.
public struct AccountID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let key: Key128
    public init(_ key: Key128) { self.key = key }
    public func hash(into hasher: inout Hasher) { key.hash(into: &hasher) }
    public func _rawHashValue(seed: Int) -> Int { key._rawHashValue(seed: seed) }
    /// Wraps `bytes`; nil unless there are exactly 16.
    public init?(_ bytes: [UInt8]) {
        guard let key = Key128(bytes) else { return nil }
        self.key = key
    }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.key < rhs.key }
    public var bytes: [UInt8] { key.bytes }
    public var description: String { key.hex }
    /// The account named briefly in text: "…" and the last 8 hex digits (the first ones are the
    /// position it was issued at, which accounts issued close together share).
    public var shortDescription: String { "…" + description.suffix(8) }
}

/// Identifies an enrolled support staff member (chosen by the roster administrator, e.g. "alice").
public typealias StaffID = String

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

/// The rule for a Firebase UID the ledger accepts, as `submit`'s `account` or an ID token's `sub`: 1 to
/// 256 UTF-8 bytes, no control character (U+0000–U+001F, U+007F: no Firebase UID holds one, and no query
/// could name it).
public enum FirebaseUID {
    public static let maximumBytes = 256

    /// Why `uid` is not such a UID (a phrase completing "the UID …"), or nil when it is.
    public static func problem(_ uid: String) -> String? {
        if uid.isEmpty || uid.utf8.count > maximumBytes { return "must be 1 to \(maximumBytes) bytes" }
        if uid.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
            return "contains a control character (U+0000–U+001F or U+007F); a Firebase UID never does"
        }
        return nil
    }
}
