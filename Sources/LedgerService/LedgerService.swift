public import FirebaseAuth
import Foundation
public import HTTPServer
import LedgerCore
public import OwnershipLedger
import StrictJSON

/// `ledger serve`: the ledger over HTTP(S) for the App Store, the app and server-side verifiers
/// (`docs/service.md`). Every request that writes goes through one ``GroupCommitter`` and is
/// answered only once its commit is durable; queries read on the server threads and never wait
/// for the writer. The account of an app request is always the verified Firebase ID token's
/// `sub`: a body naming one is refused.
public final class LedgerService: Sendable {
    public struct Configuration: Sendable {
        /// Where to listen, TLS and the connection limits.
        public var http: HTTPServer.Configuration
        public var firebaseProjectId: String
        public var firebaseCertificates: FirebaseKeySource.Location
        /// Seconds of clock skew tolerated on token times.
        public var clockSkew: Int64
        /// The most seconds since the caller signed in (the token's `auth_time`) for
        /// `DELETE /v1/account`: 300, as Firebase asks of an app's own account deletion.
        public var deletionSignInSeconds: Int64 = 300
        /// Who may call `POST /v1/submit`; nobody when nil.
        public var serviceTokens: ServiceTokens?
        /// Submissions queued for the writer before requests are refused 503.
        public var queueCapacity: Int
        /// How long the writer waits for more requests before a commit while requests arrive
        /// concurrently (``GroupCommitter/gatherSeconds``).
        public var commitGatherSeconds: Double = 0.001
        /// Commit with one disk sync and hold the answers until a later sync covers them
        /// (``GroupCommitter/deferringSync``).
        public var commitDeferringSync = false
        /// Receives each log line (JSON, one per request and per event); standard error by default.
        public var log: @Sendable (String) -> Void
        /// Fetch missed notifications from the App Store Server API on a timer; never when nil.
        public var backfill: BackfillSchedule?
        /// How Firebase ID token signatures are checked: libcrypto's RS256 (a test gives one that fails).
        var firebaseSignatureCheck: FirebaseTokenVerifier.SignatureCheck = FirebaseTokenVerifier.libcryptoRS256

        public init(
            http: HTTPServer.Configuration, firebaseProjectId: String, firebaseCertificates: FirebaseKeySource.Location,
            clockSkew: Int64 = 300,
            serviceTokens: ServiceTokens? = nil, queueCapacity: Int = 8_192, log: @escaping @Sendable (String) -> Void = standardError,
            backfill: BackfillSchedule? = nil
        ) {
            self.http = http
            self.firebaseProjectId = firebaseProjectId
            self.firebaseCertificates = firebaseCertificates
            self.clockSkew = clockSkew
            self.serviceTokens = serviceTokens
            self.queueCapacity = queueCapacity
            self.log = log
            self.backfill = backfill
        }
    }

    /// The largest body of the app's and Apple's routes (a JWS is a few KB), and of any request
    /// before it has shown a service token.
    public static let maximumSingleBodyBytes = 256 << 10
    /// The largest `POST /v1/submit` body, for a caller with a service token.
    public static let maximumBatchBodyBytes = 4 << 20

    /// The port listened on.
    public var port: UInt16 { server.port }
    private let server: HTTPServer
    private let routes: Routes
    private let backfill: PeriodicBackfill?

    /// Opens the service on `ledger`: loads the Firebase certificates (a file must load; a URL
    /// that cannot be fetched yet is logged and retried on use), starts the writer, then listens,
    /// then starts the periodic backfill when configured.
    public init(ledger: Ledger, configuration: Configuration) throws {
        let metrics = Metrics()
        let log = configuration.log
        let keys = FirebaseKeySource(
            configuration.firebaseCertificates,
            onRefresh: { refresh in
                metrics.keyRefresh(succeeded: refresh.succeeded)
                if let error = refresh.error {
                    log(JSONLine.render(["event": "firebase-certificates", "ok": false, "error": error]))
                }
            })
        do {
            try keys.load()
        } catch {
            if case .file = configuration.firebaseCertificates { throw error }
        }
        let backfill = try configuration.backfill.map { try PeriodicBackfill(ledger: ledger, schedule: $0, metrics: metrics, log: log) }
        let committer = GroupCommitter(
            ledger: ledger, capacity: configuration.queueCapacity, gatherSeconds: configuration.commitGatherSeconds,
            deferringSync: configuration.commitDeferringSync
        ) { commit in
            metrics.commit(submissions: commit.submissions, seconds: commit.seconds)
        }
        let routes = Routes(
            ledger: ledger, committer: committer, metrics: metrics,
            tokens: FirebaseTokenVerifier(
                projectId: configuration.firebaseProjectId, keys: keys, clockSkew: configuration.clockSkew,
                checkSignature: configuration.firebaseSignatureCheck),
            serviceTokens: configuration.serviceTokens, deletionSignInSeconds: configuration.deletionSignInSeconds, log: log)
        var http = configuration.http
        // Only a caller with a service token may send a batch-sized body: nobody else can make the
        // server hold more than 256 KiB per connection.
        http.maximumBodyBytes = Self.maximumSingleBodyBytes
        http.onConnectionRefused = { reason in metrics.connectionRefused(reason) }
        http.bodyLimit = { request in
            routes.isServiceCall(request) ? Self.maximumBatchBodyBytes : Self.maximumSingleBodyBytes
        }
        do {
            server = try HTTPServer(
                configuration: http,
                observer: { completion in
                    let route = Routes.label(method: completion.method, path: completion.path)
                    metrics.request(route: route, status: completion.status ?? 0, seconds: completion.seconds)
                    var line: JSONMembers = [
                        "at": .string(LedgerTime.format(LedgerTime.now())), "route": .string(route),
                        "status": completion.status.map { .integer(Int64($0)) } ?? .null,
                        "ms": .number((completion.seconds * 1e5).rounded() / 100),
                    ]
                    if let note = completion.note { line["code"] = .string(note) }
                    log(JSONWriter.string(.object(line)))
                }, handler: routes.handle)
        } catch {
            committer.close()
            throw error
        }
        self.routes = routes
        self.backfill = backfill
        backfill?.start()
    }

    /// SIGTERM's work: stop the backfill after its current page, stop accepting, answer what is in
    /// flight (its commits made durable, within `grace` seconds), stop the writer, close every connection.
    public func shutdown(grace: Double = 30) {
        backfill?.stop(grace: grace)
        routes.startDraining()
        server.shutdown(grace: grace)
        routes.committer.close()
    }

    /// Writes `line` and a newline to standard error in one call.
    public static let standardError: @Sendable (String) -> Void = { line in
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    }
}
