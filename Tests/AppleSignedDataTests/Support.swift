import Foundation
import Testing

@testable import AppleSignedData

/// Test vectors copied from /work/shared/vectors/apple (see Vectors/README.md).
enum Vectors {
    /// 2025-11-01T02:09:35Z, the upstream libraries' EFFECTIVE_DATE; the pinned "now" of every test.
    static let effectiveDate: Int64 = 1_761_962_975
    static let nowMs: Int64 = effectiveDate * 1000

    static var root: URL {
        Bundle.module.url(forResource: "Vectors", withExtension: nil) ?? URL(fileURLWithPath: "/nonexistent")
    }

    static func data(_ path: String) throws -> Data { try Data(contentsOf: root.appendingPathComponent(path)) }
    static func string(_ path: String) throws -> String { String(decoding: try data(path), as: UTF8.self) }
    static func der(_ path: String) throws -> [UInt8] { [UInt8](try data(path)) }

    static func json(_ path: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: data(path)) as? [String: Any])
    }

    static var testCA: [UInt8] { (try? der("certs/testCA.der")) ?? [] }
    static var testLeaf: [UInt8] { (try? der("certs/testLeaf.der")) ?? [] }
    static var testIntermediate: [UInt8] { (try? der("certs/testIntermediate.der")) ?? [] }
    static var goodChain: [[UInt8]] { [testLeaf, testIntermediate, testCA] }
    static var leafKey: String { (try? string("certs/testLeaf.key.pem")) ?? "" }

    /// Verifier trusting the test PKI root.
    static func verifier(
        environment: AppleEnvironment = .sandbox, bundleId: String = "com.example", appAppleId: Int64? = 1234,
        roots: [[UInt8]]? = nil, validateAtSignedDate: Bool = true
    ) throws -> SignedDataVerifier {
        try SignedDataVerifier(
            configuration: VerifierConfiguration(
                bundleId: bundleId, environment: environment, appAppleId: appAppleId,
                rootCertificates: roots ?? [testCA], allowLocalTesting: environment.isLocal,
                validateAtSignedDate: validateAtSignedDate))
    }

    /// Signs `payload` with testLeaf.key.pem and the given chain (default: the good test chain).
    static func sign(_ payload: [String: Any], chain: [[UInt8]]? = nil, header: [String: Any]? = nil) throws -> String {
        try TestJWSSigner.sign(payload: payload, chain: chain ?? goodChain, privateKeyPEM: leafKey, header: header)
    }

    /// A complete Sandbox transaction for com.example signed at the effective date.
    static func transactionPayload(_ changes: [String: Any] = [:]) -> [String: Any] {
        var payload: [String: Any] = [
            "originalTransactionId": "1000", "transactionId": "1001", "productId": "com.example.pro",
            "bundleId": "com.example", "purchaseDate": nowMs - 60_000, "expiresDate": nowMs + 86_400_000,
            "inAppOwnershipType": "PURCHASED", "environment": "Sandbox", "signedDate": nowMs,
            "type": "Auto-Renewable Subscription", "quantity": 1, "someFutureField": ["ignored": true],
        ]
        payload.merge(changes) { $1 }
        return payload
    }

    static func renewalPayload(_ changes: [String: Any] = [:]) -> [String: Any] {
        var payload: [String: Any] = [
            "originalTransactionId": "1000", "autoRenewProductId": "com.example.pro", "productId": "com.example.pro",
            "autoRenewStatus": 1, "environment": "Sandbox", "signedDate": nowMs, "renewalDate": nowMs + 86_400_000,
        ]
        payload.merge(changes) { $1 }
        return payload
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
