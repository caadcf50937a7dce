import Foundation
import LedgerStore
import LedgerTestSupport
import Testing

/// `ledger upgrade` and `ledger restore` killed partway (`LEDGER_TEST_KILL_AT`, the test-only kill
/// points of docs/testing.md: the process sends itself SIGKILL at the named step): nothing they leave
/// opens as a ledger, every command pointed at the leftover names it and the command to run again, and
/// a rerun completes with the identities intact (docs/operations.md, "`ledger upgrade`").
@Suite struct InterruptedCopyTests {
    let directory = TemporaryDirectory("ledger-interrupted")

    func exists(_ url: URL, _ name: String) -> Bool { FileManager.default.fileExists(atPath: url.appendingPathComponent(name).path) }

    /// The fixture's recorded answers (`binding`, `account` of its users, some only known through the
    /// identity vault) asked of `store`.
    func expectFormatOneAnswers(_ store: URL, _ comment: Comment) throws {
        let answers = String(decoding: try FormatOneFixture.file("answers.jsonl"), as: UTF8.self).split(separator: "\n")
        for line in answers {
            let expected = Fixtures.object(String(line))
            let arguments = try #require(expected["arguments"] as? [String])
            let answer = try LedgerBinary.run(arguments + ["--store", store.path])
            #expect(answer.status == 0, "\(comment) \(arguments): \(answer.stderr)")
            #expect(
                NSDictionary(dictionary: answer.json) == NSDictionary(dictionary: expected["answer"] as? [String: Any] ?? [:]),
                "\(comment) \(arguments)")
        }
    }

    /// Each step of the upgrade before the new store is moved into place: what is left is no ledger,
    /// `verify`, `account` and the rerun name it, and after removing it the rerun gives the whole store.
    @Test(arguments: ["upgrade-staged", "upgrade-created", "upgrade-log", "upgrade-vault", "upgrade-rebuilt", "upgrade-keys-moved"])
    func anUpgradeKilledBeforeItsStoreIsInPlaceLeavesNoLedger(step: String) throws {
        defer { directory.remove() }
        let old = directory.path("old")
        let new = directory.path("new")
        try FormatOneFixture.copyStore(to: old)
        let killed = try LedgerBinary.run(["upgrade", "--from", old.path, "--to", new.path], environment: [KillPoint.variable: step])
        #expect(killed.status == SIGKILL, "\(step): the upgrade was not killed at its step: \(killed.status) \(killed.stderr)")
        #expect(!exists(new, "data.mdb"), "\(step): NEW holds a data.mdb")
        let staging = new.appendingPathComponent("upgrade.partial")

        // NEW is no ledger, and says why.
        for arguments in [["verify"], ["account", "--uid", "alice"], ["stats"]] {
            let refused = try LedgerBinary.run(arguments + ["--store", new.path])
            #expect(refused.status == 3, "\(step) \(arguments): \(refused.status) \(refused.stdout)")
            #expect(
                refused.stderr.contains("interrupted `ledger upgrade`") && refused.stderr.contains(staging.path)
                    && !refused.stderr.contains("run init"),
                "\(step) \(arguments): \(refused.stderr)")
        }
        // The staging directory is no ledger either.
        let inside = try LedgerBinary.run(["verify", "--store", staging.path])
        #expect(inside.status == 3, "\(step): \(inside.stdout)")
        #expect(inside.stderr.contains("unfinished copy") && inside.stderr.contains("ledger upgrade"), "\(step): \(inside.stderr)")

        // The rerun names the leftover, and does nothing.
        let rerun = try LedgerBinary.run(["upgrade", "--from", old.path, "--to", new.path])
        #expect(rerun.status == 3, "\(step): \(rerun.stdout)")
        #expect(
            rerun.stderr.contains("interrupted `ledger upgrade` left \(staging.path)") && rerun.stderr.contains("remove it"),
            "\(step): \(rerun.stderr)")
        #expect(!exists(new, "data.mdb"))

        // As the message says: remove it and run the upgrade again.
        try FileManager.default.removeItem(at: staging)
        let again = try LedgerBinary.run(["upgrade", "--from", old.path, "--to", new.path])
        #expect(again.status == 0, "\(step): \(again.stderr)")
        #expect(again.json["identities"] as? Int == 5 && again.json["verified"] as? Bool == true, "\(step): \(again.stdout)")
        #expect(!exists(new, "upgrade.partial") && !exists(new, "lock.mdb.partial"))
        let verify = try LedgerBinary.run(["verify", "--store", new.path])
        #expect(verify.status == 0 && verify.json["intact"] as? Bool == true, "\(step): \(verify.stdout) \(verify.stderr)")
        let stats = try LedgerBinary.run(["stats", "--store", new.path])
        #expect(stats.stdout.contains(#""identities":{"#), "\(stats.stdout)")
        try expectFormatOneAnswers(new, "\(step)")
    }

    /// Killed after the new store was moved into place, while removing the (then empty) staging
    /// directory: the store is whole; commands say so and name what to remove.
    @Test func anUpgradeKilledWhileCleaningUpNamesWhatToRemove() throws {
        defer { directory.remove() }
        let old = directory.path("old")
        let new = directory.path("new")
        try FormatOneFixture.copyStore(to: old)
        let killed = try LedgerBinary.run(
            ["upgrade", "--from", old.path, "--to", new.path], environment: [KillPoint.variable: "upgrade-moved"])
        #expect(killed.status == SIGKILL, "\(killed.status) \(killed.stderr)")
        let staging = new.appendingPathComponent("upgrade.partial")
        let refused = try LedgerBinary.run(["verify", "--store", new.path])
        #expect(refused.status == 3)
        #expect(
            refused.stderr.contains("after moving the new store into place") && refused.stderr.contains("remove \(staging.path)"),
            "\(refused.stderr)")
        try FileManager.default.removeItem(at: staging)
        let verify = try LedgerBinary.run(["verify", "--store", new.path])
        #expect(verify.status == 0 && verify.json["intact"] as? Bool == true, "\(verify.stdout) \(verify.stderr)")
        try expectFormatOneAnswers(new, "cleanup")
    }

    /// With the keys in their own directory (--keys), a killed upgrade leaves the key directory as it
    /// was, and the rerun completes.
    @Test func anUpgradeWithAKeyDirectoryKilledLeavesTheKeyDirectoryAlone() throws {
        defer { directory.remove() }
        let old = directory.path("old")
        let new = directory.path("new")
        let keys = directory.path("keys")
        try FormatOneFixture.copyStore(to: old)
        let killed = try LedgerBinary.run(
            ["upgrade", "--from", old.path, "--to", new.path, "--keys", keys.path], environment: [KillPoint.variable: "upgrade-log"])
        #expect(killed.status == SIGKILL, "\(killed.status) \(killed.stderr)")
        #expect(!exists(keys, "ledger.key") && !exists(keys, "ledger.key.partial"), "the keys are installed only with the store")
        let refused = try LedgerBinary.run(["verify", "--store", new.path, "--keys", keys.path])
        #expect(refused.status == 3 && refused.stderr.contains("interrupted `ledger upgrade`"), "\(refused.stderr)")
        try FileManager.default.removeItem(at: new.appendingPathComponent("upgrade.partial"))
        let again = try LedgerBinary.run(["upgrade", "--from", old.path, "--to", new.path, "--keys", keys.path])
        #expect(again.status == 0 && again.json["identities"] as? Int == 5, "\(again.stderr)")
        #expect(!exists(new, "ledger.key"))
        #expect(try LedgerBinary.run(["verify", "--store", new.path, "--keys", keys.path]).status == 0)
    }

    /// `upgrade` writes a store directory: a PostgreSQL URL is refused (it was taken for a relative
    /// directory named `postgres:`), naming `migrate`.
    @Test func anUpgradeIntoPostgreSQLIsRefusedNamingMigrate() throws {
        defer { directory.remove() }
        let old = directory.path("old")
        try FormatOneFixture.copyStore(to: old)
        let work = directory.path("work")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        let refused = try LedgerBinary.run(
            ["upgrade", "--from", old.path, "--to", "postgres://ledger@localhost/ledger"], currentDirectory: work)
        #expect(refused.status == 2, "\(refused.status) \(refused.stdout)")
        #expect(refused.stderr.contains("ledger migrate"), "\(refused.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: work.path).isEmpty, "nothing was created")
    }

    /// A restore killed after installing the backup's keys, before moving data.mdb in: the target is
    /// described as an interrupted restore (not init), and the rerun names `restore.partial`.
    @Test func aKilledRestoreIsNamedAsARestore() throws {
        defer { directory.remove() }
        let store = directory.path("store").path
        let created = try LedgerBinary.run(["init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"])
        #expect(created.status == 0, "\(created.stderr)")
        let line = Fixtures.line([
            "type": "purchase", "account": "alice", "transaction": Fixtures.transaction("5000000001", at: Fixtures.start), "at": Fixtures.start,
        ])
        #expect(try LedgerBinary.run(["submit", "--trust-decoded", "--store", store], stdin: line + "\n").status == 0)
        let backup = directory.path("backup").path
        let taken = try LedgerBinary.run(["backup", "--store", store, "--out", backup, "--include-keys"])
        #expect(taken.status == 0, "\(taken.stderr)")

        let target = directory.path("target")
        let killed = try LedgerBinary.run(
            ["restore", "--from", backup, "--to", target.path], environment: [KillPoint.variable: "restore-keys"])
        #expect(killed.status == SIGKILL, "\(killed.status) \(killed.stderr)")
        let staging = target.appendingPathComponent("restore.partial")
        let refused = try LedgerBinary.run(["verify", "--store", target.path])
        #expect(refused.status == 3)
        #expect(
            refused.stderr.contains("interrupted `ledger restore`") && refused.stderr.contains(staging.path)
                && !refused.stderr.contains("init"),
            "\(refused.stderr)")
        let rerun = try LedgerBinary.run(["restore", "--from", backup, "--to", target.path])
        #expect(rerun.status == 3)
        #expect(
            rerun.stderr.contains("interrupted `ledger restore` left \(staging.path)") && rerun.stderr.contains("remove it"),
            "\(rerun.stderr)")
        try FileManager.default.removeItem(at: staging)
        let again = try LedgerBinary.run(["restore", "--from", backup, "--to", target.path])
        #expect(again.status == 0, "\(again.stderr)")
        let account = try LedgerBinary.run(["account", "--uid", "alice", "--store", target.path])
        #expect(account.json["known"] as? Bool == true, "\(account.stdout) \(account.stderr)")
    }
}
