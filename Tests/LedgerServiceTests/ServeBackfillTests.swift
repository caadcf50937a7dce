import Foundation
import LedgerCrypto
import LedgerTestSupport
import OwnershipLedger
import Testing

/// `ledger serve --backfill-every`: the notification backfill on a timer inside the service, against the
/// fake App Store server, with its log lines and metrics.
@Suite struct ServeBackfillTests {
    static let certs = ServedLedger.appleCertificates

    /// The fake App Store server expecting the test App Store Connect key, and that key in a 0600 file.
    final class Apple: @unchecked Sendable {
        let directory = TemporaryDirectory("ledger-serve-apple")
        let server: FakeAppStoreServer
        let keyFile: String

        init() throws {
            let pem = try Data(contentsOf: ServeBackfillTests.certs.appendingPathComponent("testSigningKey.p8"))
            server = try FakeAppStoreServer(expected: .init(publicKey: try ES256PrivateKey(pem: String(decoding: pem, as: UTF8.self)).publicKey))
            keyFile = directory.path("AuthKey.p8").path
            try pem.write(to: URL(fileURLWithPath: keyFile))
            chmod(keyFile, 0o600)
        }

        deinit {
            server.shutdown()
            directory.remove()
        }

        func options(every: String = "1s", _ extra: [String] = []) -> [String] {
            [
                "--backfill-every", every, "--issuer-id", server.expected.issuerId, "--key-id", server.expected.keyId, "--private-key", keyFile,
                "--api-base-url", server.baseURL.absoluteString,
            ] + extra
        }
    }

    /// The log lines of finished backfill runs.
    static func backfillRuns(_ log: String) -> [[String: Any]] {
        log.split(separator: "\n").map { Fixtures.object(String($0)) }.filter { $0["event"] as? String == "backfill" }
    }

