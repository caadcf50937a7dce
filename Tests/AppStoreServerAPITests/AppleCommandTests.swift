import Foundation
import LedgerTestSupport
import OwnershipLedger
import Testing

/// `ledger apple notifications backfill` and `ledger apple history` through the binary, against the
/// fake App Store server.
@Suite struct AppleCommandTests {
    static let otid = "2000000000000001"

    /// A CLI store (Sandbox, trusting the test root) beside the fixture's, and the API options.
    struct CLI {
        let f: AppleAPIFixture
        var store: String { f.directory.path("cli-store").path }

        init(_ f: AppleAPIFixture) throws {
            self.f = f
            let result = try LedgerBinary.run([
                "init", "--store", store, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox", "--root-certificate",
                AppleAPIFixture.certs.appendingPathComponent("testCA.der").path,
            ])
            #expect(result.status == 0, "\(result.stderr)")
        }

        func api(key: String? = nil) throws -> [String] {
            [
                "--store", store, "--issuer-id", f.server.expected.issuerId, "--key-id", f.server.expected.keyId, "--private-key",
                try key ?? f.keyFile(), "--api-base-url", f.server.baseURL.absoluteString,
            ]
        }

        func submit(_ lines: [[String: Any]]) throws -> [[String: Any]] {
            let result = try LedgerBinary.run(["submit", "--store", store], stdin: lines.map(Fixtures.line).joined(separator: "\n") + "\n")
            #expect(result.status == 0, "\(result.stderr)")
            return result.lines.map(Fixtures.object)
        }

        func backfill(since: Int64, _ extra: [String] = [], key: String? = nil) throws -> LedgerBinary.Result {
            try LedgerBinary.run(["apple", "notifications", "backfill", "--since", LedgerTime.format(since)] + extra + api(key: key))
        }

        func history(_ id: String) throws -> LedgerBinary.Result {
            try LedgerBinary.run(["apple", "history", "--original-transaction-id", id] + api())
        }

        func run(_ arguments: [String]) throws -> LedgerBinary.Result { try LedgerBinary.run(arguments + ["--store", store]) }
    }

