import Foundation
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Testing

@testable import LedgerService

/// `POST /v1/submit` when the service token cannot be checked at all (libcrypto failing while
/// hashing it): a fault of the server, answered 500 and logged, never 401 (which would tell a
/// verifier its token is wrong) and never a decision. The failure is injected through the hash
/// `ServiceTokens` is built with; the service runs in this process on a new ledger.
@Suite struct ServiceTokenFailureTests {
    @Test func aTokenThatCannotBeCheckedIs500LoggedAndDecidesNothing() throws {
        let (ledger, directory) = try Fixtures.ledger()
        defer { directory.remove() }
        let failing = Switch()
        let tokens = try ServiceTokens(parsing: Array((ServedLedger.serviceToken + "\n").utf8)) { bytes in
            if failing.on { throw CryptoError("EVP_MD_CTX_new", detail: "injected failure") }
            return try Digest.sha256(bytes)
        }
        let log = Collected<String>()
        let service = try LedgerService(
            ledger: ledger,
            configuration: .init(
                http: .init(), firebaseProjectId: ServedLedger.projectId,
                firebaseCertificates: .file(ServedLedger.firebaseKeys.appendingPathComponent("certificates.json").path), serviceTokens: tokens,
                log: log.add))
        defer { service.shutdown(grace: 5) }
        let client = try HTTPClient(port: service.port)
        let line = Fixtures.line(["type": "purchase", "account": "uid-token-failure-7f3a9c", "at": Fixtures.start])
        func submit(_ token: String) throws -> HTTPClient.Response {
            try client.post("/v1/submit", line + "\n", headers: ["Authorization": "Bearer " + token])
        }
        #expect(try submit(ServedLedger.serviceToken).status == 200, "the token is accepted while it can be checked")
        #expect(try submit(String(repeating: "0", count: 48)).status == 401)
        let before = try ledger.store.head().sequence

        failing.on = true
        let failed = try submit(ServedLedger.serviceToken)
        #expect(failed.status == 500, "\(failed.text)")
        #expect(failed.json["code"] as? String == "internal")
        #expect((failed.json["message"] as? String)?.contains("could not be checked") == true, "\(failed.text)")
        let wrong = try submit(String(repeating: "0", count: 48))
        #expect(wrong.status == 500, "no token can be judged while hashing fails: \(wrong.text)")
        #expect(try ledger.store.head().sequence == before, "nothing was decided")
        let errors = log.list.map(Fixtures.object).filter { $0["event"] as? String == "internal-error" }
        #expect(errors.count == 2)
        #expect(errors.allSatisfy { ($0["error"] as? String)?.contains("injected failure") == true }, "\(errors)")
        #expect(!log.list.contains { $0.contains(ServedLedger.serviceToken) }, "the token is never logged")

        failing.on = false
        #expect(try submit(ServedLedger.serviceToken).status == 200)
    }
}
