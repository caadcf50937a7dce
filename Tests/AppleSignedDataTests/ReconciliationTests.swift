import Foundation
import LedgerTestSupport
import Testing

@testable import AppleSignedData

@Suite struct ReconciliationTests {
    @Test func subscriptionStatusesAreVerifiedPerItem() throws {
        let good = try Vectors.sign(Vectors.transactionPayload())
        let renewal = try Vectors.sign(Vectors.renewalPayload())
        let other = try Vectors.sign(Vectors.transactionPayload(["originalTransactionId": "2000", "transactionId": "2001"]))
        let json: [String: Any] = [
            "environment": "Sandbox", "bundleId": "com.example", "appAppleId": 1234, "unknownField": 1,
            "data": [
                [
                    "subscriptionGroupIdentifier": "G1",
                    "lastTransactions": [
                        ["originalTransactionId": "1000", "status": 1, "signedTransactionInfo": good, "signedRenewalInfo": renewal],
                        ["originalTransactionId": "2000", "status": 2, "signedTransactionInfo": other + "x"],
                        ["originalTransactionId": "9999", "status": 1, "signedTransactionInfo": other],
                        ["originalTransactionId": "2000", "status": 5, "signedTransactionInfo": other, "signedRenewalInfo": renewal],
                    ],
                ]
            ],
        ]
        let response = try ReconciliationResponse(jsonData: try JSONSerialization.data(withJSONObject: json))
        #expect(response.kind == .subscriptionStatuses)
        #expect(response.items.count == 4)
        let results = try Vectors.verifier().verifyReconciliation(response, now: 0)
        let first = try results[0].get()
        #expect(first.transaction.originalTransactionId == "1000")
        #expect(first.renewalInfo?.autoRenewStatus == 1)
        #expect(first.status == 1)
        #expect(first.subscriptionGroupIdentifier == "G1")
        #expect(results[1].failure?.code == .verificationFailed || results[1].failure?.code == .invalidJWSFormat)
        #expect(results[2].failure?.code == .invalidPayload)
        #expect(results[3].failure?.message.contains("renewal info originalTransactionId 1000") == true)
    }

    @Test func transactionHistoryIsVerifiedPerItem() throws {
        let items = [
            try Vectors.sign(Vectors.transactionPayload()),
            try Vectors.sign(Vectors.transactionPayload(["bundleId": "com.other"])),
            try Vectors.sign(Vectors.transactionPayload(["inAppOwnershipType": "FAMILY_SHARED"])),
        ]
        let json: [String: Any] = [
            "signedTransactions": items, "bundleId": "com.example", "environment": "Sandbox", "hasMore": true, "revision": "r1",
        ]
        let response = try ReconciliationResponse(json: Fixtures.members(json))
        #expect(response.kind == .transactionHistory)
        #expect(response.hasMore == true)
        #expect(response.revision == "r1")
        let results = try Vectors.verifier().verifyReconciliation(response, now: 0)
        #expect(results.count == 3)
        #expect(try results[0].get().status == nil)
        #expect(results[1].failure?.code == .invalidAppIdentifier)
        #expect(try results[2].get().transaction.isFamilyShared)
    }

    @Test func malformedResponsesAreInvalidPayload() {
        #expect(throws: VerificationError(.invalidPayload, "response has neither signedTransactions nor data")) {
            try ReconciliationResponse(json: ["bundleId": "x"])
        }
        #expect(throws: VerificationError(.invalidPayload, "response.signedTransactions[0] must be a string")) {
            try ReconciliationResponse(json: ["signedTransactions": [1]])
        }
        #expect(throws: VerificationError(.invalidPayload, "response.data[0].lastTransactions[0] is missing signedTransactionInfo")) {
            try ReconciliationResponse(json: ["data": [["lastTransactions": [["status": 1]]]]])
        }
        #expect(throws: VerificationError.self) { try ReconciliationResponse(jsonData: Data("nope".utf8)) }
    }
}
