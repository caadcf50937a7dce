import Foundation
import LedgerTestSupport
import Testing

@testable import AppleSignedData

@Suite struct NotificationTests {
    /// A signed notification wrapping a signed transaction and renewal info, all from the test PKI.
    func signedNotification(
        transaction: [String: Any] = Vectors.transactionPayload(), renewal: [String: Any]? = Vectors.renewalPayload(),
        data changes: [String: Any] = [:]
    ) throws -> String {
        var data: [String: Any] = [
            "environment": "Sandbox", "bundleId": "com.example", "appAppleId": 1234, "status": 1,
            "signedTransactionInfo": try Vectors.sign(transaction),
        ]
        if let renewal { data["signedRenewalInfo"] = try Vectors.sign(renewal) }
        data.merge(changes) { $1 }
        return try Vectors.sign([
            "notificationType": "SUBSCRIBED", "subtype": "INITIAL_BUY", "notificationUUID": "uuid-1",
            "signedDate": Vectors.nowMs, "version": "2.0", "data": data,
        ])
    }

    @Test func nestedTransactionAndRenewalAreVerifiedAndDecoded() throws {
        let verifier = try Vectors.verifier()
        let notification = try verifier.verifyNotification(try signedNotification(), now: 0).get()
        #expect(notification.notificationType == "SUBSCRIBED")
        #expect(notification.subtype == "INITIAL_BUY")
        #expect(notification.notificationUUID == "uuid-1")
        #expect(notification.signedDate == Vectors.nowMs)
        #expect(notification.bundleId == "com.example")
        #expect(notification.appAppleId == 1234)
        #expect(notification.environment == .sandbox)
        #expect(notification.status == 1)
        #expect(notification.transaction?.transactionId == "1001")
        #expect(notification.renewalInfo?.autoRenewStatus == 1)
    }

    @Test func nestedFailuresNameTheField() throws {
        let verifier = try Vectors.verifier()
        let wrongBundle = try signedNotification(transaction: Vectors.transactionPayload(["bundleId": "com.other"]))
        let error = try #require(verifier.verifyNotification(wrongBundle, now: 0).failure)
        #expect(error.code == .invalidAppIdentifier)
        #expect(error.message.hasPrefix("data.signedTransactionInfo: "))

        let tampered = try signedNotification(data: ["signedRenewalInfo": "a.b.c"])
        let tamperedError = try #require(verifier.verifyNotification(tampered, now: 0).failure)
        #expect(tamperedError.code == .invalidJWSFormat)
        #expect(tamperedError.message.hasPrefix("data.signedRenewalInfo: "))

        let expired = try signedNotification(renewal: Vectors.renewalPayload(["signedDate": 2_280_946_846_000]))
        #expect(verifier.verifyNotification(expired, now: 0).failure?.code == .invalidChain)

        // Renewal info of another lineage beside the transaction: refused, as in a reconciliation.
        let mismatched = try signedNotification(renewal: Vectors.renewalPayload(["originalTransactionId": "9999"]))
        let mismatch = try #require(verifier.verifyNotification(mismatched, now: 0).failure)
        #expect(mismatch.code == .invalidPayload)
        #expect(mismatch.message == "data.signedRenewalInfo: renewal info originalTransactionId 9999 does not match the transaction's 1000")
    }

    @Test func testNotificationVectorDecodes() throws {
        let verifier = try Vectors.verifier()
        let notification = try verifier.verifyNotification(try Vectors.string("jws/testNotification.jws"), now: 0).get()
        #expect(notification.notificationType == "TEST")
        #expect(notification.notificationUUID == "9ad56bd2-0bc6-42e0-af24-fd996d87a1e6")
        #expect(notification.signedDate == 1_681_314_324_000)
        #expect(notification.transaction == nil)
        #expect(try verifier.inspect(try Vectors.string("jws/testNotification.jws"), now: 0).get().kind == .notification)
    }

    /// Upstream payloads/ JSON, re-signed with the test PKI after switching LocalTesting to Sandbox.
    struct IdentityCase: Sendable, CustomTestStringConvertible {
        var file: String
        var environment: AppleEnvironment
        var appAppleId: Int64
        var expected: VerificationError.Code?
        var testDescription: String { "\(file) \(environment.rawValue) \(appAppleId)" }
    }

