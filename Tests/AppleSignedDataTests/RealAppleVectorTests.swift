import Foundation
import Testing

@testable import AppleSignedData

/// Real Apple sandbox JWS, verified offline against the embedded Apple Root CA - G3.
@Suite struct RealAppleVectorTests {
    @Test func realTransactionVerifiesAtSignedDate() throws {
        let verifier = try SignedDataVerifier(configuration: VerifierConfiguration(bundleId: "com.goodheartapp", environment: .sandbox))
        let jws = try Vectors.string("jws/real-sandbox-transaction-2025-02-10.jws")
        let transaction = try verifier.verifyTransaction(jws, now: 0).get()
        #expect(transaction.transactionId == "2000000847061981")
        #expect(transaction.originalTransactionId == "2000000847061981")
        #expect(transaction.productId == "gh_super_good_ticket_1")
        #expect(transaction.purchaseDate == 1_738_645_560_000)
        #expect(transaction.signedDate == 1_739_161_772_561)
        #expect(transaction.type == "Consumable")
        #expect(transaction.price == 230000)
        #expect(transaction.currency == "JPY")
        #expect(transaction.storefront == "JPN")
        #expect(transaction.environment == .sandbox)
        let inspected = try verifier.inspect(jws, now: 0).get()
        #expect(inspected.validatedAt == 1_739_161_772)
        #expect(inspected.leafSubject?.contains("Receipt Signing") == true)
    }

    @Test func realRenewalInfoVerifiesAtSignedDate() throws {
        let verifier = try SignedDataVerifier(configuration: VerifierConfiguration(bundleId: "any", environment: .sandbox))
        let renewal = try verifier.verifyRenewalInfo(try Vectors.string("jws/real-sandbox-renewalinfo-2023-05-23.jws"), now: 0).get()
        #expect(renewal.originalTransactionId == "2000000335310644")
        #expect(renewal.autoRenewProductId == "co.ringalarm.swtich.quarterly2")
        #expect(renewal.autoRenewStatus == 1)
        #expect(renewal.signedDate == 1_684_822_778_492)
        #expect(renewal.recentSubscriptionStartDate == 1_684_822_738_000)
    }

    @Test(arguments: ["jws/real-sandbox-transaction-2025-02-10.jws", "jws/real-sandbox-renewalinfo-2023-05-23.jws"])
    func realVectorsAreRejectedAtEffectiveDate(_ file: String) throws {
        let verifier = try SignedDataVerifier(
            configuration: VerifierConfiguration(bundleId: "com.goodheartapp", environment: .sandbox, validateAtSignedDate: false))
        let result = verifier.inspect(try Vectors.string(file), now: Vectors.nowMs)
        #expect(result.failure?.code == .invalidChain)
        #expect(result.failure?.message.contains("certificate has expired") == true, "\(result)")
        #expect(result.failure?.message.contains("at \(Vectors.effectiveDate)") == true, "\(result)")
    }

    @Test func realTransactionAgainstTestRootIsRejected() throws {
        let result = try Vectors.verifier(bundleId: "com.goodheartapp")
            .verifyTransaction(try Vectors.string("jws/real-sandbox-transaction-2025-02-10.jws"), now: 0)
        #expect(result.failure?.code == .invalidChain)
    }

    /// chainCases of expectations.json, checked on the chain step directly.
    @Test(
        arguments: [
            ("certs/testLeaf.der", "certs/testIntermediate.der", "certs/testCA.der", Vectors.effectiveDate, true),
            ("certs/testInvalidIntermediateLeaf.der", "certs/testInvalidOIDIntermediate.der", "certs/testCA.der", Vectors.effectiveDate, false),
            ("certs/testInvalidOIDLeaf.der", "certs/testIntermediate.der", "certs/testCA.der", Vectors.effectiveDate, false),
            ("certs/testLeaf.der", "certs/testIntermediate.der", "certs/testCA.der", 2_280_946_846, false),
            ("certs/testLeaf.der", "certs/testIntermediate.der", "certs/AppleRootCA-G3.cer", Vectors.effectiveDate, false),
            ("certs/apple-receipt-signing-leaf-2025-09-19.cer", "certs/AppleWWDRCAG6.cer", "certs/AppleRootCA-G3.cer", Vectors.effectiveDate, true),
            ("certs/apple-receipt-signing-leaf-2021-08-25.cer", "certs/AppleWWDRCAG6.cer", "certs/AppleRootCA-G3.cer", 1_681_312_846, true),
            ("certs/apple-receipt-signing-leaf-2021-08-25.cer", "certs/AppleWWDRCAG6.cer", "certs/AppleRootCA-G3.cer", Vectors.effectiveDate, false),
            ("certs/apple-receipt-signing-leaf-2025-09-19.cer", "certs/AppleWWDRCAG6.cer", "certs/AppleRootCA-G3.cer", 1_681_312_846, false),
        ] as [(String, String, String, Int64, Bool)])
    func chainCase(leaf: String, intermediate: String, root: String, time: Int64, valid: Bool) throws {
        let verifier = try SignedDataVerifier(
            configuration: VerifierConfiguration(bundleId: "b", environment: .sandbox, rootCertificates: [try Vectors.der(root)]))
        let leafCertificate = try #require(X509Certificate(der: try Vectors.der(leaf)))
        let intermediateCertificate = try #require(X509Certificate(der: try Vectors.der(intermediate)))
        let outcome = Result { () throws(VerificationError) in
            try verifier.validateChain(leaf: leafCertificate, intermediate: intermediateCertificate, time: time)
        }
        #expect((outcome.failure == nil) == valid, "\(outcome)")
        if !valid { #expect(outcome.failure?.code == .invalidChain) }
    }
}
