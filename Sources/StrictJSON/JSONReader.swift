/// Why bytes were not accepted as JSON. `message` names what was wrong and where (byte offset).
public struct JSONError: Error, Equatable, Sendable, CustomStringConvertible {
    public var message: String

    public init(_ message: String) { self.message = message }

    public var description: String { message }
}

/// A strict RFC 8259 reader over UTF-8 bytes.
///
/// Stricter than RFC 8259 and than Foundation's `JSONSerialization` where ambiguity is an attack
/// surface: a key repeated in one object is refused (never "last one wins"), nesting and size are
/// limited, strings must be valid UTF-8 with no unpaired surrogate escape, and the input must be
/// one value with nothing but JSON whitespace around it. Numbers written as plain integers that
/// fit in `Int64` are read exactly (``JSONValue/integer(_:)``).
public struct JSONReader: Sendable {
    /// Arrays and objects nested deeper than this are refused.
    public var maximumDepth: Int
    /// Inputs longer than this many bytes are refused.
    public var maximumBytes: Int

    /// The default limits are those of the `ledger submit` protocol (docs/protocol.md).
    public init(maximumDepth: Int = 32, maximumBytes: Int = 1 << 20) {
        self.maximumDepth = maximumDepth
        self.maximumBytes = maximumBytes
    }

    /// Reads exactly one JSON value from `bytes` into a ``JSONDocument``: every check of ``value(_:)``,
    /// without building a tree (the members a caller asks for are found in place).
    @inlinable  // specialized in the caller: an array of bytes is kept as it is, not copied through witnesses
    public func document(_ bytes: some Collection<UInt8>) throws(JSONError) -> JSONDocument {
        let limit = min(maximumBytes, JSONDocument.maximumBytes)
        guard bytes.count <= limit else { throw JSONError("input is longer than \(limit) bytes") }
        return try document(owning: Array(bytes))
    }

    @usableFromInline func document(owning bytes: [UInt8]) throws(JSONError) -> JSONDocument {
        try bytes.withUnsafeBufferPointer { buffer throws(JSONError) in
            var parser = Parser(buffer, maximumDepth: maximumDepth)
            try parser.document()
            return JSONDocument(bytes: bytes, unescaped: parser.unescaped, tokens: parser.tokens)
        }
    }

    /// Reads exactly one JSON value from `bytes`.
    public func value(_ bytes: some Collection<UInt8>) throws(JSONError) -> JSONValue { try document(bytes).root.value }

    /// Reads exactly one JSON object from `bytes`.
    public func object(_ bytes: some Collection<UInt8>) throws(JSONError) -> JSONMembers {
        let parsed = try value(bytes)
        guard case .object(let members) = parsed else { throw JSONError("the JSON value is \(parsed.kind), not an object") }
        return members
    }
}

/// Recursive descent over one contiguous buffer, writing one ``JSONToken`` per value.
private struct Parser {
    let bytes: UnsafeBufferPointer<UInt8>
    let maximumDepth: Int
    var index = 0
    var depth = 0
    var tokens: [JSONToken] = []
    /// Strings with escapes, unescaped, one after the other.
    var unescaped: [UInt8] = []

