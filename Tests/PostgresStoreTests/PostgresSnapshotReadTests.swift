import Foundation
import LedgerCore
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Testing

@testable import LedgerStore

/// A write group's first reads run in a snapshot before it takes the head's lock, and are checked
/// under the lock against `ledger_changes` (``ChangeLog``): here another writer commits between the
/// two, deterministically, through the engine's hook.
@Suite struct PostgresSnapshotReadTests {
    /// The change log's fingerprints are part of the storage format (docs/storage-format.md gives the
    /// functions): known answers, computed from the documented formulas by an independent script,
    /// so that a change of them cannot pass unnoticed.
    @Test func theFingerprintsAreTheDocumentedFunctions() {
        let counting = Key128(high: 0x0001_0203_0405_0607, low: 0x0809_0a0b_0c0d_0e0f)
        let high = Key128(high: 0xf0f1_f2f3_f4f5_f6f7, low: 0xf8f9_fafb_fcfd_feff)
        #expect(ChangeLog.fingerprint(command: counting) == 0x20a1_db62_254d_7570)
        #expect(ChangeLog.fingerprint(vaultKey: counting) == 0xdd2a_0176_0d2c_bb2f)
        #expect(ChangeLog.fingerprint(vaultKey: high) == 0x5b69_6b99_2a34_ed64)
        #expect(ChangeLog.fingerprint(readModel: [UInt8(ascii: "L")] + Array(16..<32)) == 0x5d36_c43b_7785_ec70)
        #expect(ChangeLog.fingerprint(readModel: []) == 0xf9d3_6c3e_21c7_c005)
        #expect(ChangeLog.fingerprint(readModel: Array("Sroot".utf8)) == 0x8a96_b32a_58d8_82fb)
    }

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
            #expect(error.message.contains("older than this store's guard"), "\(error)")
            #expect(error.message.contains("does not set ledger_head.writer"), "\(error)")
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

    /// A store whose sealed UIDs predate the `bound` column (builds up to session 27: every seal
    /// legacy, not bound to its pseudonym) is read as it is, before any writer of this build has
    /// opened it; its first writer adds the column (with the rest of ``ChangeLog/schema``) and seals
    /// the new account bound. Both kinds look up and verify, the legacy one counted.
    @Test func aStoreWithoutTheBoundColumnReadsItsLegacySealsAndItsFirstWriterAddsIt() throws {
        let directory = TemporaryDirectory("ledger-pg-unbound")
        defer { directory.remove() }
        let location = try TestStore.postgres.location(in: directory)
        let old = try Ledger.initialize(at: location, configuration: Fixtures.configuration, clock: Fixtures.clock)
        _ = SubmitProtocol(ledger: old, trustDecoded: true).respond(to: purchase("ann", "4201"))
        let ann = try #require(try old.pseudonym(ofUID: "ann"))
        let legacy = try SealedBox.seal(Array("ann".utf8), key: old.store.keys.sealKey)
        let oldEngine = try #require(old.store.engine as? PostgresEngine)
        try oldEngine.withWriter { connection in
            try connection.query("DROP FUNCTION ledger_require_generation() CASCADE")  // and its triggers
            try connection.query("ALTER TABLE ledger_sealed_uids DROP COLUMN bound")
            try connection.query("UPDATE ledger_sealed_uids SET sealed_uid = $1 WHERE account = $2", [.bytes(legacy), .bytes(ann.bytes)])
        }
        let reopened = try Ledger(opening: location, clock: Fixtures.clock)
        #expect(try reopened.account(uid: "ann").entitlements.count == 1)
        #expect(try reopened.binding(originalTransactionId: "4201").uid == "ann")
        let before = try reopened.store.replay()
        #expect(before.isIntact && before.legacySealedUIDs == 1, "\(before.vaultDifferences)")

        let answer = Fixtures.object(SubmitProtocol(ledger: reopened, trustDecoded: true).respond(to: purchase("bob", "4202")))
        #expect(answer["decision"] as? String == "granted", "\(answer)")
        let engine = try #require(reopened.store.engine as? PostgresEngine)
        let bound = try engine.withWriter { try $0.query("SELECT bound FROM ledger_sealed_uids ORDER BY bound") }
        #expect(bound.count == 2 && bound.bytes(0, 0) == [0] && bound.bytes(1, 0) == [1])
        #expect(try reopened.account(uid: "ann").entitlements.count == 1)
        #expect(try reopened.account(uid: "bob").entitlements.count == 1)
        let after = try reopened.store.replay()
        #expect(after.isIntact && after.legacySealedUIDs == 1, "\(after.vaultDifferences)")
    }

