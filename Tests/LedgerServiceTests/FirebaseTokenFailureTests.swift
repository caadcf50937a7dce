import FirebaseAuth
import Foundation
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Testing

@testable import LedgerService

/// An app route when a Firebase ID token cannot be checked at all (libcrypto failing while
/// verifying its RS256 signature): a fault of the server, answered 500 and logged, never 401
/// (which would tell the app its token is bad and make it sign its user out) and never a read or
/// a decision. The failure is injected through the service's signature check; the service runs in
/// this process on a new ledger.
@Suite struct FirebaseTokenFailureTests {
    @Test func aTokenWhoseSignatureCannotBeCheckedIs500LoggedAndReadsOrDecidesNothing() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let failing = Switch()
        let log = Collected<String>()
        var configuration = LedgerService.Configuration(
            http: .init(), firebaseProjectId: ServedLedger.projectId,
            firebaseCertificates: .file(ServedLedger.firebaseKeys.appendingPathComponent("certificates.json").path), log: log.add)
        configuration.firebaseSignatureCheck = { key, signature, message throws(CryptoError) in
            if failing.on { throw CryptoError("EVP_DigestVerifyInit", detail: "injected failure") }
            return try FirebaseTokenVerifier.libcryptoRS256(key, signature, message)
        }
        let service = try LedgerService(ledger: ledger, configuration: configuration)
        defer { service.shutdown(grace: 5) }
        let client = try HTTPClient(port: service.port)
        let uid = "uid-firebase-failure-5c2e8d"
        let token = try ServedLedger.token(uid)
        let bearer = ["Authorization": "Bearer " + token]
        #expect(try client.get("/v1/entitlements", headers: bearer).status == 200, "the token is accepted while it can be checked")
        let before = try ledger.store.head().sequence

        failing.on = true
        // A token verified before is answered from the verified-token cache, without a signature
        // check; another token (its bytes differ) must be checked, and cannot be.
        #expect(try client.get("/v1/entitlements", headers: bearer).status == 200, "the verification already made stands")
        let unseen = ["Authorization": "Bearer " + (try ServedLedger.token(uid) { $0["auth_time"] = 1_700_000_000 })]
        for response in [try client.get("/v1/entitlements", headers: unseen), try client.send("DELETE", "/v1/account", headers: unseen)] {
            #expect(response.status == 500, "\(response.text)")
            #expect(response.json["code"] as? String == "internal")
            #expect((response.json["message"] as? String)?.contains("could not be checked") == true, "\(response.text)")
        }
        #expect(try ledger.store.head().sequence == before, "nothing was decided")
        let errors = log.list.map(Fixtures.object).filter { $0["event"] as? String == "internal-error" }
        #expect(errors.map { $0["route"] as? String } == ["GET /v1/entitlements", "DELETE /v1/account"])
        #expect(errors.allSatisfy { ($0["error"] as? String)?.contains("injected failure") == true }, "\(errors)")
        #expect(!log.list.contains { $0.contains(token) || $0.contains(uid) }, "neither the token nor its UID is logged")
        let metrics = try client.get("/metrics").text
        #expect(!metrics.contains(#"ledger_token_failures_total{code="internal"}"#), "a server fault is not counted as a bad token")

        failing.on = false
        #expect(try client.get("/v1/entitlements", headers: bearer).status == 200)
        let forged = try ServedLedger.token(uid) { $0["sub"] = "uid-firebase-failure-other" }
        let swapped = token.split(separator: ".").enumerated().map { $0.offset == 1 ? forged.split(separator: ".")[1] : $0.element }
        let refused = try client.get("/v1/entitlements", headers: ["Authorization": "Bearer " + swapped.joined(separator: ".")])
        #expect(refused.status == 401 && refused.json["code"] as? String == "invalid-signature", "\(refused.text)")
    }
}
