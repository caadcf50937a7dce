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

/// Reads beside writes, and reads from a hot standby.
@Suite struct PostgresReadTests {
    /// A read transaction held open (a long query, forensics) never delays a write group, and sees
    /// its own snapshot throughout.
    @Test func aQueryNeverBlocksAWriter() throws {
        let (ledger, directory) = try Self.ledger()
        defer { directory.remove() }
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        let t = Fixtures.start
        _ = submit.respond(to: Fixtures.line(["type": "purchase", "account": "ann", "transaction": Fixtures.transaction("1001", at: t), "at": t]))
        let reading = DispatchSemaphore(value: 0)
        let written = DispatchSemaphore(value: 0)
        let seen = ManualClock(0)
        Thread.detachNewThread {
            _ = try? ledger.store.read { reader in
                let before = try reader.head().sequence  // the snapshot is taken here
                reading.signal()
                _ = written.wait(timeout: .now() + 30)
                seen.now = try reader.head().sequence == before ? Int64(before) : -1
            }
            reading.signal()
        }
        reading.wait()
        let started = Date()
        _ = submit.respond(to: Fixtures.line(["type": "purchase", "account": "bob", "transaction": Fixtures.transaction("1002", at: t), "at": t]))
        #expect(Date().timeIntervalSince(started) < 20, "the write waited for the open read")
        #expect(try ledger.store.head().sequence == 2)
        written.signal()
        reading.wait()
        #expect(seen.now == 1, "the open read kept its snapshot")
    }

    /// Queries through a hot standby (streaming replication) see what the primary committed once it
    /// has replayed it; writes through the same options decide on the primary; the standby alone
    /// cannot be written.
    @Test func queriesReadFromAHotStandby() throws {
        let primary = try PostgresCluster.standalone()
        defer { primary.stopAndRemove() }
        let directory = TemporaryDirectory("ledger-pg-standby")
        defer { directory.remove() }
        let url = try primary.newDatabase()
        let keys = directory.path("keys")
        let ledger = try Ledger.initialize(
            at: .postgres(try PostgresURL(url), keys: keys, readOnly: nil), configuration: Fixtures.configuration, clock: Fixtures.clock)
        let t = Fixtures.start
        let submit = SubmitProtocol(ledger: ledger, trustDecoded: true)
        _ = submit.respond(to: Fixtures.line(["type": "purchase", "account": "ann", "transaction": Fixtures.transaction("1001", at: t), "at": t]))
        let standby = try primary.standby()
        defer { standby.stopAndRemove() }
        let database = String(url.split(separator: "?")[0].dropFirst("postgresql:///".count))
        let replica = try PostgresURL(standby.url(database: database))
        let both = try Ledger(opening: .postgres(try PostgresURL(url), keys: keys, readOnly: replica), clock: Fixtures.clock)
        #expect(try both.binding(originalTransactionId: "1001").uid == "ann")
        let answer = Fixtures.object(
            SubmitProtocol(ledger: both, trustDecoded: true).respond(
                to: Fixtures.line(["type": "restore", "account": "bob", "transaction": Fixtures.transaction("1001", at: t + 1), "at": t + 1])))
        #expect(answer["code"] as? String == "permission-denied")
        var replayed = false
        for _ in 0..<200 where !replayed {
            replayed = try both.store.head().sequence == 2
            if !replayed { usleep(50_000) }
        }
        #expect(replayed, "the standby never replayed the second record")
        let verify = try LedgerBinary.run(["verify", "--store", url, "--keys", keys.path, "--read-store", replica.connectionString])
        #expect(verify.json["intact"] as? Bool == true, "\(verify.stdout) \(verify.stderr)")
        let refused = try LedgerBinary.run(
            ["submit", "--trust-decoded", "--store", replica.connectionString, "--keys", keys.path],
            stdin: Fixtures.line(["type": "purchase", "account": "cy", "transaction": Fixtures.transaction("1003", at: t), "at": t]))
        #expect(Fixtures.object(refused.lines.first ?? "")["code"] as? String == "internal", "\(refused.stdout) \(refused.stderr)")
    }

    static func ledger() throws -> (Ledger, TemporaryDirectory) {
        let directory = TemporaryDirectory("ledger-pg")
        let ledger = try Ledger.initialize(
            at: try TestStore.postgres.location(in: directory), configuration: Fixtures.configuration, clock: Fixtures.clock)
        return (ledger, directory)
    }
}
