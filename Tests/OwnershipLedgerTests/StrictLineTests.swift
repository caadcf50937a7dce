import Foundation
import LedgerTestSupport
import Testing

/// The strict line reader of `ledger submit`, through the binary: a line whose meaning depends on
/// which JSON parser reads it is refused, times are whole milliseconds everywhere, and the
/// documented example is answered byte for byte as docs/protocol.md shows.
@Suite struct StrictLineTests {
    let directory = TemporaryDirectory("ledger-strict")
    var store: String { directory.path("store").path }
    let t = Fixtures.start

    func initStore(bundleId: String = Fixtures.bundleId) throws {
        let result = try LedgerBinary.run(["init", "--store", store, "--bundle-id", bundleId, "--environment", "Sandbox"])
        #expect(result.status == 0, "\(result.stderr)")
    }

    func submit(_ lines: [String]) throws -> [[String: Any]] {
        let result = try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: lines.joined(separator: "\n") + "\n")
        #expect(result.status == 0, "\(result.stderr)")
        return result.lines.map(Fixtures.object)
    }

    func records() throws -> Int? { try LedgerBinary.run(["stats", "--store", store]).json["records"] as? Int }

    /// A purchase line with `extra` spliced in as raw JSON text after the type.
    func purchase(_ extra: String, transaction: String? = nil) -> String {
        let transaction = transaction ?? Fixtures.line(Fixtures.transaction("1001", at: t))
        return #"{"type":"purchase","# + extra + #","transaction":"# + transaction + #","at":\#(t)}"#
    }

    @Test func duplicateKeysAnywhereInTheLineAreRefusedNamingTheKey() throws {
        defer { directory.remove() }
        try initStore()
        let transaction = Fixtures.line(Fixtures.transaction("1001", at: t))
        let nested = String(transaction.dropLast()) + #","originalTransactionId":"9999"}"#
        let answers = try submit([
            purchase(#""account":"uid-dupA","account":"uid-dupB""#),
            #"{"type":"teleport","type":"purchase","account":"a","transaction":\#(transaction),"at":\#(t)}"#,
            purchase(#""account":"uid-a""#, transaction: nested),
            #"{"type":"delete-account","account":"a","id":1,"id":2}"#,
        ])
        #expect(answers.map { $0["decision"] as? String } == ["invalid", "invalid", "invalid", "invalid"])
        #expect(answers.map { $0["code"] as? String } == Array(repeating: "invalid-argument", count: 4))
        let messages = answers.map { $0["message"] as? String ?? "" }
        for (message, key) in zip(messages, ["account", "type", "originalTransactionId", "id"]) {
            #expect(message.contains("duplicate key \"\(key)\""), "\(message)")
        }
        #expect(answers[3]["id"] == nil, "an ambiguous id is not echoed")
        #expect(try records() == 0)
    }

    @Test func fractionalMillisecondsAreRefusedEverywhereWithOneMessage() throws {
        defer { directory.remove() }
        try initStore()
        let transaction = Fixtures.line(Fixtures.transaction("1001", at: t))
        let expires = t + 30 * Fixtures.day
        let answers = try submit([
            // Used to be truncated to `at` and answered "expired".
            purchase(#""account":"alice""#, transaction: transaction.replacingOccurrences(of: "\(expires)", with: "\(t).5")),
            #"{"type":"delete-account","account":"alice","at":1.5}"#,
            #"{"type":"delete-account","account":"alice","at":1793491200000.0}"#,
            purchase(
                #""account":"alice""#, transaction: transaction.replacingOccurrences(of: #""signedDate":\#(t)"#, with: #""signedDate":1.7934912e12"#)),
        ])
        #expect(
            answers.map { $0["message"] as? String } == [
                "transaction.expiresDate must be a whole number of milliseconds", "at must be a whole number of milliseconds",
                "at must be a whole number of milliseconds", "transaction.signedDate must be a whole number of milliseconds",
            ])
        #expect(try records() == 0)
    }

    @Test func nestingAndNonUTF8AreRefusedAndBlankLinesSkipped() throws {
        defer { directory.remove() }
        try initStore()
        let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        var input = Data((#"{"type":"delete-account","account":"a","id":1,"x":\#(deep)}"# + "\n \t \n").utf8)
        input.append(contentsOf: Array(#"{"type":"delete-account","account":""#.utf8) + [0xC3, 0x28] + Array("\"}\n".utf8))
        let result = try LedgerBinary.run(["submit", "--store", store], stdinData: input)
        let answers = result.lines.map(Fixtures.object)
        #expect(answers.count == 2)
        #expect((answers.first?["message"] as? String)?.contains("nested deeper than 32 levels") == true, "\(answers)")
        #expect((answers.last?["message"] as? String)?.contains("not valid UTF-8") == true, "\(answers)")
    }

    @Test func theDocumentedExampleIsAnsweredByteForByte() throws {
        defer { directory.remove() }
        let document = try String(contentsOf: LedgerBinary.packageRoot.appendingPathComponent("docs/protocol.md"), encoding: .utf8)
        let blocks = document.components(separatedBy: "```json\n").dropFirst().map { $0.components(separatedBy: "```")[0] }
        try #require(blocks.count >= 2)
        try initStore(bundleId: "com.myrecipes.app")
        let result = try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: blocks[0])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == blocks[1])
    }
}