    /// A store with `ledger_changes` whose guard is gone (the function and its triggers dropped, or
    /// upgraded by a build that kept the change log but had no guard, so no `writer` column either)
    /// gets the guard back from its next writer, and an older build's kind of write is refused again.
    @Test func aStoreWithTheChangeLogButNoGuardGetsItFromItsNextWriter() throws {
        let directory = TemporaryDirectory("ledger-pg-noguard")
        defer { directory.remove() }
        let location = try TestStore.postgres.location(in: directory)
        let old = try Ledger.initialize(at: location, configuration: Fixtures.configuration, clock: Fixtures.clock)
        _ = SubmitProtocol(ledger: old, trustDecoded: true).respond(to: purchase("ann", "4101"))
        let oldEngine = try #require(old.store.engine as? PostgresEngine)
        try oldEngine.withWriter { connection in
            try connection.query("DROP FUNCTION ledger_require_generation() CASCADE")  // and its triggers
            try connection.query("ALTER TABLE ledger_head DROP COLUMN writer")
        }
        let reopened = try Ledger(opening: location, clock: Fixtures.clock)
        let answer = Fixtures.object(SubmitProtocol(ledger: reopened, trustDecoded: true).respond(to: purchase("bob", "4102")))
        #expect(answer["decision"] as? String == "granted", "\(answer)")
        let engine = try #require(reopened.store.engine as? PostgresEngine)
        let guarded = try engine.withWriter { try $0.query("SELECT count(*) FROM pg_trigger WHERE tgname = 'ledger_require_generation'") }
        #expect(try PostgresRowDecoding.int64(guarded.value(0, 0)) == Int64(ChangeLog.guardedTables.count))
        let refusal = try oldEngine.withWriter { connection -> PostgresError? in
            try connection.query("BEGIN")
            defer { _ = try? connection.query("ROLLBACK") }
            _ = try connection.query("SELECT sequence FROM ledger_head FOR UPDATE")
            do {
                _ = try connection.query("DELETE FROM ledger_read_models")
                return nil
            } catch let error as PostgresError {
                return error
            }
        }
        #expect(refusal?.sqlState == "55000", "an older build's write was allowed: \(String(describing: refusal))")
        #expect(try reopened.store.replay().isIntact)
    }

