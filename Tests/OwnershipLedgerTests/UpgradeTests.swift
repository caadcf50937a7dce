import Foundation
import LedgerCore
import LedgerCrypto
import LedgerStore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// `ledger upgrade` of the committed format-1 fixture (purchases, renewals, notifications, a refund
/// and its reversal, a denied restore, Family Sharing, a deletion, a two-person support transfer with
/// a refused approval, and retried submissions).
@Suite struct UpgradeTests {
    let directory = TemporaryDirectory("ledger-upgrade")

    /// Every file of a store directory, by name.
    func files(_ store: URL) throws -> [String: Data] {
        var out: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: store.path) {
            out[name] = try Data(contentsOf: store.appendingPathComponent(name))
        }
        return out
    }

    @Test func anUpgradedStoreAnswersAsFormatOneDidAndLeavesTheOldStoreUnchanged() throws {
        defer { directory.remove() }
        let old = directory.path("old")
        let new = directory.path("new")
        try FormatOneFixture.copyStore(to: old)
        let before = try files(old)

        let result = try LedgerBinary.run(["upgrade", "--from", old.path, "--to", new.path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty, "no progress when stderr is not a terminal")
        let report = result.json
        #expect(report["formatOneRecords"] as? Int == Int(FormatOneFixture.records))
        #expect(report["events"] as? Int == Int(FormatOneFixture.records) + 1, "every format-1 event, and the upgrade's own")
        #expect(report["records"] as? Int == 23, "one record per command, and record 1")
        #expect(report["identities"] as? Int == 5, "the live accounts: carol's identity was erased by her deletion")
        #expect(report["supersededAttempts"] as? Int == 0)
        #expect(report["verified"] as? Bool == true)
        var after = try files(old)
        #expect(after.removeValue(forKey: "ledger.lock") == Data(), "the lock file is created empty to be locked, nothing else")
        #expect(after == before, "no file of the old store was written, and no lock.mdb created")

        // Record 1 names the old log, which anyone holding the old store can recompute.
        let ledger = try Ledger(opening: new)
        let first = try #require(try ledger.store.records(from: 1, limit: 1).first)
        guard case .storeUpgraded(let upgraded)? = first.events.first else {
            Issue.record("record 1 is \(first.events)")
            return
        }
        #expect(upgraded.fromFormat == 1 && upgraded.records == FormatOneFixture.records)
        #expect(upgraded.headHash.hex == report["headHash"] as? String)
        #expect(upgraded.merkleRoot.hex == report["merkleRoot"] as? String)
        // Format 1's recordedAt was the caller's time: it becomes `at`, and recordedAt never goes back.
        let records = try ledger.store.records()
        #expect(zip(records, records.dropFirst()).allSatisfy { $0.recordedAt <= $1.recordedAt })
        #expect(records.contains { $0.at < $0.recordedAt }, "the fixture's out-of-order times are kept in `at`")
        #expect(records.map(\.attempt).filter { $0 > 0 } == [1], "the retried renewal keeps its attempt number")
        #expect(records.contains { $0.events.contains { if case .transferApplied = $0 { true } else { false } } })

        // The same answers as format 1 gave (recorded by make-fixture.sh with the format-1 binary).
        let answers = String(decoding: try FormatOneFixture.file("answers.jsonl"), as: UTF8.self).split(separator: "\n")
        #expect(answers.count == 10)
        for line in answers {
            let expected = Fixtures.object(String(line))
            let arguments = try #require(expected["arguments"] as? [String])
            let answer = try LedgerBinary.run(arguments + ["--store", new.path])
            #expect(answer.status == 0, "\(arguments): \(answer.stderr)")
            #expect(NSDictionary(dictionary: answer.json) == NSDictionary(dictionary: expected["answer"] as? [String: Any] ?? [:]), "\(arguments)")
        }

        // verify, audit (the support steps' signatures over format-1 plan bytes), and the format-1 checkpoint.
        let verify = try LedgerBinary.run(["verify", "--store", new.path])
        #expect(verify.status == 0 && verify.json["intact"] as? Bool == true, "\(verify.stdout)")
        // Format 1 kept no apply signature and needed one administrator: noted, not violations.
        let notes = (verify.json["formatOneHistory"] as? [[String: Any]] ?? []).compactMap { $0["message"] as? String }
        #expect(notes.count == 3 && notes.last?.contains("no apply signature") == true, "\(notes)")
        let audit = try LedgerBinary.run(["audit", "--store", new.path])
        #expect(audit.status == 0, "\(audit.stdout) \(audit.stderr)")
        let entries = audit.lines.map(Fixtures.object)
        #expect(entries.first { $0["kind"] as? String == "transfer-applied" }?["signature"] as? String == "unsigned-format-1")
        #expect(entries.filter { $0["coSignature"] as? String == "not-required-format-1" }.count == 2)
        // The format-1 checkpoint covers the copied records through the old store, which it leaves unchanged.
        let checkpoint = try LedgerBinary.run([
            "verify", "--store", new.path, "--checkpoint", FormatOneFixture.directory.appendingPathComponent("checkpoint.txt").path,
            "--public-key", FormatOneFixture.directory.appendingPathComponent("signing.pub").path, "--format-one-store", old.path,
        ])
        #expect(checkpoint.status == 0, "\(checkpoint.stdout)")
        let checked = checkpoint.json["checkpoint"] as? [String: Any]
        #expect(checked?["formatOneOrigin"] as? Bool == true && checked?["verified"] as? Bool == true)
        #expect(checked?["formatOneCopies"] as? String == "match")
        var afterVerify = try files(old)
        afterVerify.removeValue(forKey: "ledger.lock")
        #expect(afterVerify == before, "verify --format-one-store writes no file of the old store")
        // The new store signs with the old key: its checkpoints have the old origin.
        let published = try Ed25519PublicKey(pem: String(decoding: try FormatOneFixture.file("signing.pub"), as: UTF8.self))
        #expect(try ledger.signer().publicKey.rawRepresentation == published.rawRepresentation)
    }

    /// Commands decided before the upgrade are recognised after it: a resubmitted line is the same
    /// command (its next attempt, as the decision changed since), never a new one.
    @Test func commandsDecidedBeforeTheUpgradeKeepTheirIdentity() throws {
        defer { directory.remove() }
        let old = directory.path("old")
        let new = directory.path("new")
        try FormatOneFixture.copyStore(to: old)
        _ = try FormatOneUpgrade.upgrade(from: old, to: new, clock: { 1_800_000_000_000 })
        let ledger = try Ledger(opening: new, clock: { 1_800_000_000_000 })
        let day: Int64 = 86_400_000
        let start: Int64 = 1_793_491_200_000
        let payload = try Fixtures.payload(Fixtures.transaction("2000000000000003", transactionId: "2000000000000301", at: start + 31 * day))
        let renewal = try ledger.submit(.transaction(.renewal, uid: "dave", payload, .trustedDecoded), at: start + 33 * day)
        let records = try ledger.store.records()
        let last = try #require(records.last)
        let earlier = records.filter { $0.command == last.command }
        #expect(renewal.sequence == last.sequence)
        #expect(earlier.map(\.attempt) == [0, 1, 2], "the renewal's third attempt, numbered on from format 1's")
        #expect(try ledger.account(uid: "carol").known == false, "a deletion before the upgrade stays a deletion")
        #expect(try ledger.account(uid: "carol2").known == true)
    }

    @Test func anUpgradeIsRefusedWhenItCannotBeDoneSafely() throws {
        defer { directory.remove() }
        let old = directory.path("old")
        try FormatOneFixture.copyStore(to: old)
        // The same directory, a format-3 store, an existing destination.
        #expect(throws: LedgerStoreError.self) { try FormatOneUpgrade.upgrade(from: old, to: old, clock: { 0 }) }
        let upgraded = directory.path("upgraded")
        _ = try FormatOneUpgrade.upgrade(from: old, to: upgraded, clock: { 0 })
        let again = try LedgerBinary.run(["upgrade", "--from", old.path, "--to", upgraded.path])
        #expect(again.status == 3 && again.stderr.contains("already holds a ledger"), "\(again.stderr)")
        let twice = try LedgerBinary.run(["upgrade", "--from", upgraded.path, "--to", directory.path("third").path])
        #expect(twice.status == 3 && twice.stderr.contains("already a format-3 store"), "\(twice.stderr)")
        #expect(try LedgerBinary.run(["upgrade", "--from", old.path]).status == 2)

        // The old store in use by another process.
        let lockFile = open(old.appendingPathComponent("ledger.lock").path, O_RDWR | O_CREAT, 0o600)
        #expect(flock(lockFile, LOCK_SH) == 0)
        let busy = try LedgerBinary.run(["upgrade", "--from", old.path, "--to", directory.path("busy").path])
        #expect(busy.status == 3 && busy.stderr.contains("in use by another process"), "\(busy.stderr)")
        close(lockFile)
        #expect(!FileManager.default.fileExists(atPath: directory.path("busy").appendingPathComponent("data.mdb").path))
    }

    /// A format-1 record changed in place: the old chain does not verify, so nothing is created.
    @Test func aBrokenFormatOneChainIsRefusedBeforeAnythingIsWritten() throws {
        defer { directory.remove() }
        let old = directory.path("old")
        try FormatOneFixture.copyStore(to: old)
        let dataFile = old.appendingPathComponent("data.mdb")
        var bytes = try Data(contentsOf: dataFile)
        let product = Data("com.myrecipes.premium.monthly".utf8)
        let found = try #require(bytes.range(of: product))
        bytes[found.lowerBound + 14] = UInt8(ascii: "P")
        try bytes.write(to: dataFile)
        let new = directory.path("new")
        let result = try LedgerBinary.run(["upgrade", "--from", old.path, "--to", new.path])
        #expect(result.status == 3, "\(result.stdout)")
        #expect(result.stderr.contains("the old chain does not verify; nothing was upgraded"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: new.path))
    }
}
