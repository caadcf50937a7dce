import Foundation
import LedgerTestSupport
import Testing

@testable import StrictJSON

/// The strict codec against Foundation's `JSONSerialization` on valid input: both must read the
/// same values, and the writer must print what `JSONSerialization` (`.sortedKeys`,
/// `.withoutEscapingSlashes`) prints.
@Suite struct DifferentialTests {
    /// Random valid JSON: values, and a text for each written with random whitespace and escapes.
    struct Generator {
        var rng: SeededGenerator
        /// Keys are lowercase ASCII: Foundation's dictionaries merge canonically equivalent keys,
        /// and its sorted output orders letter case and digit runs differently (see JSONWriter).
        static let keyAlphabet = Array("abcdefghijklmnopqrstuvwxyz")
        static let stringAlphabet: [Character] = Array("aZ09 _-./\\\"'{}[]:,é€😀\u{7F}\u{2028}\u{0}\u{1}\u{8}\u{9}\u{A}\u{C}\u{D}\u{1F}")

        mutating func value(depth: Int = 0) -> JSONValue {
            switch Int.random(in: 0..<(depth < 4 ? 9 : 6), using: &rng) {
            case 0: return .null
            case 1: return .bool(Bool.random(using: &rng))
            case 2: return .integer(Int64.random(in: -1_000_000...1_000_000, using: &rng))
            case 3: return .integer([Int64.max, Int64.min, 0, 1_793_527_200_000, -1][Int.random(in: 0..<5, using: &rng)])
            case 4: return .number(Double(Int64.random(in: -1_000_000_000...1_000_000_000, using: &rng) | 1) / 1024)
            case 5: return .string(string(Int.random(in: 0..<12, using: &rng), from: Self.stringAlphabet))
            case 6, 7:
                var members = JSONMembers()
                for _ in 0..<Int.random(in: 0..<6, using: &rng) {
                    members[string(Int.random(in: 1..<6, using: &rng), from: Self.keyAlphabet)] = value(depth: depth + 1)
                }
                return .object(members)
            default: return .array((0..<Int.random(in: 0..<5, using: &rng)).map { _ in value(depth: depth + 1) })
            }
        }

