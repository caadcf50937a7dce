import Foundation
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// The `ledger` binary on a PostgreSQL store: every command through a URL, concurrent writers on
/// one chain head, a writer killed mid-transaction, answers lost after commit, a server restart
/// under load, migration both ways, a read-only URL.
@Suite struct PostgresOperationTests {
    let t = Fixtures.start
    let day = Fixtures.day

    init() {
        // A writer killed while its standard input is being written must not take the tests with it.
        signal(SIGPIPE, SIG_IGN)
    }

    /// A purchase line of `uid` for lineage `otid`.
    func purchase(_ uid: String, _ otid: String, at: Int64? = nil, id: String? = nil) -> String {
        var object: [String: Any] = ["type": "purchase", "account": uid, "transaction": Fixtures.transaction(otid, at: at ?? t), "at": at ?? t]
        if let id { object["id"] = id }
        return Fixtures.line(object)
    }

    /// `ledger init` on a new database of `cluster`; returns the store options.
    func initStore(_ directory: TemporaryDirectory, cluster: PostgresCluster? = nil) throws -> [String] {
        let url = try (cluster ?? PostgresCluster.shared()).newDatabase()
        let options = ["--store", url, "--keys", directory.path("keys").path]
        let result = try LedgerBinary.run(["init", "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"] + options)
        #expect(result.status == 0, "\(result.stderr)")
        return options
    }

