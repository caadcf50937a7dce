import Foundation
import LedgerTestSupport
import OwnershipLedger
import Testing

@testable import LedgerStore

/// A write group's first reads run in a snapshot before it takes the head's lock, and are checked
/// under the lock against `ledger_changes` (``ChangeLog``): here another writer commits between the
/// two, deterministically, through the engine's hook.
@Suite struct PostgresSnapshotReadTests {
    let t = Fixtures.start

    func purchase(_ uid: String, _ otid: String) -> String {
        Fixtures.line(["type": "purchase", "account": uid, "transaction": Fixtures.transaction(otid, at: t), "at": t])
    }

    /// Two ledgers on one new database (two engines, two connections: two writers), and the first's engine.
    func writers() throws -> (first: SubmitProtocol, second: SubmitProtocol, engine: PostgresEngine, ledger: Ledger, directory: TemporaryDirectory) {
        // (The hook runs inside the first engine's write: it reaches the server through the second ledger's engine.)
        let directory = TemporaryDirectory("ledger-pg-snapshot")
        let location = try TestStore.postgres.location(in: directory)
        let first = try Ledger.initialize(at: location, configuration: Fixtures.configuration, clock: Fixtures.clock)
        let second = try Ledger(opening: location, clock: Fixtures.clock)
        let engine = try #require(first.store.engine as? PostgresEngine)
        return (SubmitProtocol(ledger: first, trustDecoded: true), SubmitProtocol(ledger: second, trustDecoded: true), engine, first, directory)
    }

    /// Runs `body` once, in the next write group of `engine`, between its snapshot reads and its lock.
    func once(_ engine: PostgresEngine, _ body: @escaping () throws -> Void) {
        var pending = true
        engine.afterSnapshotReads = {
            guard pending else { return }
            pending = false
            try body()
        }
    }

