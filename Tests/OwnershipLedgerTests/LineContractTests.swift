import AppleSignedData
import Foundation
import LedgerCore
import LedgerTestSupport
import Testing

/// What docs/protocol.md promises about a line, through the `ledger` binary: every code it can
/// answer is documented (and listed by the submit schema), a field of another line type is refused
/// by name, an `id` comes back exactly as sent, and a time beyond 64 bits is out of range, not a fraction.
@Suite struct LineContractTests {
    let directory = TemporaryDirectory("ledger-line-contract")
    var store: String { directory.path("store").path }
    let t = Fixtures.start

    func initStore() throws {
        let result = try LedgerBinary.run(["init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"])
        #expect(result.status == 0, "\(result.stderr)")
    }

    /// The answers, as raw lines, to `lines` (raw JSON text).
    func submit(_ lines: [String]) throws -> [String] {
        let result = try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: lines.joined(separator: "\n") + "\n")
        #expect(result.status == 0, "\(result.stderr)")
        return result.lines
    }

    func records() throws -> Int? { try LedgerBinary.run(["stats", "--store", store]).json["records"] as? Int }

    func receipt(_ items: [(otid: String, ownership: String)]) -> [String: Any] {
        [
            "status": 0, "environment": "Sandbox", "receipt": ["bundle_id": Fixtures.bundleId],
            "latest_receipt_info": items.map { item in
                [
                    "original_transaction_id": item.otid, "transaction_id": item.otid, "product_id": "com.myrecipes.premium.monthly",
                    "purchase_date_ms": String(t), "expires_date_ms": String(t + 30 * Fixtures.day), "in_app_ownership_type": item.ownership,
                ]
            },
        ]
    }

    /// The codes of docs/protocol.md's code table.
    static func documentedCodes() throws -> Set<String> {
        let document = try String(contentsOf: LedgerBinary.packageRoot.appendingPathComponent("docs/protocol.md"), encoding: .utf8)
        let table = try #require(document.components(separatedBy: "| code | decision | meaning |").dropFirst().first)
        var codes: Set<String> = []
        for row in table.split(separator: "\n").dropFirst().prefix(while: { $0.hasPrefix("|") }) {
            let first = row.split(separator: "|").first ?? ""
            for part in first.split(separator: "`").enumerated() where part.offset % 2 == 1 { codes.insert(String(part.element)) }
        }
        return codes
    }

    @Test func everyCodeIsDocumentedAndListedByTheSchema() throws {
        let documented = try Self.documentedCodes()
        let produced =
            Set(DecisionReason.allCases.map(\.code))
            // invalid-configuration is thrown when a verifier is built (init), never about a line.
            .union(VerificationError.Code.allCases.map(\.rawValue).filter { $0 != "invalid-configuration" })
            .union(["mixed", "empty", "invalid-argument", "conflict", "internal"])
        #expect(produced.subtracting(documented).isEmpty, "undocumented: \(produced.subtracting(documented).sorted())")
        #expect(documented.subtracting(produced).isEmpty, "documented but never answered: \(documented.subtracting(produced).sorted())")
        let schema = try Data(contentsOf: LedgerBinary.packageRoot.appendingPathComponent("docs/schemas/submit.schema.json"))
        let properties = (try JSONSerialization.jsonObject(with: schema) as? [String: Any])?["properties"] as? [String: Any]
        let listed = ((properties?["code"] as? [String: Any])?["enum"] as? [String]).map(Set.init)
        #expect(listed == documented)
    }

    @Test func multiItemReceiptsAnswerAsDocumented() throws {
        defer { directory.remove() }
        try initStore()
        let lines = [
            ["type": "purchase", "account": "owner", "transaction": Fixtures.transaction("1001", at: t), "at": t],
            // One lineage owned by another account and one new Family Sharing lineage: denied twice, for different reasons.
            ["type": "restore", "account": "other", "receipt": receipt([("1001", "PURCHASED"), ("1002", "FAMILY_SHARED")]), "at": t],
            // Granted and denied: no common decision.
            ["type": "restore", "account": "third", "receipt": receipt([("1003", "PURCHASED"), ("1004", "FAMILY_SHARED")]), "at": t],
            ["type": "restore", "account": "other", "receipt": receipt([]), "at": t],
        ]
        let answers = try submit(lines.map(Fixtures.line)).map(Fixtures.object)
        try #require(answers.count == 4)
        #expect(answers[1]["code"] as? String == "mixed")
        #expect(answers[1]["decision"] as? String == "denied")
        #expect((answers[1]["results"] as? [[String: Any]])?.map { $0["code"] as? String } == ["permission-denied", "family-sharing-unsupported"])
        #expect(answers[2]["code"] as? String == "mixed")
        #expect(answers[2]["decision"] as? String == "recorded")
        #expect(answers[3]["code"] as? String == "empty")
        #expect(answers[3]["decision"] as? String == "ignored")
        // One record per decided item, each item's seq in its result; none at the top of a multi-item answer.
        #expect(answers[1]["seq"] == nil)
        #expect((answers[2]["results"] as? [[String: Any]])?.compactMap { $0["seq"] as? Int } == [4, 5])
        #expect(try records() == 5)
    }

    @Test func aFieldOfAnotherLineTypeIsRefusedByName() throws {
        defer { directory.remove() }
        try initStore()
        let transaction = Fixtures.line(Fixtures.transaction("1001", at: t))
        let answers = try submit([
            #"{"type":"delete-account","account":"alice","transaction":\#(transaction)}"#,
            #"{"type":"delete-account","account":"alice","response":{}}"#,
            #"{"type":"notification","account":"alice","notification":{}}"#,
            #"{"type":"reconciliation","account":"alice","response":{}}"#,
            #"{"type":"purchase","account":"alice","transaction":\#(transaction),"signedPayload":"x"}"#,
            #"{"type":"restore","account":"alice","transaction":\#(transaction),"response":{}}"#,
        ]).map(Fixtures.object)
        #expect(answers.map { $0["code"] as? String } == Array(repeating: "invalid-argument", count: 6))
        let messages = answers.map { $0["message"] as? String ?? "" }
        for (message, field) in zip(messages, ["transaction", "response", "account", "account", "signedPayload", "response"]) {
            #expect(message.hasPrefix("field \(field) does not belong to a "), "\(message)")
        }
        #expect(try records() == 0)
    }

    @Test func anIdIsEchoedExactlyOrRefused() throws {
        defer { directory.remove() }
        try initStore()
        let answers = try submit([
            #"{"type":"delete-account","account":"nobody","id":9223372036854775807}"#,
            #"{"type":"delete-account","account":"nobody","id":-9223372036854775808}"#,
            #"{"type":"delete-account","account":"nobody","id":"12345678901234567890"}"#,
            #"{"type":"delete-account","account":"nobody","id":12345678901234567890}"#,
            #"{"type":"delete-account","account":"nobody","id":1.0}"#,
            #"{"type":"delete-account","account":"nobody","id":1e2}"#,
        ])
        try #require(answers.count == 6)
        #expect(answers[0].contains(#""id":9223372036854775807,"#), "\(answers[0])")
        #expect(answers[1].contains(#""id":-9223372036854775808,"#), "\(answers[1])")
        #expect(answers[2].contains(#""id":"12345678901234567890","#), "\(answers[2])")
        for answer in answers[3...] {
            let object = Fixtures.object(answer)
            #expect(object["code"] as? String == "invalid-argument")
            #expect((object["message"] as? String)?.hasPrefix("id must be a string or an integer from") == true, "\(answer)")
            #expect(object["id"] == nil, "a number that cannot be echoed exactly is not echoed")
        }
        #expect(try records() == 0)
    }

    @Test func aTimeBeyond64BitsIsOutOfRangeNotAFraction() throws {
        defer { directory.remove() }
        try initStore()
        let tooLate = "100000000000000000"
        let beyond = ["1000000000000000000000", "9223372036854775808", "-9223372036854775809"]
        let atAnswers = try submit(([tooLate] + beyond).map { #"{"type":"delete-account","account":"x","at":\#($0)}"# })
            .map(Fixtures.object)
        #expect(Set(atAnswers.map { $0["message"] as? String }).count == 1, "\(atAnswers)")
        #expect(atAnswers.allSatisfy { $0["code"] as? String == "invalid-argument" })
        #expect((atAnswers[0]["message"] as? String)?.contains("from 1970 through 9999") == true)

        let expires = String(t + 30 * Fixtures.day)
        let transaction = Fixtures.line(Fixtures.transaction("1001", at: t))
        let expiresAnswers = try submit(
            (["253402300800000"] + beyond).map { value in
                #"{"type":"purchase","account":"a","at":\#(t),"transaction":\#(transaction.replacingOccurrences(of: expires, with: value))}"#
            }
        ).map(Fixtures.object)
        #expect(expiresAnswers.allSatisfy { $0["code"] as? String == "invalid-payload" }, "\(expiresAnswers)")
        #expect(
            expiresAnswers.map { $0["message"] as? String } == [
                "transaction.expiresDate 253402300800000 is outside the supported range (1970 through 9999, in milliseconds)",
                "transaction.expiresDate is outside the supported range (1970 through 9999, in milliseconds)",
                "transaction.expiresDate is outside the supported range (1970 through 9999, in milliseconds)",
                "transaction.expiresDate is outside the supported range (1970 through 9999, in milliseconds)",
            ])
        let receiptLine = Fixtures.line([
            "type": "restore", "account": "a", "at": t,
            "receipt": receipt([("1001", "PURCHASED")]),
        ]).replacingOccurrences(of: #""\#(expires)""#, with: #""99999999999999999999""#)
        let receiptAnswer = Fixtures.object(try submit([receiptLine]).first ?? "")
        #expect(
            receiptAnswer["message"] as? String
                == "verifyReceipt.latest_receipt_info[0].expires_date_ms is outside the supported range (1970 through 9999, in milliseconds)")
        #expect(try records() == 0)
    }
}