    @Test func everyCommandTakesAURLAndNoneRepeatsItsPassword() throws {
        let directory = TemporaryDirectory("ledger-pg-cli")
        defer { directory.remove() }
        let cluster = try PostgresCluster.shared()
        let database = try cluster.newDatabase()
        // A URL with a password, from the environment (trust authentication ignores it).
        let secret = "pw-Xq7-not-in-any-output"
        let url = database.replacingOccurrences(of: "postgresql:///", with: "postgresql://postgres:\(secret)@/")
        let environment = ["LEDGER_STORE": url, "LEDGER_KEYS": directory.path("keys").path]
        var outputs: [String] = []
        func run(_ arguments: [String], stdin: String = "", status: Int32 = 0) throws -> LedgerBinary.Result {
            let result = try LedgerBinary.run(arguments, stdin: stdin, environment: environment)
            #expect(result.status == status, "\(arguments): \(result.stderr)")
            outputs += [result.stdout, result.stderr]
            return result
        }
        // Customer identifiers long enough that the privacy check at the end cannot match by chance (Fixtures.privacyNeedleMinimumBytes).
        let (alice, bob, carol) = ("uid-pg-alice-7f3a9c", "uid-pg-bob-7f3a9c", "uid-pg-carol-7f3a9c")
        let (first, second) = ("2000000000001001", "2000000000001002")
        let initialized = try run(["init", "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"])
        #expect(initialized.json["store"] as? String == url.replacingOccurrences(of: secret, with: "***"))
        let lines = [purchase(alice, first), purchase(bob, first, at: t + 1), purchase(carol, second)].joined(separator: "\n")
        let submitted = try run(["submit", "--trust-decoded"], stdin: lines)
        #expect(submitted.lines.compactMap { Fixtures.object($0)["decision"] as? String } == ["granted", "denied", "granted"])
        #expect(try run(["binding", "--original-transaction-id", first]).json["account"] as? String == alice)
        #expect((try run(["account", "--uid", carol]).json["entitlements"] as? [Any])?.count == 1)
        #expect(try run(["log"]).lines.count == 3)
        #expect(try run(["verify"]).json["intact"] as? Bool == true)
        #expect(try run(["rebuild", "--check"]).json["repaired"] as? Bool == false)
        let stats = try run(["stats"]).json
        #expect(stats["records"] as? Int == 3)
        // The same database names as LMDB's (verify sizes its passes by the read models' count).
        let databases = stats["databases"] as? [String: [String: Int]] ?? [:]
        #expect(databases["read-models"]?["entries"] == 2)
        #expect(databases["log"]?["entries"] == 3)
        #expect(databases["identities"]?["entries"] == 6)
        let checkpoint = try run(["checkpoint", "--out", directory.path("cp").path, "--public-key-out", directory.path("pub.pem").path])
        #expect(try run(["verify", "--checkpoint", directory.path("cp").path]).json["intact"] as? Bool == true, "\(checkpoint.stdout)")
        _ = try run(["replay", "--original-transaction-id", first])
        _ = try run(["explain", "--uid", bob, "--original-transaction-id", first])
        _ = try run(["dispute", "export", "--original-transaction-id", first, "--out", directory.path("bundle.json").path])
        // Errors name the store without its password.
        let wrongDatabase = try LedgerBinary.run(
            ["binding", "--original-transaction-id", first],
            environment: ["LEDGER_STORE": url.replacingOccurrences(of: "ledger_test_", with: "missing_"), "LEDGER_KEYS": directory.path("keys").path])
        #expect(wrongDatabase.status == 3)
        #expect(wrongDatabase.stderr.contains("***"), "\(wrongDatabase.stderr)")
        outputs += [wrongDatabase.stdout, wrongDatabase.stderr]
        let compact = try run(["compact"], status: 2)
        #expect(compact.stderr.contains("VACUUM"))
        for output in outputs { #expect(!output.contains(secret), "the password was printed: \(output)") }
        // Nothing of the customers' identifiers in any table, column or server log line.
        let dump = try cluster.dump(database: url)
        for needle in [alice, bob, carol, first, second] {
            #expect(!Fixtures.decodingByteaLiterals(dump).contains(Data(needle.utf8)), "\(needle) is in the database")
            #expect(!cluster.serverLog().contains(needle))
        }
    }

    @Test func fourWritersRacingForTheSameNewLineagesLeaveExactlyOneOwnerEach() throws {
        let directory = TemporaryDirectory("ledger-pg-race")
        defer { directory.remove() }
        let options = try initStore(directory)
        let lineages = (0..<150).map { String(5_000_000 + $0) }
        var generator = SeededGenerator(state: 15)
        let writers = try (0..<4).map { writer -> LedgerBinary.Running in
            let lines = lineages.shuffled(using: &generator).map { purchase("writer\(writer)-\($0)", $0, id: $0) }
            return try LedgerBinary.start(["submit", "--trust-decoded"] + options, stdinData: Data(lines.joined(separator: "\n").utf8))
        }
        var granted: [String: [String]] = [:]
        for (writer, running) in writers.enumerated() {
            let result = running.wait()
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.lines.count == lineages.count)
            for line in result.lines {
                let answer = Fixtures.object(line)
                if answer["decision"] as? String == "granted", let id = answer["id"] as? String {
                    granted[id, default: []].append("writer\(writer)-\(id)")
                }
            }
        }
        #expect(granted.count == lineages.count)
        for otid in lineages {
            #expect(granted[otid]?.count == 1, "lineage \(otid) granted \(granted[otid] ?? [])")
            let binding = try LedgerBinary.run(["binding", "--original-transaction-id", otid] + options)
            #expect(binding.json["account"] as? String == granted[otid]?.first)
        }
        let verify = try LedgerBinary.run(["verify"] + options)
        #expect(verify.json["intact"] as? Bool == true, "\(verify.stdout)")
        #expect(verify.json["verifiedRecords"] as? Int == 4 * lineages.count)
    }

