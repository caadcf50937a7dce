import Foundation
import LedgerCore
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// The PostgreSQL engine against a real server: the same decisions, bytes and checks as LMDB.
@Suite struct PostgresEngineTests {
    @Test func aLedgerOnPostgreSQLDecidesVerifiesAndReopens() throws {
        let directory = TemporaryDirectory("ledger-pg")
        defer { directory.remove() }
        let location = try TestStore.postgres.location(in: directory)
        let ledger = try Ledger.initialize(at: location, configuration: Fixtures.configuration, clock: Fixtures.clock)
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        let t = Fixtures.start
        let first = Fixtures.object(
            submit.respond(to: Fixtures.line(["type": "purchase", "account": "alice", "transaction": Fixtures.transaction("1001", at: t), "at": t])))
        #expect(first["decision"] as? String == "granted")
        let denied = Fixtures.object(
            submit.respond(
                to: Fixtures.line(["type": "restore", "account": "bob", "transaction": Fixtures.transaction("1001", at: t + 1), "at": t + 1])))
        #expect(denied["code"] as? String == "permission-denied")
        #expect(try ledger.binding(originalTransactionId: "1001").uid == "alice")
        let report = try ledger.store.replay()
        #expect(report.isIntact, "\(report)")
        #expect(report.verifiedRecords == 2)
        let reopened = try Ledger(opening: location, clock: Fixtures.clock)
        #expect(try reopened.account(uid: "alice").entitlements.map(\.productId) == ["com.myrecipes.premium.monthly"])
    }
}
