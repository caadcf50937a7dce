import LedgerTestSupport
import Testing

@testable import StrictJSON

/// ``JSONDocument`` and ``JSONView`` (values read in place) against the tree the same bytes read into.
@Suite struct JSONDocumentTests {
    /// Checks every accessor of `view` against `value`, members and elements included, and the lookup
    /// of every key `value`'s objects hold plus `absent` keys.
    static func expectSame(_ view: JSONView, _ value: JSONValue, absent: [String], _ context: String) {
        #expect(view.value == value, "\(context)")
        #expect(view.kind == value.kind, "\(context)")
        #expect(view.isNull == (value == .null), "\(context)")
        #expect(view.string == value.string, "\(context)")
        if case .integer(let integer) = value { #expect(view.integer == integer, "\(context)") } else { #expect(view.integer == nil, "\(context)") }
        if case .number(let number) = value { #expect(view.number == number, "\(context)") } else { #expect(view.number == nil, "\(context)") }
        if case .bool(let flag) = value { #expect(view.bool == flag, "\(context)") } else { #expect(view.bool == nil, "\(context)") }
        #expect(view.isArray == (value.elements != nil), "\(context)")
        #expect(view.isObject == (value.members != nil), "\(context)")
        if let elements = value.elements {
            #expect(view.elements.count == elements.count, "\(context)")
            for (index, (element, expected)) in zip(view.elements, elements).enumerated() {
                expectSame(element, expected, absent: absent, "\(context)[\(index)]")
            }
        } else {
            #expect(view.elements.isEmpty, "\(context)")
        }
        guard let members = value.members else {
            #expect(view.members.isEmpty && view["a"] == nil, "\(context)")
            return
        }
        #expect(view.members.map(\.key) == members.keys, "\(context): members in document order")
        for pair in members.pairs {
            let found = view[pair.key]
            #expect(found?.value == pair.value, "\(context).\(pair.key)")
            if let found { expectSame(found, pair.value, absent: absent, "\(context).\(pair.key)") }
        }
        for key in absent where members[key] == nil { #expect(view[key] == nil, "\(context): \(key) is absent") }
    }

    @Test func viewsReadWhatTheTreeHolds() throws {
        var generator = DifferentialTests.Generator(rng: SeededGenerator(state: 0x3900_0001))
        for round in 0..<2000 {
            let value = generator.value()
            let text = generator.text(value)
            let document = try JSONReader().document(Array(text.utf8))
            Self.expectSame(document.root, value, absent: ["", "zz", "abcdefghijk", "a\u{0}", "é"], "round \(round): \(text)")
        }
    }

    @Test func keysThatShareAFingerprintAreToldApartByTheirBytes() throws {
        // Same length, same first and last eight bytes: one fingerprint, different keys.
        let keys = ["originalAAAAAAtransactionId", "originalBBBBBBtransactionId", "originalCCCCCCtransactionId"]
        let prints = keys.map { key in Array(key.utf8).withUnsafeBufferPointer { JSONDocument.fingerprint($0) } }
        #expect(Set(prints).count == 1)
        let document = try JSONReader().document(Array(#"{"originalAAAAAAtransactionId":1,"originalCCCCCCtransactionId":3}"#.utf8))
        #expect(document.root[keys[0]]?.integer == 1)
        #expect(document.root[keys[1]] == nil)
        #expect(document.root[keys[2]]?.integer == 3)
        // And a duplicate is found among them, not a false one.
        let repeated = #"{"originalAAAAAAtransactionId":1,"originalAAAAAAtransactionId":2}"#
        #expect(throws: JSONError.self) { try JSONReader().document(Array(repeated.utf8)) }
        #expect(try JSONReader().value(Array(#"{"originalAAAAAAtransactionId":1,"originalBBBBBBtransactionId":2}"#.utf8)).members?.count == 2)
    }

    @Test func escapedKeysAndStringsAreFoundAndMadeUnescaped() throws {
        let document = try JSONReader().document(Array(#"{"a\"b":"x\ny","\u0074ype":"purchase","K":1,"\u212A":2,"":0}"#.utf8))
        #expect(document.root["a\"b"]?.string == "x\ny")
        #expect(document.root["type"]?.string == "purchase")
        #expect(document.root["K"]?.integer == 1)
        #expect(document.root["\u{212A}"]?.integer == 2)
        #expect(document.root[""]?.integer == 0)
        #expect(document.root["typ"] == nil && document.root["types"] == nil)
    }

    @Test func largeObjectsAreSearchedWhole() throws {
        // More members than the key set has bits, and more than the duplicate check compares one by one.
        let keys = (0..<300).map { "key-\($0)-\(String(repeating: "x", count: $0 % 13))" }
        let text = "{" + keys.enumerated().map { "\"\($1)\":\($0)" }.joined(separator: ",") + "}"
        let document = try JSONReader().document(Array(text.utf8))
        for (index, key) in keys.enumerated() { #expect(document.root[key]?.integer == Int64(index), "\(key)") }
        #expect(document.root["key-300-"] == nil)
        #expect(document.root.members.count == 300)
    }

    @Test func aTreeBecomesADocumentOfTheSameValue() throws {
        var generator = DifferentialTests.Generator(rng: SeededGenerator(state: 0x3900_0002))
        for round in 0..<500 {
            let value = generator.value()
            #expect(try JSONDocument(value).root.value == value, "round \(round)")
        }
    }
}
