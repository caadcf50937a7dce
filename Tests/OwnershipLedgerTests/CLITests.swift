import Foundation
import LedgerCore
import LedgerTestSupport
import OwnershipLedger
import Testing

/// The same contract through the `ledger` binary.
@Suite struct CLITests {
    let directory = TemporaryDirectory("ledger-cli")
    var store: String { directory.path("store").path }
    /// Business times start now: point-in-time queries cut on when the binary recorded (the real clock).
    let t = LedgerTime.now() / 1000 * 1000
    let day = Fixtures.day

    func initStore() throws {
        let result = try LedgerBinary.run(["init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"])
        #expect(result.status == 0, "\(result.stderr)")
    }

    func submit(_ lines: [[String: Any]]) throws -> [[String: Any]] {
        let result = try LedgerBinary.run(
            ["submit", "--trust-decoded", "--store", store], stdin: lines.map(Fixtures.line).joined(separator: "\n") + "\n")
        #expect(result.status == 0, "\(result.stderr)")
        return result.lines.map(Fixtures.object)
    }

    @Test func initThenVerifySucceedOnANewStore() throws {
        defer { directory.remove() }
        try initStore()
        let verify = try LedgerBinary.run(["verify", "--store", store])
        #expect(verify.status == 0)
        #expect(verify.json["intact"] as? Bool == true)
        let again = try LedgerBinary.run(["init", "--store", store, "--bundle-id", "x", "--environment", "Sandbox"])
        #expect(again.status == 3)
        #expect(again.stderr.contains("already holds a ledger"))
    }

    @Test func contractScenariosThroughTheBinary() throws {
        defer { directory.remove() }
        try initStore()
        // UIDs and ids long enough that the privacy check below cannot match the store's random bytes by chance.
        let (alice, bob, carol, erin) = ("uid-cli-alice-7f3a9c", "uid-cli-bob-7f3a9c", "uid-cli-carol-7f3a9c", "uid-cli-erin-7f3a9c")
        let (aliceOTID, carolOTID, erinOTID) = ("2000000000001001", "2000000000002001", "2000000000003001")
        let responses = try submit([
            ["id": "a1", "type": "purchase", "account": alice, "transaction": Fixtures.transaction(aliceOTID, at: t), "at": t],
            ["id": "a2", "type": "restore", "account": alice, "transaction": Fixtures.transaction(aliceOTID, at: t + 60_000), "at": t + 60_000],
            ["id": "b1", "type": "restore", "account": bob, "transaction": Fixtures.transaction(aliceOTID, at: t + 120_000), "at": t + 120_000],
            ["id": "bad", "type": "purchase"],
            ["id": "c1", "type": "purchase", "account": carol, "transaction": Fixtures.transaction(carolOTID, at: t), "at": t],
            ["id": "c2", "type": "delete-account", "account": carol, "at": t + day],
            [
                "id": "n1", "type": "notification",
                "notification": Fixtures.notification(
                    "DID_RENEW", uuid: "u1", transaction: Fixtures.transaction(carolOTID, transactionId: "2000000000002002", at: t + 30 * day),
                    at: t + 30 * day),
            ],
            [
                "id": "f1", "type": "purchase", "account": erin, "transaction": Fixtures.transaction(erinOTID, at: t, ownership: "FAMILY_SHARED"),
                "at": t,
            ],
        ])
        #expect(responses.count == 8)
        #expect(responses.map { $0["id"] as? String } == ["a1", "a2", "b1", "bad", "c1", "c2", "n1", "f1"])
        #expect(
            responses.map { $0["decision"] as? String } == ["granted", "granted", "denied", "invalid", "granted", "recorded", "ignored", "denied"])
        #expect(responses[2]["code"] as? String == "permission-denied")
        #expect(responses[7]["code"] as? String == "family-sharing-unsupported")

