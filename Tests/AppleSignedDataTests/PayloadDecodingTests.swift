import Foundation
import LedgerTestSupport
import Testing

@testable import AppleSignedData

/// JSON → payload mapping, as used for verified payloads and for unsigned `--trust-decoded` input.
@Suite struct PayloadDecodingTests {
    @Test func upstreamTransactionPayload() throws {
        let transaction = try TransactionPayload(jsonData: try Vectors.data("payloads/signedTransaction.json"))
        #expect(transaction.originalTransactionId == "12345")
        #expect(transaction.transactionId == "23456")
        #expect(transaction.purchaseDate == 1_698_148_900_000)
        #expect(transaction.originalPurchaseDate == 1_698_148_800_000)
        #expect(transaction.expiresDate == 1_698_149_000_000)
        #expect(transaction.revocationReason == 1)
        #expect(transaction.revocationDate == 1_698_148_950_000)
        #expect(transaction.environment == .localTesting)
        #expect(transaction.isUpgraded == true)
        #expect(transaction.price == 10990)
        #expect(transaction.appAccountToken == "7e3fb20b-4cdb-47cc-936d-99d65f608138")
        #expect(transaction.type == "Auto-Renewable Subscription")
    }

    @Test func upstreamRenewalPayload() throws {
        let renewal = try RenewalInfoPayload(jsonData: try Vectors.data("payloads/signedRenewalInfo.json"))
        #expect(renewal.expirationIntent == 1)
        #expect(renewal.autoRenewStatus == 1)
        #expect(renewal.isInBillingRetryPeriod == true)
        #expect(renewal.priceIncreaseStatus == 0)
        #expect(renewal.gracePeriodExpiresDate == 1_698_148_900_000)
        #expect(renewal.offerType == 2)
    }

    struct FieldError: Sendable, CustomTestStringConvertible {
        var change: String
        var value: String?  // JSON text; nil removes the key
        var message: String
        var testDescription: String { message }
    }

    @Test(arguments: [
        FieldError(change: "originalTransactionId", value: nil, message: "transaction is missing originalTransactionId"),
        FieldError(change: "transactionId", value: nil, message: "transaction is missing transactionId"),
        FieldError(change: "productId", value: "null", message: "transaction is missing productId"),
        FieldError(change: "purchaseDate", value: nil, message: "transaction is missing purchaseDate"),
        FieldError(change: "expiresDate", value: "\"2025-01-01\"", message: "transaction.expiresDate must be a whole number of milliseconds"),
        FieldError(change: "expiresDate", value: "true", message: "transaction.expiresDate must be a whole number of milliseconds"),
        FieldError(change: "originalTransactionId", value: "1000", message: "transaction.originalTransactionId must be a string"),
        FieldError(
            change: "environment", value: "\"Staging\"",
            message: "transaction.environment \"Staging\" is not one of Production, Sandbox, Xcode, LocalTesting"),
        FieldError(change: "quantity", value: "1.5", message: "transaction.quantity must be an integer"),
        FieldError(change: "isUpgraded", value: "1", message: "transaction.isUpgraded must be true or false"),
        // Beyond 64 bits: out of range, not a fraction.
        FieldError(
            change: "signedDate", value: "1e300",
            message: "transaction.signedDate is outside the supported range (1970 through 9999, in milliseconds)"),
    ])
    func transactionFieldErrors(_ testCase: FieldError) throws {
        var json = Vectors.transactionPayload()
        if let value = testCase.value {
            json[testCase.change] = try JSONSerialization.jsonObject(with: Data(value.utf8), options: .fragmentsAllowed)
        } else {
            json[testCase.change] = nil
        }
        let members = try Fixtures.members(json)
        #expect(throws: VerificationError(.invalidPayload, testCase.message)) { try TransactionPayload(json: members) }
    }

    /// A transaction in `environment` with one of its dates written as `time` (JSON text).
    static func transactionJSON(environment: String, _ field: String, _ time: String) -> Data {
        var fields = ["purchaseDate": "1697679936049", "expiresDate": "1700358336049", "signedDate": "1697679936056"]
        fields[field] = time
        let json =
            #"{"originalTransactionId":"0","transactionId":"0","productId":"p","bundleId":"b","inAppOwnershipType":"PURCHASED","#
            + #""environment":"\#(environment)","# + fields.map { "\"\($0.key)\":\($0.value)" }.joined(separator: ",") + "}"
        return Data(json.utf8)
    }

