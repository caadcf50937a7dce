import AppleSignedData
import Foundation
import LedgerTestSupport
import OwnershipLedger
import Testing

/// One rule per App Store identifier (AppleIdentifier), on every path: an identifier that could
/// never be looked up is never bound, and a query for one is a usage error. Through the binary,
/// where the symptoms were seen.
@Suite struct IdentifierRuleTests {
    let directory = TemporaryDirectory("ledger-identifiers")
    var store: String { directory.path("store").path }
    let t = Fixtures.start

    func initStore() throws {
        let root = LedgerBinary.packageRoot.appendingPathComponent("Tests/AppleSignedDataTests/Vectors/certs/testCA.der").path
        let result = try LedgerBinary.run([
            "init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox", "--root-certificate", root,
        ])
        #expect(result.status == 0, "\(result.stderr)")
    }

    func records() throws -> Int? { try LedgerBinary.run(["stats", "--store", store]).json["records"] as? Int }

    @Test func theRulesAcceptExactlyWhatAppleIssues() {
        let transactionIds: [(String, Bool)] = [
            ("0", true), ("1", true), ("2000000847061981", true), ("18446744073709551615", true), ("18446744073709551616", false),
            ("99999999999999999999", false), ("123456789012345678901", false), ("", false), ("00", false), ("0123", false),
            ("+1", false), ("-1", false), (" 1", false), ("1 ", false), ("abc-123", false), ("1001-2", false), ("١٢٣", false),
            (String(repeating: "9", count: 10_000), false),
        ]
        for (value, accepted) in transactionIds {
            #expect(AppleIdentifier.originalTransactionId.accepts(value) == accepted, "\(value)")
            #expect(AppleIdentifier.transactionId.accepts(value) == accepted, "\(value)")
        }
        let productIds: [(String, Bool)] = [
            ("com.myrecipes.premium.monthly", true), ("gh_super_good_ticket_1", true), ("pass-premium", true),
            (String(repeating: "p", count: 100), true), (String(repeating: "p", count: 101), false), ("", false), ("a b", false),
            ("café", false), ("p/1", false), ("p\u{0}", false), (String(repeating: "x", count: 100_000), false),
        ]
        for (value, accepted) in productIds { #expect(AppleIdentifier.productId.accepts(value) == accepted, "\(value.prefix(20))") }
        #expect(
            AppleIdentifier.productId.problem(String(repeating: "x", count: 100_000), field: "transaction.productId")
                == "transaction.productId \"\(String(repeating: "x", count: 40))… (100000 bytes)\" is refused: "
                + "a product id is 1 to 100 characters: ASCII letters, digits, hyphens, periods and underscores")
    }