    @Test func backfillFillsTheGapThenFindsOnlyDuplicates() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let cli = try CLI(f)
        let bought = f.now - 10 * f.day
        #expect(
            try cli.submit([["type": "purchase", "account": "alice", "signedTransaction": try f.transaction(Self.otid, at: bought), "at": bought]])
                .first?["decision"] as? String == "granted")
        try f.apple("SUBSCRIBED", uuid: "uuid-1", otid: Self.otid, transactionId: Self.otid, at: bought)
        try f.apple("REFUND", uuid: "uuid-2", otid: Self.otid, transactionId: Self.otid, at: f.now - f.day, revokedAt: f.now - f.day)
        let first = try cli.backfill(since: f.now - 20 * f.day)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stderr.isEmpty, "no progress when stderr is not a terminal")
        #expect(first.lines.count == 1)
        #expect(OutputSchemas.shared.problems(first.stdout, against: "apple-backfill.schema.json") == [])
        let summary = first.json
        #expect(summary["fetched"] as? Int == 2 && summary["new"] as? Int == 2 && summary["duplicate"] as? Int == 0)
        #expect(summary["invalid"] as? Int == 0 && summary["pages"] as? Int == 1)
        #expect((summary["byType"] as? [String: [String: Int]])?["REFUND"] == ["new": 1, "duplicate": 0, "invalid": 0])
        #expect(summary["since"] as? String == LedgerTime.format(f.now - 20 * f.day))
        let alice = try cli.run(["account", "--uid", "alice"]).json["entitlements"] as? [[String: Any]]
        #expect(alice?.first?["revoked"] as? Bool == true && alice?.first?["active"] as? Bool == false)

        let second = try cli.backfill(since: f.now - 20 * f.day)
        #expect(second.status == 0)
        #expect(second.json["new"] as? Int == 0 && second.json["duplicate"] as? Int == 2)
        #expect(try cli.run(["verify"]).status == 0)
    }

    @Test func rateLimitAndOutageAreWaitedOut() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let cli = try CLI(f)
        try f.apple("TEST", uuid: "uuid-test", otid: Self.otid, transactionId: Self.otid, at: f.now - f.day)
        f.server.fault(request: 1, .status(429, headers: [("Retry-After", "1")]))
        f.server.fault(request: 2, .status(503))
        let started = Date()
        let result = try cli.backfill(since: f.now - 2 * f.day)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.json["fetched"] as? Int == 1)
        #expect(f.server.requests.count == 3)
        #expect(Date().timeIntervalSince(started) >= 3, "1 s as Retry-After asked, then 2 s of backoff (the second attempt's)")
    }

    @Test func aWrongKeyEndsWithExitCode4AndSaysWhatToCheck() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let cli = try CLI(f)
        let wrong = try f.keyFile(name: "wrong.p8", contents: try AppleAPIFixture.file("testLeaf.key.pem"))
        let result = try cli.backfill(since: f.now - f.day, key: wrong)
        #expect(result.status == 4)
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.contains("error: POST /inApps/v1/notifications/history answered 401: Apple refused the API token"))
        #expect(result.stderr.contains("key id") && result.stderr.contains("issuer id"))
        #expect(f.server.requests.count == 1)
    }

    @Test func unusableOptionsAreUsageErrorsBeforeAnyRequest() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let cli = try CLI(f)
        let open = try f.keyFile(mode: 0o644, name: "open.p8")
        var result = try cli.backfill(since: f.now - f.day, key: open)
        #expect(result.status == 2)
        #expect(result.stderr.contains("has mode 644") && result.stderr.contains("chmod 600 \(open)"))
        result = try cli.backfill(since: f.now - 40 * f.day)
        #expect(result.status == 2)
        #expect(result.stderr.contains("Apple keeps Sandbox notification history for 30 days"))
        result = try cli.backfill(since: f.now - f.day, ["--until", LedgerTime.format(f.now - 2 * f.day)])
        #expect(result.status == 2 && result.stderr.contains("is not before --until"))
        result = try LedgerBinary.run(["apple", "notifications", "backfill"] + cli.api())
        #expect(result.status == 2 && result.stderr.contains("--since is required"))
        result = try LedgerBinary.run(["apple", "notifications", "backfill", "--since", "yesterday"] + cli.api())
        #expect(result.status == 2 && result.stderr.contains("--since yesterday is not a time the ledger accepts"))
        result = try LedgerBinary.run(["apple", "history", "--original-transaction-id", "12ab"] + cli.api())
        #expect(result.status == 2 && result.stderr.contains("1 to 20 decimal digits"))
        result = try LedgerBinary.run(["apple", "history", "--original-transaction-id", Self.otid, "--since", "1"] + cli.api())
        #expect(result.status == 2 && result.stderr.contains("--since is not an option of `apple history`"))
        result = try LedgerBinary.run(["apple", "notifications"] + cli.api())
        #expect(result.status == 2 && result.stderr.contains("give `apple notifications backfill` or `apple history`"))
        result = try LedgerBinary.run(["apple", "history", "--original-transaction-id", Self.otid, "--store", cli.store])
        #expect(result.status == 2 && result.stderr.contains("--private-key is required"))
        let remote = try LedgerBinary.run(
            ["apple", "history", "--original-transaction-id", Self.otid] + cli.api().dropLast(2) + ["--api-base-url", "http://api.example.com"])
        #expect(remote.status == 2 && remote.stderr.contains("plain http only to a loopback address"))
        #expect(f.server.requests.isEmpty)
        #expect(try LedgerBinary.run(["apple", "--help"]).stdout.contains("ledger apple notifications backfill --since TIME"))
    }

    @Test func aBackfillKilledMidwayLosesNothingAndARerunContinues() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let cli = try CLI(f)
        let bought = f.now - 10 * f.day
        _ = try cli.submit([["type": "purchase", "account": "alice", "signedTransaction": try f.transaction(Self.otid, at: bought), "at": bought]])
        for index in 0..<6 {
            try f.apple("DID_CHANGE_RENEWAL_STATUS", uuid: "uuid-\(index)", otid: Self.otid, transactionId: Self.otid, at: bought + Int64(index))
        }
        f.server.fault(request: 3, .stall)
        let running = try LedgerBinary.start(["apple", "notifications", "backfill", "--since", LedgerTime.format(f.now - 20 * f.day)] + cli.api())
        let deadline = Date().addingTimeInterval(60)
        while f.server.requests.count < 3 && Date() < deadline { usleep(20_000) }
        #expect(f.server.requests.count == 3, "the third page was asked for, so the first two were decided")
        kill(running.processIdentifier, SIGKILL)
        #expect(running.wait().status != 0)
        f.server.release()
        #expect(try cli.run(["verify"]).status == 0, "the store is whole after the kill")
        let log = try cli.run(["log"]).lines.map(Fixtures.object)
        #expect(log.filter { ($0["events"] as? [[String: Any]])?.first?["event"] as? String == "notification-received" }.count == 4)

        f.server.clearFaults()
        let rerun = try cli.backfill(since: f.now - 20 * f.day)
        #expect(rerun.status == 0, "\(rerun.stderr)")
        #expect(rerun.json["new"] as? Int == 2 && rerun.json["duplicate"] as? Int == 4 && rerun.json["fetched"] as? Int == 6)
    }

    @Test func historyPrintsEachDecisionAndNeverStoresTheId() throws {
        let f = try AppleAPIFixture()
        defer { f.cleanUp() }
        let cli = try CLI(f)
        let bought = f.now - 40 * f.day
        _ = try cli.submit([
            ["type": "purchase", "account": "alice", "signedTransaction": try f.transaction(Self.otid, at: bought), "at": bought],
            ["type": "delete-account", "account": "alice", "at": bought + f.day],
        ])
        f.server.setHistory(
            Self.otid,
            [
                try f.transaction(Self.otid, at: bought), try f.transaction(Self.otid, id: "2000000000000102", at: bought + 30 * f.day),
                try f.transaction(Self.otid, id: "2000000000000103", at: f.now - f.day),
            ])
        let result = try cli.history(Self.otid)
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.lines.map(Fixtures.object)
        #expect(lines.count == 4)
        for line in result.lines { #expect(OutputSchemas.shared.problems(line, against: "apple-history.schema.json") == [], "\(line)") }
        #expect(lines.prefix(3).map { $0["code"] as? String } == ["tombstoned", "tombstoned", "tombstoned"])
        #expect(lines.prefix(3).map { $0["decision"] as? String } == ["ignored", "ignored", "ignored"])
        #expect(lines.prefix(3).map { $0["transactionId"] as? String } == [Self.otid, "2000000000000102", "2000000000000103"])
        #expect(lines[3] as NSDictionary == ["pages": 2, "fetched": 3, "new": 3, "duplicate": 0, "invalid": 0] as NSDictionary)
        let binding = try cli.run(["binding", "--original-transaction-id", Self.otid]).json
        #expect(binding["state"] as? String == "tombstoned")
        for identifier in [Self.otid, "2000000000000102", "2000000000000103"] {
            #expect(try !Fixtures.anyFile(in: URL(fileURLWithPath: cli.store), contains: identifier), "\(identifier) is in the store")
        }
        let unknown = try cli.history("2000000000009999")
        #expect(unknown.status == 4)
        #expect(unknown.stderr.contains("answered 404 (Apple errorCode 4040010): unknown transaction id"))
    }
}