    @Test(arguments: ["Production", "Sandbox"], ["1697679936049.7297", "1697679936049.0", "1.697679936049e12", "-1.5"])
    func fractionalMillisecondsAreRefusedWithOneMessage(_ environment: String, _ time: String) throws {
        for field in ["purchaseDate", "expiresDate", "signedDate"] {
            #expect(throws: VerificationError(.invalidPayload, "transaction.\(field) must be a whole number of milliseconds")) {
                try TransactionPayload(jsonData: Self.transactionJSON(environment: environment, field, time))
            }
        }
        let renewal = Data(#"{"originalTransactionId":"0","environment":"\#(environment)","signedDate":\#(time)}"#.utf8)
        #expect(throws: VerificationError(.invalidPayload, "renewalInfo.signedDate must be a whole number of milliseconds")) {
            try RenewalInfoPayload(jsonData: renewal)
        }
        let notification = Data(
            #"{"notificationType":"DID_RENEW","notificationUUID":"u","signedDate":\#(time),"data":{"environment":"\#(environment)","bundleId":"b"}}"#
                .utf8)
        #expect(throws: VerificationError(.invalidPayload, "notification.signedDate must be a whole number of milliseconds")) {
            try NotificationPayload(jsonData: notification)
        }
    }

    @Test(arguments: ["Xcode", "LocalTesting"])
    func storeKitTestingTimesAreFlooredToWholeMilliseconds(_ environment: String) throws {
        // StoreKit testing signs fractional milliseconds; Apple's libraries floor them (Vectors/README.md 3c).
        for (time, floored): (String, Int64) in [
            ("1697679936049.7297", 1_697_679_936_049), ("1697679936049.0", 1_697_679_936_049), ("1.697679936049e12", 1_697_679_936_049),
            ("-1.5", -2), ("1697679936049", 1_697_679_936_049),
        ] {
            let transaction = try TransactionPayload(jsonData: Self.transactionJSON(environment: environment, "expiresDate", time))
            #expect(transaction.expiresDate == floored, "\(time)")
            let renewal = try RenewalInfoPayload(
                jsonData: Data(#"{"originalTransactionId":"0","environment":"\#(environment)","signedDate":\#(time)}"#.utf8))
            #expect(renewal.signedDate == floored, "\(time)")
            let notification = try NotificationPayload(
                jsonData: Data(
                    #"{"notificationType":"DID_RENEW","notificationUUID":"u","signedDate":\#(time),"data":{"environment":"\#(environment)","bundleId":"b"}}"#
                        .utf8))
            #expect(notification.signedDate == floored, "\(time)")
        }
        // Still refused there: what is not a number of milliseconds at all, or beyond Int64 (out of range).
        for time in ["\"1697679936049\"", "true"] {
            #expect(throws: VerificationError(.invalidPayload, "transaction.purchaseDate must be a whole number of milliseconds")) {
                try TransactionPayload(jsonData: Self.transactionJSON(environment: environment, "purchaseDate", time))
            }
        }
        for time in ["1e300", "-9223372036854775809", "9223372036854775808.5"] {
            #expect(
                throws: VerificationError(
                    .invalidPayload, "transaction.purchaseDate is outside the supported range (1970 through 9999, in milliseconds)")
            ) {
                try TransactionPayload(jsonData: Self.transactionJSON(environment: environment, "purchaseDate", time))
            }
        }
    }

    @Test func notJSONIsInvalidPayload() {
        #expect(throws: VerificationError(.invalidPayload, "transaction is not a valid JSON object: unexpected end of input at byte 1")) {
            try TransactionPayload(jsonData: Data("{".utf8))
        }
        #expect(throws: VerificationError(.invalidPayload, "renewalInfo is not a valid JSON object: the JSON value is an array, not an object")) {
            try RenewalInfoPayload(jsonData: Data("[]".utf8))
        }
        #expect(
            throws: VerificationError(
                .invalidPayload, #"transaction is not a valid JSON object: duplicate key "a" at byte 7: a key may appear only once in an object"#)
        ) {
            try TransactionPayload(jsonData: Data(#"{"a":1,"a":2}"#.utf8))
        }
    }

    @Test func xcodeVectorsDecodeWithTheirTimesFlooredAsUpstreamExpects() throws {
        // Xcode's StoreKit testing signs fractional milliseconds (1697679936049.7297): the verified
        // JSON keeps them as signed, the typed payloads floor them (expectations.json "xcode-transaction").
        let verifier = try Vectors.verifier(environment: .xcode, bundleId: "com.example.naturelab.backyardbirds.example")
        let jws = try Vectors.string("jws/xcode-signed-transaction.jws")
        let verified = try verifier.verify(jws, as: .transaction, now: 0).get()
        #expect(verified.payload["purchaseDate"] == .number(1_697_679_936_049.7297))
        let transaction = try verifier.verifyTransaction(jws, now: 0).get()
        #expect(transaction.purchaseDate == 1_697_679_936_049)
        #expect(transaction.originalPurchaseDate == 1_697_679_936_049)
        #expect(transaction.expiresDate == 1_700_358_336_049)
        #expect(transaction.signedDate == 1_697_679_936_056)
        #expect(transaction.environment == .xcode)
        let renewal = try verifier.verifyRenewalInfo(try Vectors.string("jws/xcode-signed-renewal-info.jws"), now: 0).get()
        #expect(renewal.signedDate == 1_697_679_936_711)
        #expect(renewal.recentSubscriptionStartDate == 1_697_679_936_049)
        #expect(renewal.renewalDate == 1_700_358_336_049)

        let app = try verifier.inspect(try Vectors.string("jws/xcode-signed-app-transaction.jws"), now: 0).get()
        #expect(app.kind == .appTransaction)
        #expect(!app.signatureVerified)

        // The same data is refused by a Sandbox verifier: x5c has one self-signed certificate.
        let sandbox = try Vectors.verifier(bundleId: "com.example.naturelab.backyardbirds.example")
        let result = sandbox.verifyTransaction(try Vectors.string("jws/xcode-signed-transaction.jws"), now: 0)
        #expect(result.failure == VerificationError(.invalidJWSFormat, "x5c holds 1 certificate; exactly 3 are required"))
    }
}