    @Test func submitNeverBindsAnIdentifierThatCouldNotBeLookedUp() throws {
        defer { directory.remove() }
        try initStore()
        func line(_ changes: [String: Any], type: String = "purchase") -> String {
            var transaction = Fixtures.transaction("1001", at: t)
            transaction.merge(changes) { $1 }
            return Fixtures.line(["type": type, "account": "alice", "transaction": transaction, "at": t])
        }
        let bad: [(String, [String: Any])] = [
            ("originalTransactionId", ["originalTransactionId": ""]), ("originalTransactionId", ["originalTransactionId": "abc-123"]),
            ("originalTransactionId", ["originalTransactionId": String(repeating: "7", count: 10_000)]),
            ("transactionId", ["transactionId": ""]), ("transactionId", ["transactionId": "1001-2"]), ("productId", ["productId": ""]),
            ("productId", ["productId": String(repeating: "p", count: 100 * 1024)]), ("productId", ["productId": "premium monthly"]),
        ]
        let notification = Fixtures.line([
            "type": "notification",
            "notification": Fixtures.notification(
                "DID_RENEW", uuid: "n-1", transaction: Fixtures.transaction("1001", transactionId: "x1", at: t), at: t),
            "at": t,
        ])
        let receipt = Fixtures.line([
            "type": "restore", "account": "bob", "at": t,
            "receipt": [
                "status": 0, "environment": "Sandbox", "receipt": ["bundle_id": Fixtures.bundleId],
                "latest_receipt_info": [
                    [
                        "original_transaction_id": "abc", "transaction_id": "1", "product_id": "com.myrecipes.premium.monthly",
                        "purchase_date_ms": String(t), "expires_date_ms": String(t + 30 * Fixtures.day),
                    ]
                ],
            ],
        ])
        let input = bad.map { line($0.1) } + [notification, receipt, line([:])]
        let result = try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: input.joined(separator: "\n") + "\n")
        #expect(result.status == 0, "\(result.stderr)")
        let answers = result.lines.map(Fixtures.object)
        try #require(answers.count == input.count)
        for ((field, _), answer) in zip(bad, answers) {
            #expect(answer["decision"] as? String == "invalid")
            #expect(answer["code"] as? String == "invalid-payload")
            #expect((answer["message"] as? String)?.hasPrefix("transaction.\(field) \"") == true, "\(answer)")
        }
        #expect(
            (answers[bad.count]["message"] as? String)?.hasPrefix("notification.data.transaction.transactionId \"x1\" is refused") == true)
        #expect((answers[bad.count + 1]["message"] as? String)?.contains("original_transaction_id \"abc\" is refused") == true)
        #expect(answers.last?["decision"] as? String == "granted", "a valid id is still granted")
        #expect(try records() == 1, "only the valid line was recorded")
    }

    @Test func aSignedPayloadWithAMalformedIdentifierIsInvalid() throws {
        defer { directory.remove() }
        try initStore()
        let certs = LedgerBinary.packageRoot.appendingPathComponent("Tests/AppleSignedDataTests/Vectors/certs")
        let chain = try ["testLeaf.der", "testIntermediate.der", "testCA.der"].map { [UInt8](try Data(contentsOf: certs.appendingPathComponent($0))) }
        let key = try String(contentsOf: certs.appendingPathComponent("testLeaf.key.pem"), encoding: .utf8)
        var payload = Fixtures.transaction("abc-123", at: t)
        payload["type"] = "Auto-Renewable Subscription"
        let jws = try TestJWSSigner.sign(payload: payload, chain: chain, privateKeyPEM: key)
        let result = try LedgerBinary.run(
            ["submit", "--store", store], stdin: Fixtures.line(["type": "purchase", "account": "a", "signedTransaction": jws, "at": t]) + "\n")
        let answer = Fixtures.object(result.lines.first ?? "")
        #expect(answer["code"] as? String == "invalid-payload")
        #expect((answer["message"] as? String)?.hasPrefix("transaction.originalTransactionId \"abc-123\" is refused") == true)
        #expect(try records() == 0)
    }

    @Test func queriesAndSupportCommandsRefuseWhatNoLineageCanHave() throws {
        defer { directory.remove() }
        try initStore()
        for id in ["abc-123", "", "0123", "18446744073709551616", String(repeating: "1", count: 64)] {
            for command in [
                ["binding"], ["replay"], ["explain", "--uid", "a"], ["dispute", "export", "--out", directory.path("b").path], ["audit"],
            ] {
                let result = try LedgerBinary.run(command + ["--store", store, "--original-transaction-id", id])
                #expect(result.status == 2, "\(command) \(id.prefix(20)): \(result.stderr)")
                if !id.isEmpty { #expect(result.stderr.contains("1 to 20 decimal digits"), "\(command): \(result.stderr)") }
            }
        }
        let request = try LedgerBinary.run([
            "support", "request", "--store", store, "--case", "CASE-1", "--reason", "lost access", "--original-transaction-id", "abc-123",
            "--target-account", "uid-2", "--target-auth", "re-auth", "--evidence", "order lookup", "--operator", "root", "--key", "/nonexistent",
        ])
        #expect(request.status == 2)
        #expect(request.stderr.contains("--original-transaction-id \"abc-123\" is refused"), "\(request.stderr)")
        // The largest id Apple can issue is queried like any other.
        let largest = try LedgerBinary.run(["binding", "--store", store, "--original-transaction-id", "18446744073709551615"])
        #expect(largest.status == 0, "\(largest.stderr)")
        #expect(largest.json["state"] as? String == "unbound")
        // The library refuses it too.
        let ledger = try Ledger(opening: URL(fileURLWithPath: store))
        #expect(throws: SubmissionError.self) { try ledger.binding(originalTransactionId: "abc-123") }
    }
}