    @Test(arguments: [
        IdentityCase(file: "signedNotification.json", environment: .sandbox, appAppleId: 1, expected: nil),
        IdentityCase(file: "signedNotification.json", environment: .production, appAppleId: 41234, expected: .invalidEnvironment),
        IdentityCase(file: "signedNotification.json", environment: .production, appAppleId: 1, expected: .invalidAppIdentifier),
        IdentityCase(file: "signedSummaryNotification.json", environment: .sandbox, appAppleId: 1, expected: nil),
        IdentityCase(file: "signedSummaryNotification.json", environment: .production, appAppleId: 1, expected: .invalidAppIdentifier),
        IdentityCase(file: "signedRescindConsentNotification.json", environment: .sandbox, appAppleId: 1, expected: nil),
        IdentityCase(file: "signedExternalPurchaseTokenNotification.json", environment: .production, appAppleId: 55555, expected: nil),
        IdentityCase(file: "signedExternalPurchaseTokenNotification.json", environment: .sandbox, appAppleId: 55555, expected: .invalidEnvironment),
        IdentityCase(file: "signedExternalPurchaseTokenNotification.json", environment: .production, appAppleId: 1, expected: .invalidAppIdentifier),
        IdentityCase(file: "signedExternalPurchaseTokenSandboxNotification.json", environment: .sandbox, appAppleId: 55555, expected: nil),
        IdentityCase(
            file: "signedExternalPurchaseTokenSandboxNotification.json", environment: .production, appAppleId: 55555, expected: .invalidEnvironment),
    ])
    func identitySource(_ testCase: IdentityCase) throws {
        var text = try Vectors.string("payloads/" + testCase.file).replacingOccurrences(of: "\"LocalTesting\"", with: "\"Sandbox\"")
        // The nested signed fields are placeholders upstream; drop them so only identity is tested.
        text = text.replacingOccurrences(of: "\"signed_transaction_info_value\"", with: "null")
            .replacingOccurrences(of: "\"signed_renewal_info_value\"", with: "null")
        let payload = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        let verifier = try Vectors.verifier(environment: testCase.environment, appAppleId: testCase.appAppleId)
        let result = verifier.verifyNotification(try Vectors.sign(payload), now: 0)
        if let code = testCase.expected {
            #expect(result.failure?.code == code, "\(result)")
        } else {
            let notification = try result.get()
            #expect(notification.bundleId == "com.example")
            #expect(notification.environment == testCase.environment)
        }
    }

    @Test func noIdentitySourceIsInvalidAppIdentifier() throws {
        let jws = try Vectors.sign(["notificationType": "TEST", "notificationUUID": "u", "signedDate": Vectors.nowMs])
        let result = try Vectors.verifier().verifyNotification(jws, now: 0)
        #expect(result.failure == VerificationError(.invalidAppIdentifier, "notification has no bundleId; expected \"com.example\""))
    }

    @Test func trustDecodedNotification() throws {
        let json: [String: Any] = [
            "notificationType": "DID_RENEW", "notificationUUID": "u-2", "signedDate": 1_700_000_000_000,
            "data": [
                "environment": "Production", "bundleId": "com.example", "appAppleId": 42,
                "transaction": Vectors.transactionPayload(["environment": "Production"]),
                "renewalInfo": Vectors.renewalPayload(["environment": "Production"]),
            ],
        ]
        let notification = try NotificationPayload(json: Fixtures.members(json))
        #expect(notification.notificationType == "DID_RENEW")
        #expect(notification.subtype == nil)
        #expect(notification.appAppleId == 42)
        #expect(notification.environment == .production)
        #expect(notification.transaction?.environment == .production)
        #expect(notification.renewalInfo?.originalTransactionId == "1000")

        var broken = json
        broken["data"] = ["environment": "Production", "bundleId": "com.example", "transaction": ["transactionId": "1"]]
        #expect(throws: VerificationError(.invalidPayload, "notification.data.transaction is missing originalTransactionId")) {
            try NotificationPayload(json: Fixtures.members(broken))
        }
        broken["notificationUUID"] = nil
        #expect(throws: VerificationError(.invalidPayload, "notification is missing notificationUUID")) {
            try NotificationPayload(json: ["notificationType": "X", "signedDate": 1])
        }
        #expect(throws: VerificationError.self) { try NotificationPayload(jsonData: Data("[]".utf8)) }
    }
}