        let binding = try LedgerBinary.run(["binding", "--store", store, "--original-transaction-id", aliceOTID])
        #expect(binding.json["state"] as? String == "bound")
        #expect(binding.json["account"] as? String == alice)
        let tombstone = try LedgerBinary.run(["binding", "--store", store, "--original-transaction-id", carolOTID])
        #expect(tombstone.json["state"] as? String == "tombstoned")
        #expect(tombstone.json["account"] is NSNull)
        let aliceAccount = try LedgerBinary.run(["account", "--store", store, "--uid", alice, "--at", LedgerTimeFormat.iso(t + day)])
        let entitlements = aliceAccount.json["entitlements"] as? [[String: Any]] ?? []
        #expect(entitlements.count == 1)
        #expect(entitlements.first?["active"] as? Bool == true)
        let later = try LedgerBinary.run(["account", "--store", store, "--uid", alice, "--at", String(t + 40 * day)])
        #expect((later.json["entitlements"] as? [[String: Any]])?.first?["active"] as? Bool == false)
        let bobAccount = try LedgerBinary.run(["account", "--store", store, "--uid", bob])
        #expect((bobAccount.json["entitlements"] as? [Any])?.isEmpty == true)

        let verify = try LedgerBinary.run(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.stdout)")
        // No UID or Apple transaction id of the scenario is anywhere in the store's files.
        for identifier in [alice, bob, carol, erin, aliceOTID, carolOTID, "2000000000002002", erinOTID] {
            #expect(try !Fixtures.anyFile(in: directory.url, contains: identifier), "\(identifier) is in the store")
        }
    }

    @Test func verifyFailsWithTheSequenceOfATamperedRecord() throws {
        defer { directory.remove() }
        try initStore()
        _ = try submit(
            (0..<6).map { i in
                var transaction = Fixtures.transaction("70\(i)", at: t)
                transaction["productId"] = "product-marker-\(i)"
                return ["type": "purchase", "account": "user\(i)", "transaction": transaction, "at": t]
            })
        // The third purchase is record 3: no hash is kept per record, so the change is located to the
        // smallest subtree of the Merkle tree's edge that holds it, records 1 to 4 of 6.
        let dataFile = directory.path("store/data.mdb")
        var data = try Data(contentsOf: dataFile)
        try Fixtures.flipEveryOccurrence(of: "product-marker-2", in: &data)
        try data.write(to: dataFile)
        let verify = try LedgerBinary.run(["verify", "--store", store])
        #expect(verify.status == 1)
        #expect(verify.json["firstBadSeq"] as? Int == 1, "\(verify.stdout)")
        #expect(verify.json["lastBadSeq"] as? Int == 4, "\(verify.stdout)")
        // The audit trail read from the changed log says it cannot be trusted.
        let audit = try LedgerBinary.run(["audit", "--store", store])
        #expect(audit.status == 1)
        #expect(audit.stderr.contains("hash chain is broken"), "\(audit.stderr)")
    }

    /// LMDB trusts data.mdb's pages (they carry no checksums): a damaged page may stop it with a
    /// signal. With every page damaged in turn, `verify` ends in a result or a store error, never a
    /// crash report or a signal exit, and where LMDB was stopped it says the store is damaged.
    @Test func aDamagedPageIsAStoreErrorNeverACrash() throws {
        defer { directory.remove() }
        try initStore()
        _ = try submit(
            (0..<120).map { i in ["type": "purchase", "account": "user\(i)", "transaction": Fixtures.transaction("80\(i)", at: t), "at": t] })
        let original = try Data(contentsOf: directory.path("store/data.mdb"))
        let copy = directory.path("damaged")
        var stopped = 0
        for page in 2..<(original.count / 4096) {
            try? FileManager.default.removeItem(at: copy)
            try FileManager.default.copyItem(at: directory.path("store"), to: copy)
            var damaged = original
            damaged.replaceSubrange((page * 4096 + 8)..<(page * 4096 + 16), with: [UInt8](repeating: 0xFF, count: 8))
            try damaged.write(to: copy.appendingPathComponent("data.mdb"))
            let verify = try LedgerBinary.run(["verify", "--store", copy.path])
            #expect([0, 1, 3].contains(verify.status), "page \(page): status \(verify.status) \(verify.stderr)")
            #expect(!verify.stderr.contains("crashed"), "page \(page): \(verify.stderr)")
            if verify.stderr.contains("data.mdb is most likely damaged") { stopped += 1 }
        }
        #expect(stopped > 0, "no damaged page stopped LMDB: the test no longer reaches the signal path")
    }

    /// A closed descriptor would be reused by the next file the ledger opens (its lock file, a new
    /// key file), which would then receive the answers or messages.
    @Test func closedStandardDescriptorsNeverReachTheStoreFiles() throws {
        defer { directory.remove() }
        let shell = URL(fileURLWithPath: "/bin/sh")
        let binary = LedgerBinary.url.path
        // init with standard input and error closed: the key files hold keys only, and the store opens.
        let initialized = try LedgerBinary.runProcess(
            shell, ["-c", "\"$0\" init --store \"$1\" --bundle-id \(Fixtures.bundleId) --environment Sandbox <&- 2>&-", binary, store])
        #expect(initialized.status == 0, "\(initialized.stdout)")
        #expect(try LedgerBinary.run(["verify", "--store", store]).status == 0)
        // submit with standard output closed: exit 3 naming it, nothing appended, the lock file untouched.
        let line = directory.path("line.jsonl")
        try Data((Fixtures.line(["type": "purchase", "account": "cleo", "transaction": Fixtures.transaction("4100", at: t), "at": t]) + "\n").utf8)
            .write(to: line)
        let lockBefore = try? Data(contentsOf: directory.path("store/ledger.lock"))
        let closed = try LedgerBinary.runProcess(
            shell, ["-c", "\"$0\" submit --trust-decoded --store \"$1\" < \"$2\" >&-", binary, store, line.path])
        #expect(closed.status == 3 && closed.stderr.contains("standard output is closed"), "\(closed.status) \(closed.stderr)")
        #expect((try? Data(contentsOf: directory.path("store/ledger.lock"))) == lockBefore)
        let log = try LedgerBinary.run(["log", "--store", store])
        #expect(!log.stdout.contains("transaction-submitted"), "\(log.stdout)")
        // With standard input closed, submit reads no lines and answers none.
        let noInput = try LedgerBinary.runProcess(shell, ["-c", "\"$0\" submit --trust-decoded --store \"$1\" <&-", binary, store])
        #expect(noInput.status == 0 && noInput.stdout.isEmpty, "\(noInput.status) \(noInput.stderr)")
    }

    /// A writer whose clock was a year ahead leaves the log's time a year ahead: the next writer warns,
    /// and `explain` without `--at` still sees what was recorded since (as `binding` does).
    @Test func aLogRecordedAheadOfTheClockIsReportedAndStillExplained() throws {
        defer { directory.remove() }
        try initStore()
        let year: Int64 = 365 * 86_400_000
        let ahead = try Ledger(opening: directory.path("store"), clock: { LedgerTime.now() + year })
        let first = SubmitProtocol(ledger: ahead, trustDecoded: true).respond(
            to: Fixtures.line(["type": "purchase", "account": "nia", "transaction": Fixtures.transaction("4200", at: t), "at": t]))
        #expect(Fixtures.object(first)["decision"] as? String == "granted", "\(first)")
        let result = try LedgerBinary.run(
            ["submit", "--trust-decoded", "--store", store],
            stdin: Fixtures.line(["type": "purchase", "account": "ola", "transaction": Fixtures.transaction("4201", at: t), "at": t]) + "\n")
        #expect(result.status == 0 && Fixtures.object(result.stdout)["decision"] as? String == "granted", "\(result.stdout)")
        #expect(result.stderr.contains("warning: the log's last record was recorded at") && result.stderr.contains("ahead of this machine's clock"))
        let explained = try LedgerBinary.run(["explain", "--uid", "ola", "--original-transaction-id", "4201", "--store", store])
        let explanation = Fixtures.object(explained.stdout)
        #expect(explanation["verdict"] as? String != "never-seen" && explanation["entitled"] as? Bool == true, "\(explained.stdout)")
        // A clock in step with the log: no warning.
        let other = directory.path("store-2").path
        #expect(try LedgerBinary.run(["init", "--store", other, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox"]).status == 0)
        let quiet = try LedgerBinary.run(
            ["submit", "--trust-decoded", "--store", other],
            stdin: Fixtures.line(["type": "purchase", "account": "ola", "transaction": Fixtures.transaction("4201", at: t), "at": t]) + "\n")
        #expect(quiet.status == 0 && quiet.stderr.isEmpty, "\(quiet.stderr)")
    }

    /// An upgrade through the binary: the new tier takes effect at once, the upgraded-away
    /// transaction grants nothing, and `ledger log` shows both facts (the grant's period, the flag).
    @Test func anUpgradeThroughTheBinaryTakesEffectAndTheLogShowsWhy() throws {
        defer { directory.remove() }
        try initStore()
        var yearly = Fixtures.transaction("4300", at: t, days: 365)
        yearly["productId"] = "com.myrecipes.basic.yearly"
        var premium = Fixtures.transaction("4300", transactionId: "4301", at: t + 4 * day)
        premium["productId"] = "com.myrecipes.premium.monthly"
        var upgradedAway = yearly
        upgradedAway["isUpgraded"] = true
        upgradedAway["signedDate"] = t + 5 * day
        let answers = try submit([
            ["type": "purchase", "account": "una", "transaction": yearly, "at": t],
            ["type": "purchase", "account": "una", "transaction": premium, "at": t + 4 * day],
            ["type": "restore", "account": "una", "transaction": upgradedAway, "at": t + 5 * day],
        ])
        #expect(answers.map { $0["decision"] as? String } == ["granted", "granted", "recorded"])
        #expect(answers[2]["code"] as? String == "upgraded", "\(answers[2])")
        let entitlement = (answers[1]["entitlement"] as? [String: Any]) ?? [:]
        #expect(entitlement["productId"] as? String == "com.myrecipes.premium.monthly", "\(answers[1])")
        #expect(entitlement["expiresAt"] as? String == LedgerTime.format(t + 34 * day))
        let account = try LedgerBinary.run(["account", "--uid", "una", "--store", store])
        #expect(account.stdout.contains("com.myrecipes.premium.monthly") && !account.stdout.contains("basic.yearly"), "\(account.stdout)")
        let log = try LedgerBinary.run(["log", "--store", store]).stdout
        #expect(log.contains(#""purchasedAt":"\#(LedgerTime.format(t + 4 * day))""#), "\(log)")
        #expect(log.contains(#""isUpgraded":true"#), "\(log)")
        #expect(try LedgerBinary.run(["verify", "--store", store]).status == 0)
    }

    @Test func twoProcessesAppendingConcurrentlyLeaveAGaplessVerifiedChain() throws {
        defer { directory.remove() }
        try initStore()
        func lines(_ prefix: String) -> String {
            (0..<150).map { i in
                Fixtures.line([
                    "type": "purchase", "account": "\(prefix)\(i)", "transaction": Fixtures.transaction("\(prefix == "p" ? 1 : 2)\(i)", at: t),
                    "at": t,
                ])
            }.joined(separator: "\n") + "\n"
        }
        let first = try LedgerBinary.start(["submit", "--trust-decoded", "--store", store], stdin: lines("p"))
        let second = try LedgerBinary.start(["submit", "--trust-decoded", "--store", store], stdin: lines("q"))
        let a = first.wait()
        let b = second.wait()
        #expect(a.status == 0 && b.status == 0, "\(a.stderr) \(b.stderr)")
        #expect((a.lines + b.lines).allSatisfy { Fixtures.object($0)["decision"] as? String == "granted" })
        let stats = try LedgerBinary.run(["stats", "--store", store])
        #expect(stats.json["records"] as? Int == 300)
        let verify = try LedgerBinary.run(["verify", "--store", store])
        #expect(verify.status == 0, "\(verify.stdout)")
        // One record per purchase, holding its fact, effects and decision.
        let log = try LedgerBinary.run(["log", "--store", store])
        #expect(log.lines.count == 300)
        for line in log.lines {
            let events = (Fixtures.object(line)["events"] as? [[String: Any]] ?? []).map { $0["event"] as? String ?? "" }
            #expect(events == ["transaction-submitted", "lineage-bound", "entitlement-granted", "decision-issued"])
        }
        #expect(log.lines.map { Fixtures.object($0)["seq"] as? Int } == (1...300).map { $0 })
    }

    @Test func linesDecidedTogetherSeeEachOtherInOrder() throws {
        defer { directory.remove() }
        try initStore()
        // One write: the retry of line 1 is a duplicate of it, the restore by bob sees alice's binding.
        let purchase: [String: Any] = ["type": "purchase", "account": "alice", "transaction": Fixtures.transaction("11", at: t), "at": t]
        let responses = try submit([
            purchase,
            purchase,
            ["type": "purchase", "account": "x", "transaction": "not an object"],
            ["type": "restore", "account": "bob", "transaction": Fixtures.transaction("11", at: t + 1), "at": t + 1],
        ])
        #expect(responses.map { $0["decision"] as? String } == ["granted", "granted", "invalid", "denied"])
        #expect(responses[1]["duplicate"] as? Bool == true)
        #expect(responses[1]["seq"] as? Int == responses[0]["seq"] as? Int)
        #expect((responses[2]["message"] as? String)?.contains("transaction must be an object") == true)
        #expect(try LedgerBinary.run(["stats", "--store", store]).json["records"] as? Int == 2)
    }

    @Test func logHonoursFromAndLimit() throws {
        defer { directory.remove() }
        try initStore()
        _ = try submit(
            (1...4).map { ["type": "purchase", "account": "a\($0)", "transaction": Fixtures.transaction("\($0)", at: t), "at": t] })
        let log = try LedgerBinary.run(["log", "--store", store, "--from", "2", "--limit", "2"])
        #expect(log.lines.map { Fixtures.object($0)["seq"] as? Int } == [2, 3])
    }

    @Test func keyFileRefusalsThroughTheBinary() throws {
        defer { directory.remove() }
        try initStore()
        chmod(directory.path("store/ledger.key").path, 0o644)
        let open = try LedgerBinary.run(["stats", "--store", store])
        #expect(open.status == 3)
        #expect(open.stderr.contains("chmod 600"))
        try FileManager.default.removeItem(at: directory.path("store/ledger.key"))
        let missing = try LedgerBinary.run(["stats", "--store", store])
        #expect(missing.status == 3)
        #expect(missing.stderr.contains("missing"))
    }

    /// `bench history --commit-lines` changes how the lines are grouped into commits, not what is
    /// decided: the same records whatever the group; it reports the submit rate beside the decided
    /// rate, per chunk and last over first. A group of no line is a usage error.
    @Test func benchHistoryDecidesTheSameRecordsWhateverItsCommitSize() throws {
        defer { directory.remove() }
        let lines = (0..<9).map { i in
            Fixtures.line(["type": "purchase", "account": "bench-uid-\(i % 4)", "transaction": Fixtures.transaction("77\(i)", at: t), "at": t])
        }
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: directory.path("bench.jsonl"))
        var records: [Int] = []
        for commitLines in ["1000", "2"] {
            let result = try LedgerBinary.run([
                "bench", "history", "--lines", directory.path("bench.jsonl").path, "--chunks", "3", "--samples", "2", "--commit-lines", commitLines,
                "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox", "--dir", directory.path("bench-\(commitLines)").path,
            ])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.json["linesPerCommit"] as? Int == Int(commitLines))
            #expect((result.json["decidedLinesPerSecondByChunk"] as? [Int])?.count == 3)
            #expect((result.json["submitLinesPerSecondByChunk"] as? [Int])?.count == 3)
            #expect(result.json["submitLastOverFirst"] != nil)
            #expect(result.json["invalidLines"] as? Int == 0)
            records.append(result.json["records"] as? Int ?? -1)
        }
        #expect(records == [9, 9])
        let none = try LedgerBinary.run(["bench", "history", "--lines", directory.path("bench.jsonl").path, "--commit-lines", "0"])
        #expect(none.status == 2)
        #expect(none.stderr.contains("--commit-lines 0"))
    }

    @Test(arguments: ["init", "submit", "binding", "account", "log", "verify", "rebuild", "stats", "inspect-jws", "bench", "demo"])
    func everyCommandHasHelp(command: String) throws {
        let help = try LedgerBinary.run([command, "--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("Usage: ledger \(command)"))
    }

    @Test func unknownCommandsAndOptionsAreUsageErrors() throws {
        let unknown = try LedgerBinary.run(["frobnicate"])
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("unknown command frobnicate"))
        let option = try LedgerBinary.run(["verify", "--frob"])
        #expect(option.status == 2)
        #expect(option.stderr.contains("unknown option --frob"))
        let missing = try LedgerBinary.run(["verify", "--store", directory.path("none").path])
        #expect(missing.status == 3)
        #expect(missing.stderr.contains("ledger init"))
    }

    @Test func rebuildReportsNoDifferencesOnAHealthyStore() throws {
        defer { directory.remove() }
        try initStore()
        _ = try submit([["type": "purchase", "account": "a", "transaction": Fixtures.transaction("1", at: t), "at": t]])
        let rebuild = try LedgerBinary.run(["rebuild", "--store", store])
        #expect(rebuild.status == 0)
        #expect((rebuild.json["differences"] as? [Any])?.isEmpty == true)
        #expect(rebuild.json["records"] as? Int == 1)
        #expect(rebuild.json["events"] as? Int == 4)
    }
}