    @Test func theServiceFetchesWhatItMissedOnATimerAndCountsIt() throws {
        let apple = try Apple()
        let served = try ServedLedger(apple.options(every: "1s"))
        // The first run (at start) has finished, finding nothing: the refund below is fetched by a later one.
        #expect(served.waitUntil { Self.backfillRuns(served.log).count >= 1 }, "the first run never finished")
        // alice buys through the service; Apple's REFUND never reached it.
        let purchase = try ServedLedger.signedTransaction("2000000000000501")
        #expect(try served.transaction("purchase", as: "alice", purchase).status == 200)
        let refund = try ServedLedger.sign([
            "notificationType": "REFUND", "notificationUUID": "uuid-serve-refund", "signedDate": ServedLedger.anHourAgo + 60_000,
            "version": "2.0",
            "data": [
                "environment": "Sandbox", "bundleId": Fixtures.bundleId,
                "signedTransactionInfo": try ServedLedger.sign(
                    Fixtures.transaction("2000000000000501", at: ServedLedger.anHourAgo, revokedAt: ServedLedger.anHourAgo + 60_000)),
            ],
        ])
        apple.server.add(notification: refund, signedDate: ServedLedger.anHourAgo + 60_000)
        #expect(
            try served.waitUntil {
                let entitlements = try served.client.get("/v1/entitlements", headers: try served.authorization("alice")).json["entitlements"]
                return ((entitlements as? [[String: Any]])?.first?["revoked"] as? Bool) == true
            }, "the refund the ledger never received revoked alice's entitlement")
        // Each run's log line is written after its metrics: wait for the line of a run that found the refund again.
        #expect(
            served.waitUntil { Self.backfillRuns(served.log).contains { $0["duplicate"] as? Int ?? 0 >= 1 } }, "later runs find it again")
        #expect(try served.metric(#"ledger_backfill_notifications_total{result="new"}"#) == 1)
        #expect(try served.metric(#"ledger_backfill_last_success_timestamp_seconds"#) ?? 0 > 0)
        #expect(
            try served.metric(#"ledger_apple_api_requests_total{endpoint="POST /inApps/v1/notifications/history",status="200"}"#) ?? 0 >= 2)

        // The first run reached back 72 hours; each later one to an hour before the previous one began.
        let requests = apple.server.requests
        let windows = requests.map { (($0.body["startDate"] as? NSNumber)?.int64Value ?? 0, ($0.body["endDate"] as? NSNumber)?.int64Value ?? 0) }
        try #require(windows.count >= 2)
        #expect(windows[0].1 - windows[0].0 == 72 * 3_600_000)
        #expect(windows[1].0 == windows[0].1 - 3_600_000)
        #expect(requests.allSatisfy { $0.tokenProblem == nil })
        let runs = Self.backfillRuns(served.log)
        #expect(runs.count >= 3 && runs.allSatisfy { $0["ok"] as? Bool == true })
        #expect(runs.first?["fetched"] as? Int == 0)
        #expect(runs.compactMap { $0["new"] as? Int }.reduce(0, +) == 1)
        #expect(served.stop() == 0)
    }

    @Test func aFailedRunIsCountedAndTheNextOneStartsFromTheSamePoint() throws {
        let apple = try Apple()
        apple.server.fault(request: 2, .status(400, body: #"{"errorCode":4000000,"errorMessage":"Invalid request."}"#))
        let served = try ServedLedger(apple.options(every: "1s", ["--backfill-window", "2h"]))
        // Runs are logged in order, each after its metrics: once the third is logged, the first two are too.
        #expect(served.waitUntil { Self.backfillRuns(served.log).count >= 3 }, "three runs never finished")
        #expect(try served.metric(#"ledger_backfill_runs_total{result="failed"}"#) == 1)
        #expect(try served.metric(#"ledger_backfill_runs_total{result="ok"}"#) ?? 0 >= 2)
        #expect(Self.backfillRuns(served.log).prefix(3).map { $0["ok"] as? Bool } == [true, false, true])
        let starts = apple.server.requests.map { ($0.body["startDate"] as? NSNumber)?.int64Value ?? 0 }
        let ends = apple.server.requests.map { ($0.body["endDate"] as? NSNumber)?.int64Value ?? 0 }
        #expect(ends[0] - starts[0] == 2 * 3_600_000)
        #expect(starts[1] == ends[0] - 3_600_000 && starts[2] == starts[1], "the run after the failure starts where the failed one did")
        let failed = Self.backfillRuns(served.log).filter { $0["ok"] as? Bool == false }
        #expect(failed.count == 1 && (failed.first?["error"] as? String)?.contains("answered 400") == true)
        #expect(try served.client.get("/readyz").status == 200, "a failed backfill does not make the service unready")
        #expect(served.stop() == 0)
    }

    @Test func sigtermWhileTheBackfillWaitsToRetryStopsIt() throws {
        let apple = try Apple()
        for request in 1...6 { apple.server.fault(request: request, .status(503)) }
        let served = try ServedLedger(apple.options(every: "1h"))
        #expect(served.waitUntil { !apple.server.requests.isEmpty })
        #expect(served.waitUntil { served.log.contains(#""event":"apple-api-retry""#) }, "it waits to retry after the 503")
        let started = Date()
        #expect(served.stop() == 0)
        let seconds = Date().timeIntervalSince(started)
        print("serve stopped \(seconds) s after SIGTERM while the backfill waited to retry")  // figure for the notes, not asserted
        #expect(apple.server.requests.count < 6, "the retries stopped with the service")
        #expect(Self.backfillRuns(served.log).isEmpty, "the run was stopped, neither done nor failed")
    }

    @Test func backfillOptionsAreCheckedAtStart() throws {
        let apple = try Apple()
        let store = TemporaryDirectory("ledger-serve-options")
        defer { store.remove() }
        let initialized = try LedgerBinary.run([
            "init", "--store", store.path("store").path, "--bundle-id", Fixtures.bundleId, "--environment", "Sandbox",
        ])
        #expect(initialized.status == 0)
        let base = [
            "serve", "--store", store.path("store").path, "--listen", "127.0.0.1:0", "--firebase-project-id", ServedLedger.projectId,
            "--firebase-certificates", ServedLedger.firebaseKeys.appendingPathComponent("certificates.json").path,
        ]
        let open = apple.directory.path("open.p8").path
        try Data(contentsOf: URL(fileURLWithPath: apple.keyFile)).write(to: URL(fileURLWithPath: open))
        chmod(open, 0o644)
        for (options, message) in [
            (["--issuer-id", "I"], "--issuer-id goes with --backfill-every"),
            (["--backfill-every", "soon"] + apple.options().dropFirst(2), "--backfill-every soon is not a duration"),
            (["--backfill-every", "1h"], "--private-key is required"),
            (apple.options(every: "1h").map { $0 == apple.keyFile ? open : $0 }, "mode 0600 is required"),
            (apple.options(every: "1h", ["--backfill-window", "31d"]), "longer than the 30 days Apple keeps Sandbox notification history"),
        ] {
            let result = try LedgerBinary.run(base + options)
            #expect(result.status == 2, "\(options)")
            #expect(result.stderr.contains(message), "\(result.stderr)")
        }
        #expect(apple.server.requests.isEmpty)
    }
}