    /// The lineage a group read as new in its snapshot is bought by another writer before the
    /// group locks: the group reads it again under the lock and denies the second owner; a lineage
    /// the other writer did not touch is answered from the snapshot.
    @Test func aKeyChangedBeforeTheLockIsReadAgain() throws {
        let (first, second, engine, ledger, directory) = try writers()
        defer { directory.remove() }
        once(engine) { #expect(Fixtures.object(second.respond(to: purchase("bob", "2001")))["decision"] as? String == "granted") }
        let answer = Fixtures.object(first.respond(to: purchase("alice", "2001")))
        #expect(answer["code"] as? String == "permission-denied", "\(answer)")
        #expect(try ledger.binding(originalTransactionId: "2001").uid == "bob")
        // What the snapshot read and the other writer changed: the lineage's state (and nothing is dropped whole).
        #expect(engine.staleKeysReadAgain >= 1)
        #expect(engine.snapshotsDropped == 0)

        let stale = engine.staleKeysReadAgain
        once(engine) { _ = second.respond(to: purchase("bob", "2002")) }
        #expect(Fixtures.object(first.respond(to: purchase("alice", "2003")))["decision"] as? String == "granted")
        #expect(engine.staleKeysReadAgain == stale, "keys no other writer wrote are answered from the snapshot")

        // The same command committed by the other writer in between: answered by its idempotency entry, not decided twice.
        let line = purchase("carol", "2004")
        once(engine) { #expect(Fixtures.object(second.respond(to: line))["decision"] as? String == "granted") }
        let before = try ledger.store.head().sequence
        #expect(Fixtures.object(first.respond(to: line))["decision"] as? String == "granted")
        #expect(try ledger.store.head().sequence == before + 1, "one record: the other writer's")
        #expect(try ledger.binding(originalTransactionId: "2004").uid == "carol")
        let report = try ledger.store.replay()
        #expect(report.isIntact, "\(report)")
    }

    /// A UID's pseudonym issued, then erased, by the other writer between a group's snapshot and its
    /// lock: the group reads the vault key again under the lock, so it joins the account just made
    /// (not a second pseudonym for one UID), and after the deletion makes a new account that owns
    /// nothing of the deleted one's.
    @Test func aVaultKeyChangedBeforeTheLockIsReadAgain() throws {
        let (first, second, engine, ledger, directory) = try writers()
        defer { directory.remove() }
        once(engine) { #expect(Fixtures.object(second.respond(to: purchase("dave", "6001")))["decision"] as? String == "granted") }
        let joined = Fixtures.object(first.respond(to: purchase("dave", "6002")))
        #expect(joined["decision"] as? String == "granted", "\(joined)")
        #expect(try ledger.account(uid: "dave").entitlements.count == 2, "one account holds both lineages")
        #expect(engine.staleKeysReadAgain >= 1)

        #expect(Fixtures.object(first.respond(to: purchase("erin", "6003")))["decision"] as? String == "granted")
        once(engine) {
            let deleted = Fixtures.object(second.respond(to: Fixtures.line(["type": "delete-account", "account": "erin", "at": self.t])))
            #expect(deleted["decision"] as? String == "recorded", "\(deleted)")
        }
        let fresh = Fixtures.object(first.respond(to: purchase("erin", "6004")))
        #expect(fresh["decision"] as? String == "granted", "\(fresh)")
        let erin = try ledger.account(uid: "erin")
        #expect(erin.known && erin.entitlements.count == 1, "the new account holds only the new lineage: \(erin)")
        #expect(try ledger.binding(originalTransactionId: "6003").uid == nil, "the deleted account's lineage stays tombstoned")
        #expect(try ledger.store.replay().isIntact)
    }

    /// When the rows after the snapshot are not all there (pruned, or deleted here), or do not
    /// account for every record appended since, the group trusts none of its snapshot and reads
    /// everything again under the lock.
    @Test func aMissingChangeRowDropsTheWholeSnapshot() throws {
        let (first, second, engine, ledger, directory) = try writers()
        defer { directory.remove() }
        let other = try #require(second.ledger.store.engine as? PostgresEngine)
        once(engine) {
            _ = second.respond(to: purchase("bob", "3001"))
            _ = try other.withWriter { try $0.query("DELETE FROM ledger_changes") }
        }
        let answer = Fixtures.object(first.respond(to: purchase("alice", "3001")))
        #expect(answer["code"] as? String == "permission-denied", "\(answer)")
        #expect(try ledger.binding(originalTransactionId: "3001").uid == "bob")
        #expect(engine.snapshotsDropped == 1)
        #expect(engine.staleKeysReadAgain >= 2, "every key of the group read again")

        // A record appended by a writer that keeps no change rows (an older build: it neither bumps
        // the generation nor leaves a row): the head's sequence no longer chains from the snapshot's.
        once(engine) {
            _ = second.respond(to: purchase("bob", "3002"))
            _ = try other.withWriter { connection in
                try connection.query("DELETE FROM ledger_changes WHERE generation = (SELECT generation FROM ledger_head)")
                try connection.query("UPDATE ledger_head SET generation = generation - 1")
            }
        }
        let again = Fixtures.object(first.respond(to: purchase("alice", "3002")))
        #expect(again["code"] as? String == "permission-denied", "\(again)")
        #expect(try ledger.binding(originalTransactionId: "3002").uid == "bob")
        #expect(engine.snapshotsDropped == 2)

        // A row that names no keys ("every key": a group that wrote more than ChangeLog.keyLimit).
        once(engine) {
            _ = second.respond(to: purchase("bob", "3003"))
            _ = try other.withWriter { connection in
                try connection.query("UPDATE ledger_changes SET keys = NULL WHERE generation = (SELECT generation FROM ledger_head)")
            }
        }
        let third = Fixtures.object(first.respond(to: purchase("alice", "3003")))
        #expect(third["code"] as? String == "permission-denied", "\(third)")
        #expect(try ledger.binding(originalTransactionId: "3003").uid == "bob")
        #expect(engine.snapshotsDropped == 3)
        #expect(try ledger.store.replay().isIntact)
    }

    /// What an older build's writer does: lock the head with `SELECT … FOR UPDATE` (no generation bumped,
    /// no change row) and write (a repair's read model, a record). The server refuses every such
    /// write, naming the cause, and nothing of it stays; the current writers keep deciding.
    @Test func aWriterThatTakesNoGenerationIsRefusedByTheServer() throws {
        let (first, second, engine, ledger, directory) = try writers()
        defer { directory.remove() }
        #expect(Fixtures.object(first.respond(to: purchase("ann", "5001")))["decision"] as? String == "granted")
        let other = try #require(second.ledger.store.engine as? PostgresEngine)
        let before = try engine.withWriter { try $0.query("SELECT count(*) FROM ledger_read_models").bytes(0, 0) }
        for write in [
            "DELETE FROM ledger_read_models",
            "INSERT INTO ledger_log VALUES (999999, '\\x00')",
            "UPDATE ledger_meta SET value = value",
            "TRUNCATE ledger_identities",
        ] {
            let refusal = try other.withWriter { connection -> PostgresError? in
                try connection.query("BEGIN")
                defer { _ = try? connection.query("ROLLBACK") }
                _ = try connection.query("SELECT sequence FROM ledger_head FOR UPDATE")
                do {
                    _ = try connection.query(write)
                    return nil
                } catch let error as PostgresError {
                    return error
                }
            }
            let error = try #require(refusal, "\(write) was allowed")
            #expect(error.sqlState == "55000", "\(error)")
            #expect(error.message.contains("did not take the head's write generation"), "\(error)")
            #expect(error.message.contains("older than this store's change log"), "\(error)")
        }
        #expect(try engine.withWriter { try $0.query("SELECT count(*) FROM ledger_read_models").bytes(0, 0) } == before)
        #expect(Fixtures.object(second.respond(to: purchase("bob", "5002")))["decision"] as? String == "granted")
        #expect(Fixtures.object(first.respond(to: purchase("carol", "5001")))["code"] as? String == "permission-denied")
        #expect(try ledger.store.replay().isIntact)
    }

    /// A store made before the write generation (no column, no `ledger_changes`, no guard) gets them
    /// from its first writer, and keeps deciding.
    @Test func aStoreWithoutTheChangeLogGetsItFromItsFirstWriter() throws {
        let directory = TemporaryDirectory("ledger-pg-oldschema")
        defer { directory.remove() }
        let location = try TestStore.postgres.location(in: directory)
        let old = try Ledger.initialize(at: location, configuration: Fixtures.configuration, clock: Fixtures.clock)
        _ = SubmitProtocol(ledger: old, trustDecoded: true).respond(to: purchase("ann", "4001"))
        let oldEngine = try #require(old.store.engine as? PostgresEngine)
        try oldEngine.withWriter { connection in
            try connection.query("DROP TABLE ledger_changes")
            try connection.query("DROP FUNCTION ledger_require_generation() CASCADE")  // and its triggers
            try connection.query("ALTER TABLE ledger_head DROP COLUMN generation, DROP COLUMN writer")
        }
        let reopened = try Ledger(opening: location, clock: Fixtures.clock)
        #expect(try reopened.binding(originalTransactionId: "4001").uid == "ann")
        let answer = Fixtures.object(SubmitProtocol(ledger: reopened, trustDecoded: true).respond(to: purchase("bob", "4002")))
        #expect(answer["decision"] as? String == "granted", "\(answer)")
        let engine = try #require(reopened.store.engine as? PostgresEngine)
        let rows = try engine.withWriter { try $0.query("SELECT generation FROM ledger_changes ORDER BY generation") }
        #expect(rows.count >= 1)
        let guarded = try engine.withWriter { try $0.query("SELECT count(*) FROM pg_trigger WHERE tgname = 'ledger_require_generation'") }
        #expect(try PostgresRowDecoding.int64(guarded.value(0, 0)) == Int64(ChangeLog.guardedTables.count))
        #expect(try reopened.store.replay().isIntact)
    }
}