        mutating func string(_ count: Int, from alphabet: [Character]) -> String {
            String((0..<count).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &rng)] })
        }

        /// `value` as JSON text, with random insignificant whitespace and random (valid) escapes.
        mutating func text(_ value: JSONValue) -> String {
            let space = [" ", "\t", "\n", "\r\n", ""][Int.random(in: 0..<5, using: &rng)]
            switch value {
            case .null: return "null"
            case .bool(let flag): return flag ? "true" : "false"
            case .integer(let integer): return String(integer)
            case .number(let double):
                return Bool.random(using: &rng) ? "\(double)" : String(format: "%.17e", double)
            case .string(let string): return quoted(string)
            case .array(let elements): return "[" + space + elements.map { text($0) }.joined(separator: space + "," + space) + space + "]"
            case .object(let members):
                return "{" + space + members.pairs.map { quoted($0.key) + space + ":" + space + text($0.value) }.joined(separator: "," + space) + "}"
            }
        }

        mutating func quoted(_ string: String) -> String {
            var out = "\""
            for scalar in string.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "/" where Bool.random(using: &rng): out += "\\/"
                case "\u{8}": out += "\\b"
                case "\u{C}": out += "\\f"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case _ where scalar.value < 0x20 || Int.random(in: 0..<4, using: &rng) == 0:
                    for unit in String(scalar).utf16 { out += String(format: "\\u%04X", unit) }
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }
    }

    /// True when a Foundation result holds the same value as `value`.
    static func same(_ value: JSONValue, _ foundation: Any) -> Bool {
        switch value {
        case .null: return foundation is NSNull
        case .bool(let flag):
            guard let number = foundation as? NSNumber, String(cString: number.objCType) == "c" else { return false }
            return number.boolValue == flag
        case .integer(let integer):
            guard let number = foundation as? NSNumber, String(cString: number.objCType) != "c" else { return false }
            return number.int64Value == integer && number.doubleValue == Double(integer)
        case .number(let double):
            guard let number = foundation as? NSNumber, String(cString: number.objCType) != "c" else { return false }
            // Foundation on Linux reads long decimals as NSDecimalNumber, whose doubleValue can be
            // off by a few ULPs: compare with its exact decimal digits, correctly rounded.
            if let decimal = number as? NSDecimalNumber { return Double(decimal.description) == double }
            return number.doubleValue == double
        case .string(let string): return (foundation as? String).map { $0.utf8.elementsEqual(string.utf8) } ?? false
        case .array(let elements):
            guard let array = foundation as? [Any], array.count == elements.count else { return false }
            return zip(elements, array).allSatisfy { same($0, $1) }
        case .object(let members):
            guard let dictionary = foundation as? [String: Any], dictionary.count == members.count else { return false }
            return members.pairs.allSatisfy { pair in dictionary[pair.key].map { same(pair.value, $0) } ?? false }
        }
    }

    @Test func readerAgreesWithFoundationOnValidInput() throws {
        var generator = Generator(rng: SeededGenerator(state: 0x1500_0001))
        for round in 0..<3000 {
            let value = generator.value()
            let text = generator.text(value)
            let bytes = Array(text.utf8)
            let foundation = try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
            let mine = try JSONReader().value(bytes)
            #expect(Self.same(mine, foundation), "round \(round): \(text)")
            #expect(mine == value, "round \(round): \(text)")
        }
    }

    @Test func writerPrintsWhatFoundationPrints() throws {
        var generator = Generator(rng: SeededGenerator(state: 0x1500_0002))
        for round in 0..<3000 {
            let value: JSONValue = .object(["v": generator.value()])
            let foundation = try JSONSerialization.data(
                withJSONObject: try JSONSerialization.jsonObject(with: Data(JSONWriter.render(value)), options: [.fragmentsAllowed]),
                options: [.sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed])
            #expect(JSONWriter.render(value) == [UInt8](foundation), "round \(round)")
            #expect(try JSONReader().value(JSONWriter.render(value)) == value, "round \(round): round trip")
        }
    }

    @Test func theWritersKeyOrderIsByteOrder() throws {
        // The one documented difference from Foundation on Linux, which sorts case-insensitively
        // and numerically ("a", "A", "a9", "a10", "b", "B"): keys are sorted by their UTF-8 bytes.
        let value: JSONValue = ["b": 1, "B": 2, "a10": 3, "a9": 4, "a": 5, "A": 6, "é": 7, "_": 8]
        #expect(JSONWriter.string(value) == #"{"A":6,"B":2,"_":8,"a":5,"a10":3,"a9":4,"b":1,"é":7}"#)
    }

    @Test func objectsOfAnySizePrintInKeyOrder() throws {
        // Up to 16 members the writer orders keys by insertion, beyond that by sorting: both against
        // Foundation, with members added in random order.
        var generator = Generator(rng: SeededGenerator(state: 0x1500_0003))
        for size in [0, 1, 2, 3, 15, 16, 17, 18, 40, 300] {
            var keys = Set<String>()
            while keys.count < size { keys.insert(generator.string(Int.random(in: 1..<8, using: &generator.rng), from: Generator.keyAlphabet)) }
            var members = JSONMembers()
            for (index, key) in keys.shuffled(using: &generator.rng).enumerated() { members[key] = .integer(Int64(index)) }
            let rendered = JSONWriter.render(.object(members))
            let foundation = try JSONSerialization.data(
                withJSONObject: try JSONSerialization.jsonObject(with: Data(rendered)), options: [.sortedKeys, .withoutEscapingSlashes])
            #expect(rendered == [UInt8](foundation), "\(size) members")
            let order = try JSONReader().object(rendered).keys
            #expect(order == keys.sorted { JSONBytes.less($0, $1) }, "\(size) members")
        }
    }

    @Test func numbersPrintLikeFoundation() {
        let cases: [(JSONValue, String)] = [
            (.number(0.93), "0.93"), (.number(1), "1"), (.number(-0.0), "-0.0"), (.number(0), "0.0"), (.number(1e-5), "1e-05"),
            (.number(1e300), "1e+300"),
            (.number(1e16), "1e+16"), (.number(.infinity), "null"), (.integer(.min), "-9223372036854775808"), (.integer(0), "0"),
        ]
        for (value, text) in cases { #expect(JSONWriter.string(value) == text) }
    }
}
