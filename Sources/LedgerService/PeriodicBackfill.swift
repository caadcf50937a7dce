public import AppStoreServerAPI
public import Foundation
import LedgerCore
import OwnershipLedger

/// `ledger serve --backfill-every`: what the App Store Server API's notification history holds and the
/// service may have missed (it was down, Apple gave up), fetched and decided on a timer
/// (`docs/apple-api.md`).
public struct BackfillSchedule: Sendable {
    public var credentials: AppStoreConnectCredentials
    /// Apple's server for the ledger's environment, or a test server.
    public var baseURL: URL
    /// Seconds from the start of one run to the start of the next.
    public var every: Double
    /// How far back the first run reaches, in ms. Each later run starts an hour before the start of the
    /// last successful one, so runs overlap and a failed run leaves no gap.
    public var window: Int64

    /// How far before the last successful run's start the next run begins (Apple's history may list a
    /// notification a little after it was first sent).
    public static let overlap: Int64 = 3_600_000

    public init(credentials: AppStoreConnectCredentials, baseURL: URL, every: Double, window: Int64 = 72 * 3_600_000) {
        self.credentials = credentials
        self.baseURL = baseURL
        self.every = every
        self.window = window
    }
}

/// Runs the backfill on its own thread until ``stop(grace:)``. Each run's pages are decided through
/// `Ledger.backfillNotifications` (one commit per page, beside the service's writer: LMDB serialises
/// the two); a failed run is logged and counted, and the next one starts from the same point.
final class PeriodicBackfill: Sendable {
    private let ledger: Ledger
    private let schedule: BackfillSchedule
    private let metrics: Metrics
    private let log: @Sendable (String) -> Void
    private let client: AppStoreServerAPIClient
    private let signal = StopSignal()
    private let finished = DispatchSemaphore(value: 0)

    private struct Stopped: Error {}

    init(ledger: Ledger, schedule: BackfillSchedule, metrics: Metrics, log: @escaping @Sendable (String) -> Void) throws {
        self.ledger = ledger
        self.schedule = schedule
        self.metrics = metrics
        self.log = log
        let signal = self.signal
        client = try AppStoreServerAPIClient(
            baseURL: schedule.baseURL, credentials: schedule.credentials, bundleId: ledger.configuration.bundleId,
            retry: AppStoreServerAPIClient.RetryPolicy(sleep: signal.sleep), clock: LedgerTime.now,
            observer: { event in
                switch event {
                case .answered(let endpoint, let status, _): metrics.appleRequest(endpoint: endpoint, status: status ?? 0)
                case .retrying(let endpoint, let reason, let delay, _):
                    log(
                        JSONLine.render([
                            "at": LedgerTime.format(LedgerTime.now()), "event": "apple-api-retry", "endpoint": endpoint, "reason": reason,
                            "delay": delay,
                        ]))
                }
            })
    }

    /// Starts the first run now, then one every ``BackfillSchedule/every`` seconds.
    func start() {
        let thread = Thread { [self] in
            run()
            finished.signal()
        }
        thread.name = "ledger-backfill"
        thread.start()
    }

    /// Stops after the page being decided (a retry being waited for is abandoned) and waits up to
    /// `grace` seconds for that; a request still in flight after it is left to its timeout.
    func stop(grace: Double) {
        signal.stop()
        _ = finished.wait(timeout: .now() + grace)
    }

    private func run() {
        // The start of the next run's window: the window before the first run, then an overlap
        // before the start of the last successful run.
        var since: Int64?
        while !signal.isStopped {
            let started = LedgerTime.now()
            let retention = Ledger.notificationHistoryRetention(ledger.configuration.environment)
            let from = max(since ?? started - schedule.window, started - retention + 60_000)
            let clock = DispatchTime.now()
            do {
                let summary = try ledger.backfillNotifications(
                    from: client, since: from, until: started,
                    progress: { _ in if self.signal.isStopped { throw Stopped() } })
                let seconds = Double(DispatchTime.now().uptimeNanoseconds - clock.uptimeNanoseconds) / 1e9
                metrics.backfill(summary, at: started)
                log(
                    JSONLine.render([
                        "at": LedgerTime.format(LedgerTime.now()), "event": "backfill", "ok": true, "since": LedgerTime.format(from),
                        "until": LedgerTime.format(started),
                        "pages": summary.pages, "fetched": summary.fetched, "new": summary.new, "duplicate": summary.duplicate,
                        "invalid": summary.invalid, "seconds": (seconds * 1000).rounded() / 1000,
                    ]))
                since = started - BackfillSchedule.overlap
            } catch is Stopped {
                break
            } catch let error as AppStoreAPIError where error.kind == .cancelled {
                break
            } catch {
                metrics.backfill(nil, at: started)
                log(
                    JSONLine.render([
                        "at": LedgerTime.format(LedgerTime.now()), "event": "backfill", "ok": false, "since": LedgerTime.format(from),
                        "error": "\(error)",
                    ]))
            }
            let elapsed = Double(DispatchTime.now().uptimeNanoseconds - clock.uptimeNanoseconds) / 1e9
            guard signal.sleep(max(0, schedule.every - elapsed)) else { break }
        }
    }
}

/// A stop request that sleeping threads wake up for.
final class StopSignal: @unchecked Sendable {
    private let condition = NSCondition()
    private var stopped = false

    var isStopped: Bool { condition.withLock { stopped } }

    func stop() {
        condition.withLock {
            stopped = true
            condition.broadcast()
        }
    }

    /// Waits `seconds`, or less if stopped meanwhile; false when stopped.
    @Sendable func sleep(_ seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        condition.lock()
        defer { condition.unlock() }
        while !stopped {
            if !condition.wait(until: deadline) { return true }
        }
        return false
    }
}