enum LedgerTimeFormat {
    static func iso(_ ms: Int64) -> String {
        let formatter = ISO8601DateFormatter()
        return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }
}

extension CLITests {
    @Test(arguments: [
        (["submit", "--trust-decoded=false"], "takes no value"),
        (["support", "transfer", "--case", "C", "--apply=no"], "takes no value"),
        (["verify", "--store="], "non-empty value"),
        (["verify", "junk"], "unexpected argument 'junk'"),
        (["init", "mystore", "--bundle-id", "a", "--environment", "Sandbox"], "unexpected argument 'mystore'"),
        (["binding", "--original-transaction-id", "1", "--original-transaction-id", "2"], "more than once"),
        (["inspect-jws"], "expected 1 argument"),
        (["binding", "--original-transaction-id", "abc"], "1 to 20 decimal digits"),
        // A missing value followed by another option does not take that option as its value.
        (["binding", "--original-transaction-id", "--store", "t"], "--original-transaction-id needs a value"),
        (["account", "--uid", "--store", "--store", "t"], "--uid needs a value"),
        (["account", "--store", "--uid=x"], "--store needs a value"),
        (["verify", "--public-key", "k.pub"], "--public-key needs --checkpoint"),
        (["verify", "--format-one-store", "old"], "--format-one-store needs --checkpoint"),
        (["dispute", "export", "--original-transaction-id", "1", "--out", "b.json", "--public-key", "k"], "belongs to `dispute verify`"),
        (["dispute", "verify", "b.json", "--public-key", "k", "--out", "x"], "--out belongs to `dispute export`"),
    ])
    func ambiguousCommandLinesAreUsageErrors(arguments: [String], mentions: String) throws {
        defer { directory.remove() }
        let result = try LedgerBinary.run(arguments + ["--store", store].filter { _ in !arguments.contains { $0.hasPrefix("--store") } })
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains(mentions), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: store))
    }
}