    /// Answers lost with a killed writer (mid-transaction or after a commit) are settled by sending
    /// the same lines again: the idempotency entries answer what was committed, nothing is doubled.
    @Test func aWriterKilledMidTransactionLeavesNothingAndTheRetryDoublesNothing() throws {
        let directory = TemporaryDirectory("ledger-pg-kill")
        defer { directory.remove() }
        let cluster = try PostgresCluster.shared()
        let options = try initStore(directory)
        let database = String(options[1].split(separator: "?")[0].dropFirst("postgresql:///".count))
        // Every 1,000th record's insert lingers 150 ms, its transaction written and not committed,
        // so the poll below finds the writer there however fast the rest of the run goes (in CI it
        // once finished before the first poll).
        try cluster.sql(
            """
            CREATE FUNCTION linger() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN PERFORM pg_sleep(0.15); RETURN NULL; END$$;
            CREATE TRIGGER linger AFTER INSERT ON ledger_log FOR EACH ROW WHEN (NEW.sequence % 1000 = 0) EXECUTE FUNCTION linger();
            """, database: database)
        let lines = (0..<12_000).map { purchase("uid-\($0)", String(6_000_000 + $0), id: "\($0)") }.joined(separator: "\n")
        for _ in 0..<2 {
            let running = try LedgerBinary.start(["submit", "--trust-decoded"] + options, stdinData: Data(lines.utf8))
            // Wait until the writer's transaction has written rows and not committed, then kill it.
            var inside = false
            for _ in 0..<2_000 where !inside {
                let active = try cluster.sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = '\(database)' AND application_name = 'ledger' AND backend_xid IS NOT NULL AND state <> 'idle'"
                )
                inside = active.trimmingCharacters(in: .whitespacesAndNewlines) != "0"
                if !inside { usleep(2_000) }
            }
            #expect(inside, "the writer was never seen inside a transaction")
            kill(running.processIdentifier, SIGKILL)
            _ = running.wait()
            let verify = try LedgerBinary.run(["verify"] + options)
            #expect(verify.json["intact"] as? Bool == true, "\(verify.stdout)")
        }
        let before = try LedgerBinary.run(["stats"] + options).json["records"] as? Int ?? -1
        #expect(before < 12_000)
        let finished = try LedgerBinary.run(["submit", "--trust-decoded"] + options, stdin: lines)
        #expect(finished.status == 0)
        let answers = finished.lines.map(Fixtures.object)
        #expect(answers.count == 12_000)
        #expect(answers.filter { $0["duplicate"] as? Bool == true }.count == before)
        #expect(answers.allSatisfy { $0["decision"] as? String == "granted" })
        let after = try LedgerBinary.run(["verify"] + options)
        #expect(after.json["intact"] as? Bool == true)
        #expect(after.json["verifiedRecords"] as? Int == 12_000)
    }

    @Test func aServerRestartUnderLoadLosesNoAnsweredDecisionAndDoublesNone() throws {
        let cluster = try PostgresCluster.standalone()
        defer { cluster.stopAndRemove() }
        let directory = TemporaryDirectory("ledger-pg-restart")
        defer { directory.remove() }
        let options = try initStore(directory, cluster: cluster)
        let writers = try (0..<2).map { writer in
            let lines = (0..<5_000).map { purchase("w\(writer)-\($0)", String(7_000_000 + writer * 100_000 + $0), id: "\(writer)-\($0)") }
            // Small reads of standard input: many commits, some before, during and after the restart.
            return try LedgerBinary.start(
                ["submit", "--trust-decoded"] + options, stdinData: Data(lines.joined(separator: "\n").utf8),
                // A window well beyond the restart, however loaded the machine: the test is about what
                // is lost or doubled, not how fast the server comes back (60 s was exceeded at load 12).
                environment: ["LEDGER_RECONNECT_WINDOW": "300"])
        }
        usleep(300_000)
        try cluster.stop(mode: "fast")
        usleep(1_000_000)
        try cluster.start()
        var answered: [String: Int] = [:]
        for running in writers {
            let result = running.wait()
            #expect(result.status == 0, "\(result.stderr)")
            for answer in result.lines.map(Fixtures.object) {
                if let id = answer["id"] as? String, let seq = answer["seq"] as? Int { answered[id] = seq }
            }
        }
        #expect(answered.count == 10_000)
        #expect(Set(answered.values).count == 10_000, "two answers name the same record")
        let verify = try LedgerBinary.run(["verify"] + options)
        #expect(verify.json["intact"] as? Bool == true, "\(verify.stdout)")
        #expect(verify.json["verifiedRecords"] as? Int == 10_000)
    }

    @Test func migrateCopiesBothWaysVerifiedAndRefusesANonEmptyTarget() throws {
        let directory = TemporaryDirectory("ledger-pg-migrate")
        defer { directory.remove() }
        let source = directory.path("source").path
        #expect(try LedgerBinary.run(["init", "--store", source, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"]).status == 0)
        let lines = [
            purchase("alice", "1001"), purchase("bob", "1001", at: t + 1), purchase("carol", "1002"),
            Fixtures.line(["type": "delete-account", "account": "carol", "at": t + day]), purchase("dave", "1003", at: t + 2 * day),
        ]
        #expect(try LedgerBinary.run(["submit", "--trust-decoded", "--store", source], stdin: lines.joined(separator: "\n")).status == 0)
        let url = try PostgresCluster.shared().newDatabase()
        let toPostgres = try LedgerBinary.run(["migrate", "--from", source, "--to", url, "--keys", directory.path("keys").path])
        #expect(toPostgres.status == 0, "\(toPostgres.stderr)")
        #expect(toPostgres.json["intact"] as? Bool == true)
        #expect(toPostgres.json["records"] as? Int == 5)
        #expect(toPostgres.json["identities"] as? Int == 3)
        let pg = ["--store", url, "--keys", directory.path("keys").path]
        let again = try LedgerBinary.run(["migrate", "--from", source, "--to", url, "--keys", directory.path("keys").path])
        #expect(again.status == 3)
        #expect(again.stderr.contains("already holds a ledger"), "\(again.stderr)")
        let back = directory.path("back").path
        let toDirectory = try LedgerBinary.run(["migrate", "--from", url, "--to", back, "--keys", directory.path("keys").path])
        #expect(toDirectory.status == 0, "\(toDirectory.stderr)")
        #expect(toDirectory.json["root"] as? String == toPostgres.json["root"] as? String)
        #expect(toDirectory.json["headHash"] as? String == toPostgres.json["headHash"] as? String)
        // The same records, answers and signed checkpoints from all three.
        let stores = [["--store", source], pg, ["--store", back]]
        let logs = try stores.map { try LedgerBinary.run(["log"] + $0).stdout }
        #expect(logs[0] == logs[1] && logs[1] == logs[2])
        let accounts = try stores.map { try LedgerBinary.run(["account", "--uid", "dave"] + $0).stdout }
        #expect(accounts[0] == accounts[1] && accounts[1] == accounts[2])
        let roots = try stores.map { try LedgerBinary.run(["checkpoint"] + $0).lines.dropFirst().first ?? "" }
        #expect(roots[0] == roots[1] && roots[1] == roots[2], "\(roots)")
        #expect(try LedgerBinary.run(["account", "--uid", "carol"] + pg).json["known"] as? Bool == false)
    }

    @Test func backupOfAPostgresStoreIsOneSnapshotThatRestoresIntoADirectory() throws {
        let directory = TemporaryDirectory("ledger-pg-backup")
        defer { directory.remove() }
        let options = try initStore(directory)
        let keys = directory.path("keys").path
        let first =
            (0..<200).map { purchase("uid-pg-backup-\($0)-7f3a9c", String(2_000_000_000_300_000 + $0)) }
            + [Fixtures.line(["type": "delete-account", "account": "uid-pg-backup-7-7f3a9c", "at": t + day])]
        let answered = try LedgerBinary.run(["submit", "--trust-decoded"] + options, stdin: first.joined(separator: "\n"))
        #expect(answered.lines.count == 201, "\(answered.stderr)")
        // A writer keeps deciding while the backup reads its snapshot.
        let later = (0..<3_000).map { purchase("uid-pg-later-\($0)-7f3a9c", String(2_000_000_000_400_000 + $0), at: t + 2 * day) }
        let writer = try LedgerBinary.start(["submit", "--trust-decoded"] + options, stdin: later.joined(separator: "\n"))
        let out = directory.path("backup").path
        let backup = try LedgerBinary.run(["backup", "--out", out] + options)
        #expect(writer.wait().status == 0)
        #expect(backup.status == 0, "\(backup.stderr)")
        #expect(backup.json["intact"] as? Bool == true, "\(backup.stdout)")
        let head = backup.json["headSeq"] as? Int ?? 0
        #expect(head >= 201 && head <= 3_201, "\(backup.stdout)")
        #expect(backup.json["store"] as? String == options[1])
        let files = try FileManager.default.contentsOfDirectory(atPath: out).sorted()
        #expect(files == ["checkpoint.txt", "data.mdb", "ledger-signing.pub"], "no key files, no staging left: \(files)")
        for name in files {
            #expect(try FileManager.default.attributesOfItem(atPath: "\(out)/\(name)")[.posixPermissions] as? Int == 0o600, "\(name)")
        }
        #expect(try FileManager.default.attributesOfItem(atPath: out)[.posixPermissions] as? Int == 0o700)
        // Restored into a directory with the key directory: the same records as the database's first `head`.
        let restored = directory.path("restored").path
        let restore = try LedgerBinary.run(["restore", "--from", out, "--to", restored, "--keys", keys])
        #expect(restore.status == 0, "\(restore.stderr)")
        #expect(restore.json["headHash"] as? String == backup.json["headHash"] as? String)
        let verify = try LedgerBinary.run(["verify", "--store", restored, "--keys", keys])
        #expect(verify.json["intact"] as? Bool == true, "\(verify.stdout)")
        let fromBackup = try LedgerBinary.run(["log", "--store", restored, "--keys", keys]).lines
        let fromDatabase = try LedgerBinary.run(["log"] + options).lines
        #expect(fromBackup.count == head && Array(fromDatabase.prefix(head)) == fromBackup)
        for uid in ["uid-pg-backup-3-7f3a9c", "uid-pg-backup-7-7f3a9c"] {
            let account = try LedgerBinary.run(["account", "--uid", uid, "--store", restored, "--keys", keys]).stdout
            #expect(account == (try LedgerBinary.run(["account", "--uid", uid] + options).stdout), "\(uid)")
        }
        // A directory holding a backup is never overwritten.
        let again = try LedgerBinary.run(["backup", "--out", out] + options)
        #expect(again.status == 3 && again.stderr.contains("already holds a ledger"), "\(again.stderr)")
    }

    @Test func queriesReadFromTheReadOnlyURLAndWritesGoToThePrimary() throws {
        let directory = TemporaryDirectory("ledger-pg-replica")
        defer { directory.remove() }
        let primary = try initStore(directory)
        #expect(try LedgerBinary.run(["submit", "--trust-decoded"] + primary, stdin: purchase("alice", "1001")).status == 0)
        // A stand-in for a lagging replica: a copy taken now.
        let copy = try PostgresCluster.shared().newDatabase()
        let migrated = try LedgerBinary.run(["migrate", "--from", primary[1], "--to", copy, "--keys", directory.path("keys").path])
        #expect(migrated.status == 0, "\(migrated.stderr)")
        #expect(try LedgerBinary.run(["submit", "--trust-decoded"] + primary, stdin: purchase("bob", "1002")).status == 0)
        let withReplica = primary + ["--read-store", copy]
        #expect(try LedgerBinary.run(["binding", "--original-transaction-id", "1002"] + withReplica).json["state"] as? String == "unbound")
        #expect(try LedgerBinary.run(["binding", "--original-transaction-id", "1002"] + primary).json["account"] as? String == "bob")
        // A write through the same options decides on the primary's state.
        let denied = try LedgerBinary.run(["submit", "--trust-decoded"] + withReplica, stdin: purchase("carol", "1002", at: t + 1))
        #expect(Fixtures.object(denied.lines.first ?? "")["decision"] as? String == "denied")
    }
}
