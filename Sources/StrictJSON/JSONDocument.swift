/// One JSON text as ``JSONReader/document(_:)`` read it: its bytes and one token per value in document
/// order (a *tape*). A member is found by comparing key bytes in place and a string is made only when
/// asked for, so taking the fields a line needs builds no tree of values (``JSONView``).
public final class JSONDocument: Sendable {
    /// The longest input a document holds (its tokens address bytes with 32 bits).
    public static let maximumBytes = Int(UInt32.max)

    let bytes: [UInt8]
    /// The strings that held escapes, unescaped, one after the other.
    let unescaped: [UInt8]
    let tokens: [JSONToken]

    init(bytes: [UInt8], unescaped: [UInt8], tokens: [JSONToken]) {
        self.bytes = bytes
        self.unescaped = unescaped
        self.tokens = tokens
    }

    /// `value` as a document, for code that holds a tree (it is rendered and read back).
    public convenience init(_ value: JSONValue) throws(JSONError) {
        let read = try JSONReader(maximumDepth: .max, maximumBytes: Self.maximumBytes).document(JSONWriter.render(value))
        self.init(bytes: read.bytes, unescaped: read.unescaped, tokens: read.tokens)
    }

    /// The document's value.
    public var root: JSONView { JSONView(document: self, index: 0) }

    /// The bytes of string token `token` (unescaped).
    func withBytes<R>(of token: JSONToken, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        let range = Int(token.start)..<Int(token.start) + Int(token.length)
        if token.escaped { return unescaped.withUnsafeBufferPointer { body(UnsafeBufferPointer(rebasing: $0[range])) } }
        return bytes.withUnsafeBufferPointer { body(UnsafeBufferPointer(rebasing: $0[range])) }
    }

    /// A cheap summary of a key's bytes (its length, first and last eight bytes) that tells most
    /// different keys apart without comparing them; equal keys always have equal fingerprints.
    static func fingerprint(_ key: UnsafeBufferPointer<UInt8>) -> UInt64 {
        guard let base = key.baseAddress, !key.isEmpty else { return 0 }
        let count = key.count
        var head: UInt64 = 0
        var tail: UInt64 = 0
        if count >= 8 {
            head = UnsafeRawPointer(base).loadUnaligned(as: UInt64.self)
            tail = UnsafeRawPointer(base + count - 8).loadUnaligned(as: UInt64.self)
        } else {
            for offset in 0..<count { head |= UInt64(base[offset]) << (8 * UInt64(offset)) }
        }
        return (head &* 0x9E37_79B9_7F4A_7C15) ^ (tail &* 0xC2B2_AE3D_27D4_EB4F) ^ UInt64(count)
    }

    /// The bit of an object's key set (its token's payload: one bit per key, by fingerprint) that
    /// `fingerprint` sets: a key whose bit is clear is not among the members, without a search.
    static func keyBit(_ fingerprint: UInt64) -> UInt64 { 1 << (fingerprint >> 58) }
}

/// One value of a ``JSONDocument``: a token over the input's bytes.
struct JSONToken {
    enum Kind: UInt8 {
        case null, `false`, `true`, integer, number, string, array, object
    }

    var kind: Kind
    /// A string whose bytes are in the document's unescaped strings, not in its input.
    var escaped = false
    /// A string's first byte (after the quote); a container's opening bracket.
    var start: UInt32
    /// A string's byte count; an array's elements or an object's members.
    var length: UInt32
    /// The index of the token after this value and everything inside it.
    var end: UInt32
    /// An integer's `Int64` bits, a number's `Double` bits, a key's ``JSONDocument/fingerprint(_:)``,
    /// an object's key set (``JSONDocument/keyBit(_:)`` of each key).
    var payload: UInt64

    init(kind: Kind, start: UInt32, length: UInt32, end: UInt32, payload: UInt64) {
        self.kind = kind
        self.start = start
        self.length = length
        self.end = end
        self.payload = payload
    }
}

/// A value inside a ``JSONDocument``, read in place: scalars without allocating, strings made when
/// asked for, members found by their key's bytes. ``value`` builds the ``JSONValue`` tree.
public struct JSONView: Sendable {
    let document: JSONDocument
    let index: Int

    private var token: JSONToken { document.tokens[index] }