    init(_ bytes: UnsafeBufferPointer<UInt8>, maximumDepth: Int) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
        // About one value per 12 bytes in the protocol's lines: one allocation for most.
        tokens.reserveCapacity(max(8, bytes.count / 12))
    }

    mutating func document() throws(JSONError) {
        skipWhitespace()
        try parseValue()
        skipWhitespace()
        guard index == bytes.count else { throw unexpected("after the JSON value") }
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    /// Appends a token for a value without contents.
    mutating func scalar(_ kind: JSONToken.Kind, payload: UInt64 = 0) {
        tokens.append(JSONToken(kind: kind, start: 0, length: 0, end: UInt32(tokens.count + 1), payload: payload))
    }

    mutating func parseValue() throws(JSONError) {
        guard index < bytes.count else { throw JSONError("unexpected end of input at byte \(index)") }
        switch bytes[index] {
        case UInt8(ascii: "{"): try parseObject()
        case UInt8(ascii: "["): try parseArray()
        case UInt8(ascii: "\""): try parseString(key: false)
        case UInt8(ascii: "t"): try literal("true", .true)
        case UInt8(ascii: "f"): try literal("false", .false)
        case UInt8(ascii: "n"): try literal("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try parseNumber()
        default: throw unexpected("where a value was expected")
        }
    }

    mutating func literal(_ word: StaticString, _ kind: JSONToken.Kind) throws(JSONError) {
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count,
            UnsafeBufferPointer(rebasing: bytes[index..<index + count]).elementsEqual(
                UnsafeBufferPointer(start: word.utf8Start, count: count))
        else { throw unexpected("where a value was expected") }
        index += count
        scalar(kind)
    }

    mutating func enter() throws(JSONError) {
        depth += 1
        guard depth <= maximumDepth else { throw JSONError("arrays and objects are nested deeper than \(maximumDepth) levels") }
    }

    /// Appends the container's token; its count and end are filled in by ``finish(_:count:)``.
    mutating func open(_ kind: JSONToken.Kind) -> Int {
        tokens.append(JSONToken(kind: kind, start: UInt32(index), length: 0, end: 0, payload: 0))
        return tokens.count - 1
    }

    mutating func finish(_ container: Int, count: Int) {
        tokens[container].length = UInt32(count)
        tokens[container].end = UInt32(tokens.count)
    }

    mutating func parseObject() throws(JSONError) {
        try enter()
        let object = open(.object)
        index += 1
        var count = 0
        var seen: Set<[UInt8]>?
        skipWhitespace()
        if close(UInt8(ascii: "}")) { return finish(object, count: 0) }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw unexpected("where a key was expected") }
            let keyOffset = index
            let key = tokens.count
            try parseString(key: true)
            tokens[object].payload |= JSONDocument.keyBit(tokens[key].payload)
            if count < 16 {
                // The keys before this one, compared by fingerprint first: no string is made.
                var member = object + 1
                for _ in 0..<count {
                    if tokens[member].payload == tokens[key].payload && sameBytes(member, key) { throw duplicate(key, at: keyOffset) }
                    member = Int(tokens[member + 1].end)
                }
            } else {
                if seen == nil {
                    seen = []
                    var member = object + 1
                    for _ in 0..<count {
                        seen?.insert(bytes(of: member))
                        member = Int(tokens[member + 1].end)
                    }
                }
                guard seen?.insert(bytes(of: key)).inserted == true else { throw duplicate(key, at: keyOffset) }
            }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw unexpected("where ':' was expected") }
            index += 1
            skipWhitespace()
            try parseValue()
            count += 1
            if try endOfElement(UInt8(ascii: "}"), "object") { return finish(object, count: count) }
        }
    }

    mutating func parseArray() throws(JSONError) {
        try enter()
        let array = open(.array)
        index += 1
        var count = 0
        skipWhitespace()
        if close(UInt8(ascii: "]")) { return finish(array, count: 0) }
        while true {
            skipWhitespace()
            try parseValue()
            count += 1
            if try endOfElement(UInt8(ascii: "]"), "array") { return finish(array, count: count) }
        }
    }

    /// Whether the strings of tokens `a` and `b` are the same bytes.
    func sameBytes(_ a: Int, _ b: Int) -> Bool {
        let (x, y) = (tokens[a], tokens[b])
        guard x.length == y.length else { return false }
        return withBytes(of: x) { left in withBytes(of: y) { right in JSONBytes.same(left, right) } }
    }

    /// The bytes of string token `token` (unescaped).
    func withBytes<R>(of token: JSONToken, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        let range = Int(token.start)..<Int(token.start) + Int(token.length)
        if token.escaped { return unescaped.withUnsafeBufferPointer { body(UnsafeBufferPointer(rebasing: $0[range])) } }
        return body(UnsafeBufferPointer(rebasing: bytes[range]))
    }

    func bytes(of token: Int) -> [UInt8] { withBytes(of: tokens[token]) { Array($0) } }

    /// Consumes `closer`, which ends the current array or object, when it is next.
    mutating func close(_ closer: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == closer else { return false }
        index += 1
        depth -= 1
        return true
    }

    /// After a member or an element: true when `closer` ended the container, false after a comma.
    mutating func endOfElement(_ closer: UInt8, _ container: String) throws(JSONError) -> Bool {
        skipWhitespace()
        guard index < bytes.count else { throw JSONError("unexpected end of input at byte \(index): the \(container) is not closed") }
        if bytes[index] == UInt8(ascii: ",") {
            index += 1
            return false
        }
        if close(closer) { return true }
        throw unexpected("where ',' or '\(Character(Unicode.Scalar(closer)))' was expected")
    }

    /// A string starting at the opening quote, as a token over its bytes in the input, or over its
    /// unescaped bytes in ``unescaped`` when it holds escapes. A key's token carries its fingerprint.
    mutating func parseString(key: Bool) throws(JSONError) {
        let start = index
        index += 1
        var runStart = index
        var ascii = true
        var escapedFrom: Int?
        while true {
            guard index < bytes.count else { throw JSONError("unexpected end of input: the string at byte \(start) is not closed") }
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") { break }
            if byte == UInt8(ascii: "\\") {
                if escapedFrom == nil { escapedFrom = unescaped.count }
                unescaped.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
                try parseEscape()
                runStart = index
                continue
            }
            if byte < 0x20 {
                throw JSONError("control character U+\(hex(byte, digits: 4)) at byte \(index) must be escaped in a string")
            }
            if byte >= 0x80 { ascii = false }
            index += 1
        }
        let end = index
        index += 1
        var token: JSONToken
        if let escapedFrom {
            unescaped.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<end]))
            let run = unescaped[escapedFrom...]
            guard String(validating: run, as: UTF8.self) != nil else { throw invalidUTF8(in: start) }
            token = JSONToken(kind: .string, start: UInt32(escapedFrom), length: UInt32(run.count), end: UInt32(tokens.count + 1), payload: 0)
            token.escaped = true
        } else {
            let run = UnsafeBufferPointer(rebasing: bytes[runStart..<end])
            if !ascii && String(validating: run, as: UTF8.self) == nil { throw invalidUTF8(in: start) }
            token = JSONToken(kind: .string, start: UInt32(runStart), length: UInt32(run.count), end: UInt32(tokens.count + 1), payload: 0)
        }
        if key { token.payload = withBytes(of: token, JSONDocument.fingerprint) }
        tokens.append(token)
    }

    /// One escape sequence at `index` (the backslash), appended to ``unescaped`` as UTF-8.
    mutating func parseEscape() throws(JSONError) {
        let at = index
        guard index + 1 < bytes.count else { throw JSONError("unexpected end of input in the escape at byte \(at)") }
        let code = bytes[index + 1]
        index += 2
        switch code {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): unescaped.append(code)
        case UInt8(ascii: "b"): unescaped.append(0x08)
        case UInt8(ascii: "f"): unescaped.append(0x0C)
        case UInt8(ascii: "n"): unescaped.append(0x0A)
        case UInt8(ascii: "r"): unescaped.append(0x0D)
        case UInt8(ascii: "t"): unescaped.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try hex4(at: at)
            if (0xD800...0xDBFF).contains(scalar) {
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw JSONError("unpaired surrogate escape at byte \(at)")
                }
                let lowAt = index
                index += 2
                let low = try hex4(at: lowAt)
                guard (0xDC00...0xDFFF).contains(low) else { throw JSONError("unpaired surrogate escape at byte \(at)") }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw JSONError("unpaired surrogate escape at byte \(at)")
            }
            appendUTF8(scalar)
        default:
            throw JSONError("invalid escape at byte \(at)")
        }
    }

    mutating func hex4(at escape: Int) throws(JSONError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw JSONError("invalid \\u escape at byte \(escape)") }
        var value: UInt32 = 0
        for offset in 0..<4 {
            let byte = bytes[index + offset]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw JSONError("invalid \\u escape at byte \(escape)")
            }
            value = value << 4 | UInt32(digit)
        }
        index += 4
        return value
    }

    mutating func appendUTF8(_ scalar: UInt32) {
        switch scalar {
        case 0..<0x80: unescaped.append(UInt8(scalar))
        case 0x80..<0x800:
            unescaped.append(UInt8(0xC0 | scalar >> 6))
            unescaped.append(UInt8(0x80 | scalar & 0x3F))
        case 0x800..<0x10000:
            unescaped.append(UInt8(0xE0 | scalar >> 12))
            unescaped.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            unescaped.append(UInt8(0x80 | scalar & 0x3F))
        default:
            unescaped.append(UInt8(0xF0 | scalar >> 18))
            unescaped.append(UInt8(0x80 | scalar >> 12 & 0x3F))
            unescaped.append(UInt8(0x80 | scalar >> 6 & 0x3F))
            unescaped.append(UInt8(0x80 | scalar & 0x3F))
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`; plain integers within Int64 are exact.
    mutating func parseNumber() throws(JSONError) {
        let start = index
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw JSONError("number at byte \(start) has no digits") }
        if bytes[index] == UInt8(ascii: "0"), index + 1 < bytes.count, isDigit(bytes[index + 1]) {
            throw JSONError("number at byte \(start) has a leading zero")
        }
        var magnitude: UInt64 = 0
        var overflow = false
        while index < bytes.count, isDigit(bytes[index]) {
            let (times10, o1) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times10.addingReportingOverflow(UInt64(bytes[index] - UInt8(ascii: "0")))
            overflow = overflow || o1 || o2
            magnitude = sum
            index += 1
        }
        var plainInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            plainInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw JSONError("number at byte \(start) has no digits after '.'") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            plainInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw JSONError("number at byte \(start) has no exponent digits") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if plainInteger && !overflow {
            if !negative && magnitude <= UInt64(Int64.max) { return scalar(.integer, payload: magnitude) }
            if negative && magnitude <= UInt64(Int64.max) + 1 { return scalar(.integer, payload: 0 &- magnitude) }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let double = Double(text), double.isFinite else { throw JSONError("number at byte \(start) is out of range") }
        scalar(.number, payload: double.bitPattern)
    }

    func isDigit(_ byte: UInt8) -> Bool { byte &- UInt8(ascii: "0") < 10 }

    func unexpected(_ context: String) -> JSONError {
        guard index < bytes.count else { return JSONError("unexpected end of input at byte \(index)") }
        let byte = bytes[index]
        if byte >= 0x80 && String(validating: bytes, as: UTF8.self) == nil {
            return JSONError("input is not valid UTF-8 (byte \(index))")
        }
        let shown = (0x21..<0x7F).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(hex(byte, digits: 2))"
        return JSONError("unexpected \(shown) at byte \(index) \(context)")
    }

    func invalidUTF8(in string: Int) -> JSONError {
        JSONError("input is not valid UTF-8 (in the string at byte \(string))")
    }

    func duplicate(_ token: Int, at offset: Int) -> JSONError {
        let key = withBytes(of: tokens[token]) { String(decoding: $0, as: UTF8.self) }
        let shown = key.count <= 64 ? key : key.prefix(64) + "…"
        return JSONError("duplicate key \"\(shown)\" at byte \(offset): a key may appear only once in an object")
    }

    func hex(_ byte: UInt8, digits: Int) -> String {
        let text = String(byte, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}
