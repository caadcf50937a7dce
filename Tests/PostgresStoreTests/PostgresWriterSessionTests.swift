import Foundation
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Testing

@testable import LedgerStore

/// The writer's sessions: their transactions' isolation whatever the server's default, and what ends
/// a session whose writer is gone (docs/scale-out.md, "A lost writer").
@Suite struct PostgresWriterSessionTests {
    let t = Fixtures.start

    func purchase(_ uid: String, _ otid: String) -> String {
        Fixtures.line(["type": "purchase", "account": uid, "transaction": Fixtures.transaction(otid, at: t), "at": t])
    }

    final class Outcome: @unchecked Sendable { var error: (any Error)? }

    /// A new ledger in its own database of the test cluster: its location, URL, ledger and engine.
    struct Fresh {
        let location: StoreLocation
        let url: PostgresURL
        let ledger: Ledger
        let engine: PostgresEngine
        /// The database's name, for `ALTER DATABASE` and triggers.
        var database: String? { url.connectionString.split(separator: "?").first?.split(separator: "/").last.map(String.init) }

        init(in directory: TemporaryDirectory) throws {
            location = try TestStore.postgres.location(in: directory)
            guard case .postgres(let url, _, _) = location else { throw POSIXError(.EINVAL) }
            self.url = url
            ledger = try Ledger.initialize(at: location, configuration: Fixtures.configuration, clock: Fixtures.clock)
            engine = try #require(ledger.store.engine as? PostgresEngine)
        }
    }

    /// With `default_transaction_isolation = 'serializable'` on the database, a group whose head
    /// lock waits for another writer's group still decides (its transaction is `READ COMMITTED`:
    /// under `REPEATABLE READ` or `SERIALIZABLE` the lock failed with 40001), and so do two writers
    /// racing for the same lineages.
    @Test func writeGroupsReadCommittedWhateverTheDatabaseDefault() throws {
        let directory = TemporaryDirectory("ledger-pg-serializable")
        defer { directory.remove() }
        let fresh = try Fresh(in: directory)
        let (location, first, engine) = (fresh.location, fresh.ledger, fresh.engine)
        let database = try #require(fresh.database)
        try PostgresCluster.shared().sql("ALTER DATABASE \(database) SET default_transaction_isolation = 'serializable'")
        engine.closeConnections()  // new sessions take the database's setting
        let second = try Ledger(opening: location, clock: Fixtures.clock)
        let other = try #require(second.store.engine as? PostgresEngine)
        let isolation = try other.withWriter { try $0.query("SHOW default_transaction_isolation").bytes(0, 0) }
        #expect(isolation == Array("serializable".utf8))

        // The other writer holds the head's lock (its group's generation taken) while this group asks for it.
        let holding = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        let outcome = Outcome()
        var pending = true
        engine.afterSnapshotReads = {
            guard pending else { return }
            pending = false
            Thread.detachNewThread {
                do {
                    try other.write { reader, _ in
                        _ = try reader.head()
                        holding.signal()
                        usleep(300_000)
                    }
                } catch {
                    outcome.error = error
                    holding.signal()
                }
                done.signal()
            }
            holding.wait()
        }
        let answer = Fixtures.object(SubmitProtocol(ledger: first, trustDecoded: true).respond(to: purchase("alice", "7001")))
        #expect(answer["decision"] as? String == "granted", "\(answer)")
        done.wait()
        #expect(outcome.error == nil, "\(String(describing: outcome.error))")

        // Two writers racing for the same new lineages: every line decided, one owner each.
        let submits = [SubmitProtocol(ledger: first, trustDecoded: true), SubmitProtocol(ledger: second, trustDecoded: true)]
        let answers = Answers()
        DispatchQueue.concurrentPerform(iterations: 2) { writer in
            for n in 0..<25 {
                let decided = Fixtures.object(submits[writer].respond(to: purchase("racer-\(writer)", "\(7100 + n)")))
                answers.add(decided["decision"] as? String ?? "\(decided)")
            }
        }
        #expect(answers.all.filter { $0 == "granted" }.count == 25, "\(answers.all)")
        #expect(answers.all.filter { $0 == "denied" }.count == 25, "\(answers.all)")
        #expect(try first.store.replay().isIntact)
    }

    final class Answers: @unchecked Sendable {
        private let lock = NSLock()
        private var answers: [String] = []
        func add(_ answer: String) { lock.withLock { answers.append(answer) } }
        var all: [String] { lock.withLock { answers } }
    }