extension CLITests {
    @Test func writingOutputToADirectorySaysWhy() throws {
        defer { directory.remove() }
        try initStore()
        let target = directory.path("adir")
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        for command in [["checkpoint", "--out", target.path], ["signing-key", "--out", target.path]] {
            let result = try LedgerBinary.run(command + ["--store", store])
            #expect(result.status == 2, "\(result.stderr)")
            #expect(result.stderr.contains("cannot write \(target.path): Is a directory (EISDIR)"), "\(result.stderr)")
        }
        // A device that fails the write is a store error, not a usage one.
        let full = try LedgerBinary.run(["checkpoint", "--out", "/dev/full", "--store", store])
        #expect(full.status == 3 && full.stderr.contains("No space left on device") && !full.stderr.contains("--help"), "\(full.stderr)")
        // A regular file is replaced whole: its new content, and no staging file left beside it.
        let checkpoint = directory.path("cp.txt")
        try Data("an earlier checkpoint\n".utf8).write(to: checkpoint)
        #expect(try LedgerBinary.run(["checkpoint", "--out", checkpoint.path, "--store", store]).status == 0)
        #expect(try String(contentsOf: checkpoint, encoding: .utf8).hasPrefix("ownership-ledger/"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).filter { $0.contains(".partial") }.isEmpty)
    }