    /// A store with the change log and the guard runs no DDL when a new engine first writes: a role
    /// that may only read and write the tables (not own them: docs/scale-out.md's least-privilege
    /// writer) decides, again and again.
    @Test func aWriterThatDoesNotOwnTheTablesWrites() throws {
        let directory = TemporaryDirectory("ledger-pg-writerrole")
        defer { directory.remove() }
        let location = try TestStore.postgres.location(in: directory)
        guard case .postgres(let url, let keys, _) = location else {
            Issue.record("not a PostgreSQL store")
            return
        }
        let owner = try Ledger.initialize(at: location, configuration: Fixtures.configuration, clock: Fixtures.clock)
        #expect(
            Fixtures.object(SubmitProtocol(ledger: owner, trustDecoded: true).respond(to: purchase("ann", "4201")))["decision"] as? String
                == "granted")
        // The guard function of an earlier build (the same check without the head row's xmin).
        let ownerEngine = try #require(owner.store.engine as? PostgresEngine)
        let current = ChangeLog.guardFunctionBody
        let earlier = current.replacingOccurrences(of: " AND xmin::text::bigint = txid_current() % 4294967296", with: "")
        #expect(earlier != current)
        _ = try ownerEngine.withWriter { try $0.query(ChangeLog.guardFunction.replacingOccurrences(of: current, with: earlier)) }
        let cluster = try PostgresCluster.shared()
        let database = try #require(url.connectionString.split(separator: "?").first?.split(separator: "/").last.map(String.init))
        let role = "\(database)_writer"
        try cluster.sql("CREATE ROLE \(role) LOGIN")
        try cluster.sql("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO \(role)", database: database)
        let writerURL = try PostgresURL(url.connectionString.replacingOccurrences(of: "user=postgres", with: "user=\(role)"))
        let writer = try Ledger(opening: .postgres(writerURL, keys: keys, readOnly: nil), clock: Fixtures.clock)
        let submit = SubmitProtocol(ledger: writer, trustDecoded: true)
        for otid in ["4202", "4203"] {
            let answer = Fixtures.object(submit.respond(to: purchase("bob", otid)))
            #expect(answer["decision"] as? String == "granted", "\(answer)")
        }
        #expect(Fixtures.object(submit.respond(to: purchase("bob", "4201")))["code"] as? String == "permission-denied")
        #expect(try writer.binding(originalTransactionId: "4203").uid == "bob")
        // The owner's next engine replaces the earlier function (the role above could not).
        func body() throws -> [UInt8]? {
            try ownerEngine.withWriter { try $0.query("SELECT prosrc FROM pg_proc WHERE proname = 'ledger_require_generation'").bytes(0, 0) }
        }
        #expect(try body() == Array(earlier.utf8))
        let reopened = try Ledger(opening: location, clock: Fixtures.clock)
        #expect(
            Fixtures.object(SubmitProtocol(ledger: reopened, trustDecoded: true).respond(to: purchase("carol", "4204")))["decision"] as? String
                == "granted")
        #expect(try body() == Array(current.utf8))
        #expect(try owner.store.replay().isIntact)
    }

    /// After a logical dump restored into another cluster, `ledger_head.writer` holds a transaction
    /// id of the source cluster, which a transaction of the new one may get: the guard must not let
    /// that transaction write without the lock. Here the head names a transaction id the cluster is
    /// about to give out, and the transaction that gets it writes without taking the lock.
    @Test func aTransactionWhoseIdTheHeadNamesButThatDidNotLockIsRefused() throws {
        let (first, _, engine, ledger, directory) = try writers()
        defer { directory.remove() }
        #expect(Fixtures.object(first.respond(to: purchase("ann", "4301")))["decision"] as? String == "granted")
        func int64(_ connection: PostgresConnection, _ sql: String) throws -> Int64 {
            let rows = try connection.query(sql)
            return try PostgresRowDecoding.int64(rows.value(0, 0))
        }
        var outcome: Result<Void, PostgresError>?
        for _ in 0..<50 where outcome == nil {
            let target = try engine.withWriter { try int64($0, "UPDATE ledger_head SET writer = txid_current() + 20 RETURNING writer") }
            var passed = false
            while !passed && outcome == nil {
                try engine.withWriter { connection in
                    try connection.query("BEGIN")
                    defer { _ = try? connection.query("ROLLBACK") }
                    let id = try int64(connection, "SELECT txid_current()")
                    if id > target { passed = true }  // another test took that id: again
                    guard id == target else { return }
                    do {
                        try connection.query("DELETE FROM ledger_read_models")
                        outcome = .success(())
                    } catch let error as PostgresError {
                        outcome = .failure(error)
                    }
                }
            }
        }
        switch try #require(outcome, "no transaction got the id the head names") {
        case .success: Issue.record("a transaction that did not take the lock wrote, its id being the head's writer")
        case .failure(let error): #expect(error.sqlState == "55000", "\(error)")
        }
        #expect(Fixtures.object(first.respond(to: purchase("bob", "4302")))["decision"] as? String == "granted")
        #expect(try ledger.store.replay().isIntact)
    }

    /// `ChangeLog.changedKeys` trusts the rows only when they are exactly the generations between the
    /// snapshot's and the lock's, each naming its keys, their head sequences chaining from the
    /// snapshot's to the locked one; anything else means "read every key again" (nil).
    @Test func changedKeysAreTrustedOnlyWhenTheRowsChainFromTheSnapshotToTheLock() throws {
        let (_, _, engine, _, directory) = try writers()
        defer { directory.remove() }
        /// Rows (generation, from_sequence, sequence, keys as hex or NULL) as the server returns them.
        func keys(_ rows: [(Int64, Int64, Int64, String?)], snapshot: (Int64, Int64), locked: (Int64, Int64)) throws -> [UInt64]? {
            try engine.withWriter { connection in
                let values = rows.map { "(\($0.0)::bigint, \($0.1)::bigint, \($0.2)::bigint, \($0.3.map { "'\\x\($0)'" } ?? "NULL")::bytea)" }
                let sql =
                    values.isEmpty
                    ? "SELECT 1::bigint, 1::bigint, 1::bigint, NULL::bytea WHERE false"
                    : "SELECT * FROM (VALUES \(values.joined(separator: ", "))) AS t ORDER BY 1"
                let result = try connection.query(sql)
                return try withExtendedLifetime(result) {
                    try ChangeLog.changedKeys(result, snapshot: (snapshot.0, snapshot.1), locked: (locked.0, locked.1))
                }
            }
        }
        let one = "0000000000000001", two = "00000000000000ff" + "8000000000000000"
        // Snapshot at generation 10 (head 100), lock at 13 (head 107): rows 11 and 12 chain 100 → 104 → 107.
        #expect(try keys([(11, 100, 104, one), (12, 104, 107, two)], snapshot: (10, 100), locked: (13, 107)) == [1, 0xff, 1 << 63])
        #expect(try keys([(11, 100, 104, ""), (12, 104, 107, one)], snapshot: (10, 100), locked: (13, 107)) == [1], "a row with no keys wrote none")
        #expect(try keys([], snapshot: (10, 100), locked: (11, 100)) == [], "nothing committed in between")
        // Each way the rows can fail to prove what changed.
        #expect(try keys([(12, 104, 107, two)], snapshot: (10, 100), locked: (13, 107)) == nil, "generation 11 pruned")
        #expect(try keys([(11, 100, 104, one), (12, 104, 107, nil)], snapshot: (10, 100), locked: (13, 107)) == nil, "every key")
        #expect(try keys([(11, 100, 104, one), (13, 104, 107, two)], snapshot: (10, 100), locked: (13, 107)) == nil, "a gap")
        #expect(try keys([(11, 101, 104, one), (12, 104, 107, two)], snapshot: (10, 100), locked: (13, 107)) == nil, "not from the snapshot's head")
        #expect(try keys([(11, 100, 104, one), (12, 105, 107, two)], snapshot: (10, 100), locked: (13, 107)) == nil, "records between two rows")
        #expect(try keys([(11, 100, 104, one), (12, 104, 106, two)], snapshot: (10, 100), locked: (13, 107)) == nil, "records after the last row")
        #expect(try keys([(11, 100, 104, "00000000000001")], snapshot: (10, 100), locked: (12, 104)) == nil, "a torn fingerprint")
        #expect(try keys([], snapshot: (10, 100), locked: (12, 100)) == nil, "a row missing, none returned")
        #expect(try keys([], snapshot: (10, 100), locked: (10, 100)) == nil, "the lock is not after the snapshot")
    }

    /// More groups committed between a group's snapshot and its lock than `ledger_changes` keeps:
    /// the oldest row after the snapshot is pruned, so the group reads everything again (denying
    /// the second buyer); with exactly as many groups as are kept, the rows are all there and only
    /// the keys they name are read again.
    @Test func rowsPrunedPastTheKeptWindowDropTheSnapshot() throws {
        let (first, second, engine, ledger, directory) = try writers()
        defer { directory.remove() }
        let other = try #require(second.ledger.store.engine as? PostgresEngine)
        let kept: Int64 = 4
        engine.keptChanges = kept
        other.keptChanges = kept
        func changes() throws -> (count: Int64, oldest: Int64, head: Int64) {
            try engine.withWriter { connection in
                let rows = try connection.query("SELECT count(*), min(generation), (SELECT generation FROM ledger_head) FROM ledger_changes")
                return try withExtendedLifetime(rows) {
                    (
                        try PostgresRowDecoding.int64(rows.value(0, 0)), try PostgresRowDecoding.int64(rows.value(0, 1)),
                        try PostgresRowDecoding.int64(rows.value(0, 2))
                    )
                }
            }
        }
        // kept + 1 groups, one of them buying the lineage.
        once(engine) {
            #expect(Fixtures.object(second.respond(to: purchase("bob", "8001")))["decision"] as? String == "granted")
            for otid in 8002...(8001 + Int(kept)) { _ = second.respond(to: purchase("bob", "\(otid)")) }
        }
        let answer = Fixtures.object(first.respond(to: purchase("alice", "8001")))
        #expect(answer["code"] as? String == "permission-denied", "\(answer)")
        #expect(engine.snapshotsDropped == 1)
        let pruned = try changes()
        #expect(pruned.count == kept && pruned.oldest == pruned.head - kept + 1, "\(pruned)")

        // Exactly kept groups: nothing missing.
        let stale = engine.staleKeysReadAgain
        once(engine) {
            #expect(Fixtures.object(second.respond(to: purchase("bob", "8101")))["decision"] as? String == "granted")
            for otid in 8102...(8100 + Int(kept)) { _ = second.respond(to: purchase("bob", "\(otid)")) }
        }
        let again = Fixtures.object(first.respond(to: purchase("alice", "8101")))
        #expect(again["code"] as? String == "permission-denied", "\(again)")
        #expect(engine.snapshotsDropped == 1, "no row missing")
        #expect(
            engine.staleKeysReadAgain - stale >= 1 && engine.staleKeysReadAgain - stale <= 2, "the lineage (and the command), not alice's vault key")
        #expect(try ledger.binding(originalTransactionId: "8101").uid == "bob")
        #expect(try ledger.store.replay().isIntact)
    }

    /// A group that takes the generation and then rolls back (its body throws, or its session is
    /// terminated) gives the generation back: the next group takes it, the rows stay contiguous, and
    /// a group whose snapshot predates all of it reads again only what the committed group wrote.
    @Test func aGroupRolledBackAfterTakingTheGenerationLeavesNoRow() throws {
        let (first, second, engine, ledger, directory) = try writers()
        defer { directory.remove() }
        let other = try #require(second.ledger.store.engine as? PostgresEngine)
        struct Refused: Error {}
        func contiguous() throws -> Bool {
            try engine.withWriter { connection in
                let rows = try connection.query(
                    "SELECT count(*) = max(generation) - min(generation) + 1 AND max(generation) = (SELECT generation FROM ledger_head) FROM ledger_changes"
                )
                return rows.bytes(0, 0) == [1]
            }
        }
        once(engine) {
            #expect(throws: Refused.self) {
                try other.write { reader, _ in
                    _ = try reader.head(); throw Refused()
                }
            }
            #expect(Fixtures.object(second.respond(to: purchase("bob", "9001")))["decision"] as? String == "granted")
        }
        let answer = Fixtures.object(first.respond(to: purchase("alice", "9001")))
        #expect(answer["code"] as? String == "permission-denied", "\(answer)")
        #expect(engine.snapshotsDropped == 0)
        #expect(try contiguous())

        // The lock holder's session terminated by the server (then its retry refused).
        let url = engine.url
        once(engine) {
            var attempts = 0
            #expect(throws: Refused.self) {
                try other.write { reader, _ in
                    _ = try reader.head()
                    attempts += 1
                    guard attempts == 1 else { throw Refused() }
                    let killer = try PostgresConnection(url: url)
                    let rows = try killer.query(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction' AND pid <> pg_backend_pid()"
                    )
                    #expect(try PostgresRowDecoding.int64(rows.value(0, 0)) == 1)
                }
            }
            #expect(attempts == 2)
            #expect(Fixtures.object(second.respond(to: purchase("bob", "9002")))["decision"] as? String == "granted")
        }
        let again = Fixtures.object(first.respond(to: purchase("alice", "9002")))
        #expect(again["code"] as? String == "permission-denied", "\(again)")
        #expect(engine.snapshotsDropped == 0)
        #expect(try contiguous())
        #expect(try ledger.store.replay().isIntact)
    }
}
