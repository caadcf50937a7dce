import Foundation
import LedgerTestSupport
import Testing

/// `ledger serve` on a PostgreSQL store whose server goes away and comes back: requests are answered
/// 503 with Retry-After meanwhile (never dropped), and decided again once it is back.
@Suite struct ServeOnPostgresTests {
    @Test func whileTheDatabaseIsDownServeAnswers503WithRetryAfterAndRecoversAfterwards() throws {
        let cluster = try PostgresCluster.standalone()
        defer { cluster.stopAndRemove() }
        let keys = TemporaryDirectory("ledger-serve-pg-keys")
        defer { keys.remove() }
        let store = ["--store", try cluster.newDatabase(), "--keys", keys.path("keys").path]
        let served = try ServedLedger(storeOptions: store, environment: ["LEDGER_RECONNECT_WINDOW": "1"])
        let headers = ["Authorization": "Bearer \(ServedLedger.serviceToken)"]
        func line(_ otid: String, _ uid: String) throws -> String {
            Fixtures.line(["type": "purchase", "account": uid, "signedTransaction": try ServedLedger.signedTransaction(otid), "at": Fixtures.start])
                + "\n"
        }
        let annLine = try line("2000000000007300", "uid-pg-serve-ann-7f3a9c")
        let first = try served.client.post("/v1/submit", annLine, headers: headers)
        #expect(first.status == 200)
        #expect(Fixtures.object(first.text)["decision"] as? String == "granted")
        #expect(try served.client.get("/readyz").status == 200)

        try cluster.stop(mode: "fast")
        let refused = try served.client.post("/v1/submit", try line("2000000000007301", "uid-pg-serve-bob-7f3a9c"), headers: headers)
        #expect(refused.status == 503)
        #expect(refused.headers["retry-after"] != nil)
        let notReady = try served.client.get("/readyz")
        #expect(notReady.status == 503)
        #expect(notReady.headers["retry-after"] != nil)

        try cluster.start()
        let bobLine = try line("2000000000007301", "uid-pg-serve-bob-7f3a9c")
        let retried = try served.client.post("/v1/submit", bobLine, headers: headers)
        #expect(retried.status == 200, "\(retried.text)")
        #expect(Fixtures.object(retried.text)["decision"] as? String == "granted")
        #expect(Fixtures.object(retried.text)["duplicate"] == nil, "the refused attempt was recorded")
        let again = try served.client.post("/v1/submit", annLine, headers: headers)
        #expect(Fixtures.object(again.text)["duplicate"] as? Bool == true)
        #expect(try served.client.get("/readyz").status == 200)
        #expect(served.stop() == 0)
        let verify = try LedgerBinary.run(["verify"] + store)
        #expect(verify.json["intact"] as? Bool == true)
        #expect(verify.json["verifiedRecords"] as? Int == 2)
        // Identifiers long enough that no log text matches them by chance (Fixtures.privacyNeedleMinimumBytes).
        #expect(!served.log.contains("uid-pg-serve-ann-7f3a9c") && !served.log.contains("2000000000007300"))
    }
}
