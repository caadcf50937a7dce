import Foundation
import Testing

@testable import StrictJSON

@Suite struct JSONReaderTests {
    let reader = JSONReader()

    func parse(_ text: String) throws(JSONError) -> JSONValue { try reader.value(Array(text.utf8)) }

    func error(_ text: String, reader: JSONReader = JSONReader()) -> String? {
        do {
            _ = try reader.value(Array(text.utf8))
            return nil
        } catch {
            return error.message
        }
    }

    @Test func readsEveryKindOfValue() throws {
        let value = try parse(#" {"s":"a\"b\\c\/d\n\u00e9\ud83d\ude00","i":-42,"f":1.5,"t":true,"n":null,"a":[1,[],{}],"o":{"x":false}} "#)
        #expect(
            value
                == [
                    "s": "a\"b\\c/d\né😀", "i": -42, "f": .number(1.5), "t": true, "n": nil, "a": [1, [], .object([:])],
                    "o": ["x": false],
                ])
    }

    @Test(arguments: [
        (#"{"account":"a","account":"b"}"#, #"duplicate key "account" at byte 15"#),
        (#"{"type":"teleport","type":"purchase"}"#, #"duplicate key "type""#),
        (#"{"a":{"b":1,"c":2,"b":3}}"#, #"duplicate key "b""#),
        (#"[{"x":1},{"y":1,"y":2}]"#, #"duplicate key "y""#),
        (#"{"\u0061":1,"a":2}"#, #"duplicate key "a""#),
    ])
    func duplicateKeysAreRefusedAnywhere(_ input: String, _ message: String) {
        #expect(error(input)?.contains(message) == true, "\(String(describing: error(input)))")
    }

    @Test func duplicateKeysAreFoundInLargeObjects() {
        let keys = (0..<100).map { "\"k\($0)\":\($0)" }
        #expect(error("{" + keys.joined(separator: ",") + "}") == nil)
        #expect(error("{" + (keys + ["\"k57\":0"]).joined(separator: ",") + "}")?.contains(#"duplicate key "k57""#) == true)
    }

    @Test func keysAreComparedAsBytesNotByCanonicalEquivalence() throws {
        // KELVIN SIGN is canonically equivalent to K: Swift String equality (and so Foundation's
        // dictionaries) would merge these two keys; they are different bytes.
        let members = try #require(try parse(#"{"K":1,"\u212A":2}"#).members)
        #expect(members.count == 2)
        #expect(members["K"] == 1)
        #expect(members["\u{212A}"] == 2)
    }

    @Test func keyComparisonsAreByteComparisons() {
        // Empty, small (inline) and long (heap) strings, prefixes, non-ASCII and canonical equivalents.
        let words = [
            "", "a", "b", "ab", "abc", "abd", "K", "\u{212A}", "\u{00C5}", "\u{212B}", "A\u{30A}", "\u{E9}", "e\u{301}", "z\u{0}",
            "originalTransactionId", "originalTransactionIds", "originalTransactionIc", "\u{1F600}x", "\u{FFFF}",
        ]
        for a in words {
            for b in words {
                #expect(JSONBytes.equal(a, b) == (Array(a.utf8) == Array(b.utf8)), "equal(\(a.debugDescription), \(b.debugDescription))")
                #expect(JSONBytes.less(a, b) == a.utf8.lexicographicallyPrecedes(b.utf8), "less(\(a.debugDescription), \(b.debugDescription))")
            }
        }
    }

    @Test func plainIntegersAreExactAndEverythingElseIsANumber() throws {
        #expect(try parse("9223372036854775807") == .integer(.max))
        #expect(try parse("-9223372036854775808") == .integer(.min))
        #expect(try parse("-0") == .integer(0))
        #expect(try parse("9223372036854775808") == .number(9_223_372_036_854_775_808))
        #expect(try parse("1793527200000.5") == .number(1_793_527_200_000.5))
        #expect(try parse("1.0") == .number(1))
        #expect(try parse("1e3") == .number(1000))
        #expect(try parse("2E-2") == .number(0.02))
    }

    @Test(arguments: [
        ("01", "leading zero"), ("-", "no digits"), ("1.", "no digits after '.'"), ("1e", "no exponent digits"), ("+1", "unexpected '+'"),
        (".5", "unexpected '.'"), ("1e400", "out of range"), ("NaN", "unexpected 'N'"), ("[1,]", "unexpected ']'"), (#"{"a":1,}"#, "unexpected '}'"),
        ("{'a':1}", "unexpected '''"), ("[1 2]", "',' or ']'"), (#"{"a" 1}"#, "':'"), ("tru", "unexpected 't'"), ("", "end of input"),
        ("[", "end of input"), (#""abc"#, "not closed"), ("{} {}", "after the JSON value"), ("\u{FEFF}{}", "unexpected byte 0xEF"),
        (#""a\x""#, "invalid escape"), (#""\u12G4""#, "invalid \\u escape"), (#""\ud800""#, "unpaired surrogate"),
        (#""\udc00\ud800""#, "unpaired surrogate"), (#""\ud800\u0041""#, "unpaired surrogate"), ("\"a\tb\"", "control character U+0009"),
        ("\"a\nb\"", "control character U+000A"),
    ])
    func malformedInputIsRefusedWithAReason(_ input: String, _ reason: String) {
        let message = error(input)
        #expect(message?.contains(reason) == true, "\(input): \(String(describing: message))")
    }

    @Test func invalidUTF8IsRefusedInsideAndOutsideStrings() {
        for bytes: [UInt8] in [
            [0x22, 0xFF, 0x22], [0x22, 0xC3, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22], [0x7B, 0xFF, 0xFE, 0x7D], [0x5B, 0x31, 0xC0, 0x5D],
        ] {
            #expect(throws: JSONError.self) { try reader.value(bytes) }
            do {
                _ = try reader.value(bytes)
            } catch {
                #expect(error.message.contains("not valid UTF-8"), "\(bytes): \(error.message)")
            }
        }
    }

    @Test func nestingAndSizeAreLimited() {
        #expect(error(String(repeating: "[", count: 32) + String(repeating: "]", count: 32)) == nil)
        #expect(error(String(repeating: "[", count: 33) + String(repeating: "]", count: 33))?.contains("deeper than 32 levels") == true)
        #expect(error(String(repeating: "{\"a\":", count: 33) + "1" + String(repeating: "}", count: 33))?.contains("deeper than 32") == true)
        // Deep input fails fast, without recursing into it.
        #expect(error(String(repeating: "[", count: 1_000_000))?.contains("deeper than 32") == true)
        let small = JSONReader(maximumDepth: 2, maximumBytes: 10)
        #expect(error("[[1]]", reader: small) == nil)
        #expect(error("[[[1]]]", reader: small)?.contains("deeper than 2 levels") == true)
        #expect(error("[1,2,3,4,5]", reader: small)?.contains("longer than 10 bytes") == true)
    }

    @Test func anObjectIsRequiredWhereOneIsExpected() {
        #expect(throws: JSONError("the JSON value is an array, not an object")) { try reader.object(Array("[1]".utf8)) }
        #expect(throws: JSONError("the JSON value is a string, not an object")) { try reader.object(Array("\"x\"".utf8)) }
    }
}