    @Test func aCheckpointLongerThanTheLogDoesNotBlameARecord() throws {
        defer { directory.remove() }
        try initStore()
        _ = try submit([["type": "purchase", "account": "a", "transaction": Fixtures.transaction("1", at: t), "at": t]])
        #expect(try LedgerBinary.run(["signing-key", "--store", store]).status == 0)
        let shorter = directory.path("shorter").path
        try FileManager.default.copyItem(atPath: store, toPath: shorter)
        _ = try submit([["type": "purchase", "account": "b", "transaction": Fixtures.transaction("2", at: t), "at": t]])
        let checkpoint = directory.path("checkpoint.txt").path
        #expect(try LedgerBinary.run(["checkpoint", "--out", checkpoint, "--store", store]).status == 0)
        let verify = try LedgerBinary.run(["verify", "--checkpoint", checkpoint, "--store", shorter])
        #expect(verify.status == 1)
        #expect(verify.json["intact"] as? Bool == false)
        #expect(verify.json["firstBadSeq"] == nil, "\(verify.stdout)")
        let report = verify.json["checkpoint"] as? [String: Any]
        #expect(report?["firstBadSeq"] == nil)
        #expect(
            report?["problems"] as? [String] == [
                "the checkpoint does not match this log: it claims 2 records, the log has 1 "
                    + "(records were removed, or the checkpoint is not of this log)"
            ], "\(verify.stdout)")
    }
}
