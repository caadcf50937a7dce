import LedgerCore
import Testing

/// Stored strings read back exactly as written, ASCII or not, and bytes that are not UTF-8 are refused
/// naming where they start (ASCII takes a path of its own: it needs no validation).
@Suite struct ByteReaderStringTests {
    func read(_ bytes: [UInt8]) throws(DecodingFailure) -> String {
        try ByteReader.reading(bytes) { r throws(DecodingFailure) in try r.shortString() }
    }

    @Test(arguments: ["", "com.example.myrecipes.premium.monthly", "crème brûlée 🍰", "a\u{0}b", String(repeating: "x", count: 300)])
    func writtenStringsReadBackExactly(text: String) throws {
        var writer = ByteWriter()
        writer.shortString(text)
        #expect(try read(writer.output) == text)
    }

    @Test(arguments: [[0x80], [0xC3, 0x28], [0x61, 0xFF, 0x62], [0xE2, 0x82], [0xED, 0xA0, 0x80]] as [[UInt8]])
    func bytesThatAreNotUTF8AreRefused(bytes: [UInt8]) {
        #expect(throws: DecodingFailure("invalid UTF-8 in string at offset 1")) { try read([UInt8(bytes.count)] + bytes) }
    }

    @Test func aStringLongerThanWhatIsLeftIsRefused() {
        #expect(throws: DecodingFailure.self) { try read([5, 0x61, 0x62]) }
    }
}
