import Foundation
import HTTPServer
import OwnershipLedger

/// The service's counters, gauges and histograms, rendered in the Prometheus text format
/// (version 0.0.4). Labels carry only route templates, statuses and codes: never an identifier.
final class Metrics: @unchecked Sendable {
    /// A histogram with fixed upper bounds.
    struct Histogram {
        let bounds: [Double]
        var counts: [Int]
        var sum = 0.0
        var count = 0

        init(bounds: [Double]) {
            self.bounds = bounds
            counts = Array(repeating: 0, count: bounds.count)
        }

        mutating func observe(_ value: Double) {
            for (index, bound) in bounds.enumerated() where value <= bound { counts[index] += 1 }
            sum += value
            count += 1
        }
    }

    static let secondsBounds = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]
    static let groupBounds: [Double] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048]

    private let lock = NSLock()
    private var requests: [String: [Int: Int]] = [:]
    private var requestSeconds: [String: Histogram] = [:]
    private var decisions: [String: [String: Int]] = [:]
    private var tokenFailures: [String: Int] = [:]
    private var refusedConnections: [String: Int] = [:]
    private var jwsFailures: [String: Int] = [:]
    private var keyRefreshes: [String: Int] = [:]
    private var backfillRuns: [String: Int] = [:]
    private var backfillNotifications: [String: Int] = [:]
    private var backfillLastSuccess: Int64?
    private var appleRequests: [String: [Int: Int]] = [:]
    private var commitSize = Histogram(bounds: groupBounds)
    private var commitSeconds = Histogram(bounds: secondsBounds)

    /// The JWS verification codes of `docs/protocol.md`.
    static let jwsCodes: Set<String> = [
        "invalid-jws-format", "invalid-certificate", "invalid-chain", "verification-failed", "invalid-app-identifier",
        "invalid-environment", "invalid-payload",
    ]

    func request(route: String, status: Int, seconds: Double) {
        lock.withLock {
            requests[route, default: [:]][status, default: 0] += 1
            requestSeconds[route, default: Histogram(bounds: Self.secondsBounds)].observe(seconds)
        }
    }

    func decision(_ decision: String, code: String) {
        lock.withLock {
            decisions[decision, default: [:]][code, default: 0] += 1
            if Self.jwsCodes.contains(code) { jwsFailures[code, default: 0] += 1 }
        }
    }

    func connectionRefused(_ reason: HTTPServer.ConnectionRefusal) { lock.withLock { refusedConnections[reason.rawValue, default: 0] += 1 } }

    func tokenFailure(_ code: String) { lock.withLock { tokenFailures[code, default: 0] += 1 } }

    func keyRefresh(succeeded: Bool) { lock.withLock { keyRefreshes[succeeded ? "ok" : "failed", default: 0] += 1 } }

    func commit(submissions: Int, seconds: Double) {
        lock.withLock {
            commitSize.observe(Double(submissions))
            commitSeconds.observe(seconds)
        }
    }

    /// One backfill run (`--backfill-every`) that started at `at` (ms): its summary, nil when it failed.
    func backfill(_ summary: Ledger.BackfillSummary?, at: Int64) {
        lock.withLock {
            backfillRuns[summary == nil ? "failed" : "ok", default: 0] += 1
            guard let summary else { return }
            backfillNotifications["new", default: 0] += summary.new
            backfillNotifications["duplicate", default: 0] += summary.duplicate
            backfillNotifications["invalid", default: 0] += summary.invalid
            backfillLastSuccess = at
        }
    }

    /// One App Store Server API attempt answered `status` (0: no answer, a network error).
    func appleRequest(endpoint: String, status: Int) { lock.withLock { appleRequests[endpoint, default: [:]][status, default: 0] += 1 } }

    /// The text exposition; `gauges` are read at scrape time.
    func render(gauges: [(name: String, help: String, value: Double)]) -> String {
        lock.withLock {
            var out = ""
            func header(_ name: String, _ type: String, _ help: String) { out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n" }
            func histogram(_ name: String, _ labels: String, _ histogram: Histogram) {
                let prefix = labels.isEmpty ? "" : labels + ","
                for (bound, count) in zip(histogram.bounds, histogram.counts) {
                    out += "\(name)_bucket{\(prefix)le=\"\(Self.number(bound))\"} \(count)\n"
                }
                out += "\(name)_bucket{\(prefix)le=\"+Inf\"} \(histogram.count)\n"
                let braces = labels.isEmpty ? "" : "{\(labels)}"
                out += "\(name)_sum\(braces) \(Self.number(histogram.sum))\n\(name)_count\(braces) \(histogram.count)\n"
            }
            header("ledger_http_requests_total", "counter", "HTTP requests answered, by route and status.")
            for route in requests.keys.sorted() {
                for (status, count) in (requests[route] ?? [:]).sorted(by: { $0.key < $1.key }) {
                    out += "ledger_http_requests_total{route=\"\(route)\",status=\"\(status)\"} \(count)\n"
                }
            }
            header("ledger_http_request_seconds", "histogram", "From complete request headers to the end of the answer, by route.")
            for route in requestSeconds.keys.sorted() {
                if let value = requestSeconds[route] { histogram("ledger_http_request_seconds", "route=\"\(route)\"", value) }
            }
            header("ledger_http_connections_refused_total", "counter", "Connections the server closed before answering, by reason.")
            for reason in [HTTPServer.ConnectionRefusal.connectionLimit, .headerDeadline].map(\.rawValue) {
                out += "ledger_http_connections_refused_total{reason=\"\(reason)\"} \(refusedConnections[reason, default: 0])\n"
            }
            header("ledger_decisions_total", "counter", "Answers given, by decision and code.")
            for decision in decisions.keys.sorted() {
                for (code, count) in (decisions[decision] ?? [:]).sorted(by: { $0.key < $1.key }) {
                    out += "ledger_decisions_total{decision=\"\(decision)\",code=\"\(code)\"} \(count)\n"
                }
            }
            header("ledger_commit_group_size", "histogram", "Submissions decided per commit (group commit).")
            histogram("ledger_commit_group_size", "", commitSize)
            header("ledger_commit_seconds", "histogram", "Time to decide and durably commit one group.")
            histogram("ledger_commit_seconds", "", commitSeconds)
            header("ledger_token_failures_total", "counter", "Firebase ID tokens refused, by code.")
            for (code, count) in tokenFailures.sorted(by: { $0.key < $1.key }) { out += "ledger_token_failures_total{code=\"\(code)\"} \(count)\n" }
            header("ledger_jws_failures_total", "counter", "Apple signed data refused, by code.")
            for (code, count) in jwsFailures.sorted(by: { $0.key < $1.key }) { out += "ledger_jws_failures_total{code=\"\(code)\"} \(count)\n" }
            header("ledger_firebase_key_refreshes_total", "counter", "Fetches of the Firebase token certificates, by result.")
            for (result, count) in keyRefreshes.sorted(by: { $0.key < $1.key }) {
                out += "ledger_firebase_key_refreshes_total{result=\"\(result)\"} \(count)\n"
            }
            if !backfillRuns.isEmpty {
                header("ledger_backfill_runs_total", "counter", "Notification backfill runs (--backfill-every), by result.")
                for (result, count) in backfillRuns.sorted(by: { $0.key < $1.key }) {
                    out += "ledger_backfill_runs_total{result=\"\(result)\"} \(count)\n"
                }
                header("ledger_backfill_notifications_total", "counter", "Notifications fetched by the backfill, by what became of them.")
                for result in ["new", "duplicate", "invalid"] {
                    out += "ledger_backfill_notifications_total{result=\"\(result)\"} \(backfillNotifications[result] ?? 0)\n"
                }
                header("ledger_backfill_last_success_timestamp_seconds", "gauge", "Start of the last successful backfill run (0: none yet).")
                out += "ledger_backfill_last_success_timestamp_seconds \((backfillLastSuccess ?? 0) / 1000)\n"
                header("ledger_apple_api_requests_total", "counter", "App Store Server API attempts, by endpoint and status (0: no answer).")
                for endpoint in appleRequests.keys.sorted() {
                    for (status, count) in (appleRequests[endpoint] ?? [:]).sorted(by: { $0.key < $1.key }) {
                        out += "ledger_apple_api_requests_total{endpoint=\"\(endpoint)\",status=\"\(status)\"} \(count)\n"
                    }
                }
            }
            for gauge in gauges {
                header(gauge.name, "gauge", gauge.help)
                out += "\(gauge.name) \(Self.number(gauge.value))\n"
            }
            return out
        }
    }

    private static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}
