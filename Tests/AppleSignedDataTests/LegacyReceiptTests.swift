import Foundation
import Testing

@testable import AppleSignedData

@Suite struct LegacyReceiptTests {
    func response(status: Int = 0, environment: String = "Sandbox", bundle: String = "com.example", ownership: String? = "PURCHASED") -> Data {
        var entry: [String: Any] = [
            "original_transaction_id": "1000", "transaction_id": "1002", "product_id": "com.example.pro",
            "purchase_date_ms": "1700000000000", "expires_date_ms": "1702592000000", "quantity": "1", "is_trial_period": "false",
        ]
        if let ownership { entry["in_app_ownership_type"] = ownership }
        let json: [String: Any] = [
            "status": status, "environment": environment,
            "receipt": ["bundle_id": bundle, "receipt_creation_date_ms": "1700000001000", "in_app": []],
            "latest_receipt_info": [
                entry, entry.merging(["transaction_id": "1001", "cancellation_date_ms": "1700000500000", "cancellation_reason": "1"]) { $1 },
            ],
        ]
        return (try? JSONSerialization.data(withJSONObject: json)) ?? Data()
    }

    @Test func purchasedEntriesConvert() throws {
        let parsed = try LegacyReceiptResponse(jsonData: response())
        let transactions = try Vectors.verifier().verifyLegacyReceipt(parsed).get()
        #expect(transactions.count == 2)
        #expect(transactions[0].originalTransactionId == "1000")
        #expect(transactions[0].bundleId == "com.example")
        #expect(transactions[0].environment == .sandbox)
        #expect(transactions[0].purchaseDate == 1_700_000_000_000)
        #expect(transactions[0].expiresDate == 1_702_592_000_000)
        #expect(transactions[0].signedDate == 1_700_000_001_000)
        #expect(transactions[0].quantity == 1)
        #expect(!transactions[0].isFamilyShared)
        #expect(transactions[1].revocationDate == 1_700_000_500_000)
        #expect(transactions[1].revocationReason == 1)
    }

    @Test func familySharedIsFlagged() throws {
        let transactions = try Vectors.verifier().verifyLegacyReceipt(try LegacyReceiptResponse(jsonData: response(ownership: "FAMILY_SHARED"))).get()
        #expect(transactions.allSatisfy { $0.isFamilyShared })
        let old = try Vectors.verifier().verifyLegacyReceipt(try LegacyReceiptResponse(jsonData: response(ownership: nil))).get()
        #expect(old.allSatisfy { $0.inAppOwnershipType == "PURCHASED" })
    }

    @Test(arguments: [21002, 21003, 21007, 21010])
    func nonZeroStatusIsRejected(_ status: Int) throws {
        let result = try Vectors.verifier().verifyLegacyReceipt(try LegacyReceiptResponse(jsonData: response(status: status)))
        #expect(result.failure == VerificationError(.invalidPayload, "verifyReceipt status is \(status); only 0 (valid) is accepted"))
    }

    @Test func wrongBundleAndEnvironmentAreRejected() throws {
        let verifier = try Vectors.verifier()
        let bundle = verifier.verifyLegacyReceipt(try LegacyReceiptResponse(jsonData: response(bundle: "com.other")))
        #expect(bundle.failure?.code == .invalidAppIdentifier)
        #expect(bundle.failure?.message.contains("\"com.other\"") == true)
        let environment = verifier.verifyLegacyReceipt(try LegacyReceiptResponse(jsonData: response(environment: "Production")))
        #expect(environment.failure?.code == .invalidEnvironment)
    }

    @Test func malformedFieldsAreInvalidPayload() {
        #expect(throws: VerificationError(.invalidPayload, "verifyReceipt is missing status")) { try LegacyReceiptResponse(json: [:]) }
        #expect(
            throws: VerificationError(
                .invalidPayload, "verifyReceipt.latest_receipt_info[0].purchase_date_ms must be a whole number of milliseconds")
        ) {
            try LegacyReceiptResponse(json: [
                "status": 0,
                "latest_receipt_info": [
                    [
                        "original_transaction_id": "1", "transaction_id": "1", "product_id": "p", "purchase_date_ms": "soon",
                    ]
                ],
            ])
        }
    }
}