    public var isNull: Bool { token.kind == .null }
    public var isObject: Bool { token.kind == .object }
    public var isArray: Bool { token.kind == .array }

    /// The string, when this is one.
    public var string: String? {
        let token = token
        guard token.kind == .string else { return nil }
        return document.withBytes(of: token) { String(decoding: $0, as: UTF8.self) }
    }

    /// The integer, when this is a number written as a plain integer within `Int64` (``JSONValue/integer(_:)``).
    public var integer: Int64? {
        let token = token
        return token.kind == .integer ? Int64(bitPattern: token.payload) : nil
    }

    /// The number, when this is one not written as a plain integer within `Int64` (``JSONValue/number(_:)``).
    public var number: Double? {
        let token = token
        return token.kind == .number ? Double(bitPattern: token.payload) : nil
    }

    /// The boolean, when this is one.
    public var bool: Bool? {
        switch token.kind {
        case .true: true
        case .false: false
        default: nil
        }
    }

    /// What kind of value this is, for error messages (``JSONValue/kind``).
    public var kind: String {
        switch token.kind {
        case .null: "null"
        case .false, .true: "a boolean"
        case .integer, .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// The value of the member whose key is `key`'s bytes, when this is an object that has one.
    public subscript(key: String) -> JSONView? {
        if let found = key.utf8.withContiguousStorageIfAvailable({ member(named: $0) }) { return found }
        var key = key  // without contiguous UTF-8 (bridged): made contiguous
        return key.withUTF8 { member(named: $0) }
    }

    /// The value of the member whose key is the bytes `wanted`, when this is an object that has one.
    public func member(named wanted: UnsafeBufferPointer<UInt8>) -> JSONView? {
        let object = token
        guard object.kind == .object, object.length > 0 else { return nil }
        let fingerprint = JSONDocument.fingerprint(wanted)
        guard object.payload & JSONDocument.keyBit(fingerprint) != 0 else { return nil }
        let found: Int? = document.tokens.withUnsafeBufferPointer { tokens in
            var member = index + 1
            for _ in 0..<object.length {
                let candidate = tokens[member]
                if candidate.payload == fingerprint, Int(candidate.length) == wanted.count,
                    document.withBytes(of: candidate, { JSONBytes.same($0, wanted) })
                {
                    return member + 1
                }
                member = Int(tokens[member + 1].end)
            }
            return nil
        }
        return found.map { JSONView(document: document, index: $0) }
    }

    /// The members of an object, in document order (none for any other value).
    public var members: [(key: String, value: JSONView)] {
        var members: [(key: String, value: JSONView)] = []
        forEachMember { key, value in members.append((String(decoding: key, as: UTF8.self), value)) }
        return members
    }

    /// Calls `body` with each member's key bytes and value, in document order (none unless an object).
    public func forEachMember(_ body: (UnsafeBufferPointer<UInt8>, JSONView) -> Void) {
        let object = token
        guard object.kind == .object else { return }
        var member = index + 1
        for _ in 0..<object.length {
            let key = document.tokens[member]
            document.withBytes(of: key) { body($0, JSONView(document: document, index: member + 1)) }
            member = Int(document.tokens[member + 1].end)
        }
    }

    /// The elements of an array, in order (none for any other value).
    public var elements: [JSONView] {
        let array = token
        guard array.kind == .array else { return [] }
        var elements: [JSONView] = []
        elements.reserveCapacity(Int(array.length))
        var element = index + 1
        for _ in 0..<array.length {
            elements.append(JSONView(document: document, index: element))
            element = Int(document.tokens[element].end)
        }
        return elements
    }

    /// This value as a tree.
    public var value: JSONValue {
        let token = token
        switch token.kind {
        case .null: return .null
        case .false: return .bool(false)
        case .true: return .bool(true)
        case .integer: return .integer(Int64(bitPattern: token.payload))
        case .number: return .number(Double(bitPattern: token.payload))
        case .string: return .string(string ?? "")
        case .array: return .array(elements.map(\.value))
        case .object:
            var pairs: [(key: String, value: JSONValue)] = []
            pairs.reserveCapacity(Int(token.length))
            forEachMember { key, value in pairs.append((String(decoding: key, as: UTF8.self), value.value)) }
            return .object(JSONMembers(unique: pairs))
        }
    }
}
