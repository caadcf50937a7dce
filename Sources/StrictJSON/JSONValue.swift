#if canImport(Glibc)
    import Glibc
#else
    import Darwin
#endif

/// A JSON value as ``JSONReader`` reads it and ``JSONWriter`` renders it.
///
/// Numbers keep the distinction that matters to the ledger: a number written as a plain integer
/// (no fraction, no exponent) that fits in `Int64` is ``integer(_:)``, exactly; every other number
/// is ``number(_:)``, the nearest `Double`.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// A number written without fraction or exponent, within `Int64`: exact.
    case integer(Int64)
    /// Any other number: with a fraction or an exponent, or an integer beyond `Int64`.
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONMembers)

    /// The string, when this is one.
    public var string: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The members, when this is an object.
    public var members: JSONMembers? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// The elements, when this is an array.
    public var elements: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// What kind of value this is, for error messages: "a string", "an object", ...
    public var kind: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .integer, .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) { self = .object(JSONMembers(elements)) }
    public init(nilLiteral: ()) { self = .null }
}

/// The members of a JSON object in the order they were read or added. Keys are unique and are
/// compared as UTF-8 bytes, never with `String` equality (which treats canonically equivalent
/// spellings, e.g. `K` and KELVIN SIGN, as one key).
public struct JSONMembers: Sendable, Equatable, ExpressibleByDictionaryLiteral {
    /// Every member, in order.
    public private(set) var pairs: [(key: String, value: JSONValue)]

    public init() { pairs = [] }

    /// The members of `pairs`; a later pair replaces an earlier one with the same key.
    public init(_ pairs: [(String, JSONValue)]) {
        self.pairs = []
        self.pairs.reserveCapacity(pairs.count)
        for (key, value) in pairs { self[key] = value }
    }

    public init(dictionaryLiteral elements: (String, JSONValue)...) { self.init(elements) }

    /// Members already known to have distinct keys (the reader checked them).
    init(unique pairs: [(key: String, value: JSONValue)]) { self.pairs = pairs }

    public var count: Int { pairs.count }
    public var isEmpty: Bool { pairs.isEmpty }
    public var keys: [String] { pairs.map(\.key) }

    /// The value of `key` (compared byte for byte); setting nil removes the member.
    public subscript(key: String) -> JSONValue? {
        get {
            // Through the buffer: only the matching member's value is copied (a `for pair in pairs`
            // loop copies, retains and releases every member it passes).
            guard let index = JSONBytes.index(of: key, in: pairs) else { return nil }
            return pairs[index].value
        }
        set {
            let index = JSONBytes.index(of: key, in: pairs)
            switch (index, newValue) {
            case (let index?, let value?): pairs[index].value = value
            case (let index?, nil): pairs.remove(at: index)
            case (nil, let value?): pairs.append((key, value))
            case (nil, nil): break
            }
        }
    }

    /// True when both objects have the same keys with equal values, in any order.
    public static func == (lhs: JSONMembers, rhs: JSONMembers) -> Bool {
        guard lhs.count == rhs.count else { return false }
        return lhs.pairs.allSatisfy { pair in rhs[pair.key] == pair.value }
    }
}

/// Byte-level comparisons of strings as UTF-8.
public enum JSONBytes {
    /// The index of the member whose key is `key`'s bytes. The keys are read in place (a loop over
    /// the members would copy each one, retaining and releasing its key and value) and told apart by
    /// length before their bytes are compared.
    static func index(of key: String, in pairs: [(key: String, value: JSONValue)]) -> Int? {
        let length = key.utf8.count
        return pairs.withUnsafeBufferPointer { members in
            members.indices.first { members[$0].key.utf8.count == length && equal(members[$0].key, key) }
        }
    }

    /// True when `a` and `b` are the same UTF-8 bytes.
    public static func equal(_ a: String, _ b: String) -> Bool {
        // Most keys compared differ in length: tell them apart without touching their bytes.
        guard a.utf8.count == b.utf8.count else { return false }
        // Native strings (every string read or written here) lend their UTF-8 at once.
        let fast = a.utf8.withContiguousStorageIfAvailable { left in
            b.utf8.withContiguousStorageIfAvailable { right in
                guard let l = left.baseAddress, let r = right.baseAddress else { return true }  // both empty
                return memcmp(l, r, left.count) == 0
            }
        }
        if let fast, let result = fast { return result }
        return a.utf8.elementsEqual(b.utf8)
    }

    /// True when `string`'s UTF-8 is `bytes`.
    public static func equal(_ string: String, _ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard string.utf8.count == bytes.count else { return false }
        return string.utf8.withContiguousStorageIfAvailable { same($0, bytes) } ?? string.utf8.elementsEqual(bytes)
    }

    /// True when `a` and `b` hold the same bytes.
    static func same(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        guard let left = a.baseAddress, let right = b.baseAddress else { return true }  // both empty
        return memcmp(left, right, a.count) == 0
    }

    /// UTF-8 byte order (which is also Unicode code point order).
    public static func less(_ a: String, _ b: String) -> Bool {
        let fast = a.utf8.withContiguousStorageIfAvailable { left in
            b.utf8.withContiguousStorageIfAvailable { right in
                let common = min(left.count, right.count)
                guard common > 0, let l = left.baseAddress, let r = right.baseAddress else { return left.count < right.count }
                let order = memcmp(l, r, common)
                return order != 0 ? order < 0 : left.count < right.count
            }
        }
        if let fast, let result = fast { return result }
        return a.utf8.lexicographicallyPrecedes(b.utf8)
    }
}