    /// The writer's session ends a transaction left idle (a writer host lost mid-group holds the
    /// head's lock only that long), and every connection probes its peer (TCP keepalives, a user
    /// timeout); what the URL sets wins.
    @Test func writerSessionsEndIdleTransactionsAndProbeTheirPeer() throws {
        let directory = TemporaryDirectory("ledger-pg-keepalive")
        defer { directory.remove() }
        let fresh = try Fresh(in: directory)
        let (url, ledger, engine) = (fresh.url, fresh.ledger, fresh.engine)
        func show(_ engine: PostgresEngine, _ setting: String) throws -> String? {
            try engine.withWriter { try $0.query("SHOW \(setting)").bytes(0, 0).map { String(decoding: $0, as: UTF8.self) } }
        }
        #expect(try show(engine, "idle_in_transaction_session_timeout") == "1min")
        let options = try engine.withWriter { connection in
            ["keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout"].map { connection.option($0) }
        }
        #expect(options == ["1", "30", "10", "3", "60000"])

        let given = try PostgresEngine(
            url: PostgresURL(url.connectionString + "&keepalives_idle=7&tcp_user_timeout=5000&options=-c%20idle_in_transaction_session_timeout%3D5s"))
        #expect(try show(given, "idle_in_transaction_session_timeout") == "5s")
        let givenOptions = try given.withWriter { connection in
            ["keepalives", "keepalives_idle", "keepalives_count", "tcp_user_timeout"].map { connection.option($0) }
        }
        #expect(givenOptions == ["1", "7", "3", "5000"])

        // A group left idle longer than the timeout: the server ends its session (and frees the
        // lock), and the writer runs the group again on a new one.
        let short = try PostgresEngine(url: PostgresURL(url.connectionString + "&options=-c%20idle_in_transaction_session_timeout%3D1s"))
        var attempts = 0
        try short.write { reader, _ in
            _ = try reader.head()
            attempts += 1
            if attempts == 1 { usleep(2_000_000) }
        }
        #expect(attempts == 2)
        #expect(
            Fixtures.object(SubmitProtocol(ledger: ledger, trustDecoded: true).respond(to: purchase("ann", "7201")))["decision"] as? String
                == "granted")
    }

    /// A group's connection drops right after its `COMMIT` was sent, while the server is still
    /// committing it (a deferred trigger sleeps a second in the commit, as a synchronous standby
    /// would keep it waiting; the server finishes the commit without its client). The writer waits
    /// for that transaction to end before reading whether it committed: a support step (whose
    /// command key depends on the head) is done once and reported done, not refused as a second
    /// attempt, and a submit is answered once, not as a duplicate of itself; one record each.
    @Test func aCommitStillRunningWhenTheConnectionDropsIsResolvedOnce() throws {
        let directory = TemporaryDirectory("ledger-pg-lost-commit")
        defer { directory.remove() }
        let fresh = try Fresh(in: directory)
        let (ledger, engine) = (fresh.ledger, fresh.engine)
        let database = try #require(fresh.database)
        let cluster = try PostgresCluster.shared()
        try cluster.sql(
            """
            CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN PERFORM pg_sleep(1); RETURN NULL; END$$;
            CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON ledger_log DEFERRABLE INITIALLY DEFERRED
                FOR EACH ROW EXECUTE FUNCTION slow_commit();
            """, database: database)
        // Each group's first COMMIT is cut off: the client's socket shut down once it is sent.
        var commitsSent = 0
        engine.afterCommitSent = { connection in
            commitsSent += 1
            if commitsSent == 1 { connection.dropSocket() }
        }
        let start = try ledger.store.head().sequence

        let root = try Ed25519PrivateKey.generate()
        try ledger.enrollFirstAdministrator("root", publicKey: root.publicKey)
        #expect(commitsSent == 1, "the group was not run again")
        #expect(try ledger.store.head().sequence == start + 1)

        commitsSent = 0
        let answer = Fixtures.object(SubmitProtocol(ledger: ledger, trustDecoded: true).respond(to: purchase("alice", "7301")))
        #expect(answer["decision"] as? String == "granted", "\(answer)")
        #expect(answer["duplicate"] == nil, "\(answer)")
        #expect(commitsSent == 1, "the group was not run again")
        #expect(try ledger.store.head().sequence == start + 2)

        engine.afterCommitSent = nil
        try cluster.sql("DROP TRIGGER slow_commit ON ledger_log; DROP FUNCTION slow_commit()", database: database)
        #expect(try ledger.binding(originalTransactionId: "7301").uid == "alice")
        #expect(try ledger.store.replay().isIntact)
    }
}
