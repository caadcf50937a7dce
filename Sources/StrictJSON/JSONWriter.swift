/// Renders JSON on one line, the way the ledger prints every answer.
///
/// - Object keys are sorted by their UTF-8 bytes (code point order).
/// - Strings escape only `"`, `\` and the control characters U+0000–U+001F (`\b \f \n \r \t`, else
///   `\u00xx` in lowercase hex); `/` and every other character, non-ASCII included, are written as is.
/// - Integers print in decimal. Other numbers print in Swift's shortest round-trip form with a
///   trailing `.0` removed (`0.93`, `1e-05`, `12`), except zero (`0.0`, `-0.0`: a number, not the
///   integer 0, so a value read back renders the same); a non-finite number prints as `null`.
///
/// For keys that differ only in letter case or in digit runs, Foundation's `JSONSerialization`
/// on Linux sorts differently (it compares case-insensitively and numerically); everything else
/// is byte for byte what `JSONSerialization` with `.sortedKeys` and `.withoutEscapingSlashes` prints.
public enum JSONWriter {
    /// `value` as UTF-8 bytes.
    public static func render(_ value: JSONValue) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(256)
        write(value, into: &output)
        return output
    }

    /// `value` as a `String`.
    public static func string(_ value: JSONValue) -> String { String(decoding: render(value), as: UTF8.self) }

    /// Appends `value` to `output`.
    public static func write(_ value: JSONValue, into output: inout [UInt8]) {
        switch value {
        case .null: append("null", to: &output)
        case .bool(let flag): append(flag ? "true" : "false", to: &output)
        case .integer(let integer): writeInteger(integer, into: &output)
        case .number(let double): writeDouble(double, into: &output)
        case .string(let string): writeString(string, into: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                write(element, into: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            members.pairs.withUnsafeBufferPointer { pairs in
                withUnsafeTemporaryAllocation(of: Int.self, capacity: pairs.count) { order in
                    sortedOrder(of: pairs, into: order)
                    for (index, member) in order.enumerated() {
                        if index > 0 { output.append(UInt8(ascii: ",")) }
                        writeString(pairs[member].key, into: &output)
                        output.append(UInt8(ascii: ":"))
                        write(pairs[member].value, into: &output)
                    }
                }
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    /// Fills `order` with the indices of `pairs` in key order (``JSONBytes/less(_:_:)``), comparing the
    /// keys in place: no member is copied. An insertion sort for the few keys of an answer, a sort of
    /// the indices beyond that.
    static func sortedOrder(of pairs: UnsafeBufferPointer<(key: String, value: JSONValue)>, into order: UnsafeMutableBufferPointer<Int>) {
        guard pairs.count > 16 else {
            for member in pairs.indices {
                var slot = member
                while slot > 0, JSONBytes.less(pairs[member].key, pairs[order[slot - 1]].key) {
                    order[slot] = order[slot - 1]
                    slot -= 1
                }
                order[slot] = member
            }
            return
        }
        var order = order
        for member in pairs.indices { order[member] = member }
        order.sort { JSONBytes.less(pairs[$0].key, pairs[$1].key) }
    }

    /// Appends `text` as it is, unescaped: JSON punctuation and keys known to need no escaping.
    public static func append(_ text: StaticString, to output: inout [UInt8]) {
        output.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Appends `value` in decimal.
    public static func writeInteger(_ value: Int64, into output: inout [UInt8]) {
        if value < 0 { output.append(UInt8(ascii: "-")) }
        var digits = 1
        var rest = value.magnitude
        while rest >= 10 {
            rest /= 10
            digits += 1
        }
        let start = output.count
        output.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: digits))
        rest = value.magnitude
        for index in (start..<start + digits).reversed() {
            output[index] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
        }
    }

    static func writeDouble(_ value: Double, into output: inout [UInt8]) {
        guard value.isFinite else { return append("null", to: &output) }
        var text = value.description
        if text.hasSuffix(".0") && value != 0 { text.removeLast(2) }
        output.append(contentsOf: text.utf8)
    }

    /// Appends `string` quoted and escaped.
    public static func writeString(_ string: String, into output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        let written: Void? = string.utf8.withContiguousStorageIfAvailable { writeEscaped($0, into: &output) }
        if written == nil { Array(string.utf8).withUnsafeBufferPointer { writeEscaped($0, into: &output) } }
        output.append(UInt8(ascii: "\""))
    }

    /// Copies runs that need no escaping in one piece.
    static func writeEscaped(_ bytes: UnsafeBufferPointer<UInt8>, into output: inout [UInt8]) {
        var runStart = 0
        for index in bytes.indices {
            let byte = bytes[index]
            guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
            output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index]))
            runStart = index + 1
            switch byte {
            case UInt8(ascii: "\""): append("\\\"", to: &output)
            case UInt8(ascii: "\\"): append("\\\\", to: &output)
            case 0x08: append("\\b", to: &output)
            case 0x0C: append("\\f", to: &output)
            case 0x0A: append("\\n", to: &output)
            case 0x0D: append("\\r", to: &output)
            case 0x09: append("\\t", to: &output)
            default:
                append("\\u00", to: &output)
                output.append(hexDigit(byte >> 4))
                output.append(hexDigit(byte & 0x0F))
            }
        }
        output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
    }

    static func hexDigit(_ nibble: UInt8) -> UInt8 { nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10 }
}
