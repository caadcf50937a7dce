import AppleSignedData
import FirebaseAuth
import Foundation
import HTTPServer
import LedgerService
import OwnershipLedger

struct ServeCommand: Subcommand {
    static let name = "serve"
    static let abstract = "Serve the ledger over HTTP(S) to the App Store, the app and verifiers (docs/service.md)."
    static let usage = """
        Usage: ledger serve [--store DIR] --listen HOST:PORT --firebase-project-id ID
                            [--firebase-certificates URL|FILE] [--service-token-file FILE]
                            [--tls-certificate FILE --tls-key FILE]
                            [--clock-skew SECONDS] [--delete-sign-in-age SECONDS] [--threads N] [--queue N] [--max-connections N]
                            [--max-connections-per-ip N] [--idle-timeout SECONDS] [--header-timeout SECONDS]
                            [--body-timeout SECONDS]
                            [--backfill-every DURATION [--backfill-window DURATION]
                             --issuer-id ID --key-id ID --private-key FILE [--api-base-url URL]]

        One long-running process that owns the store: POST /v1/apple/notifications (the App Store),
        POST /v1/transactions, GET /v1/entitlements and DELETE /v1/account (the app, with a Firebase ID
        token), POST /v1/submit (verifiers holding a token from --service-token-file, mode 0600: the
        `ledger submit` protocol, signed data only), GET /healthz, /readyz and /metrics. Every write goes
        through one group-committing writer and is answered once durable.

        Once ready it prints {"listening":"HOST:PORT"} on stdout (port 0 binds a free port and prints it);
        one JSON line per request goes to stderr (route, status, duration, code; never a token or an id).
        SIGTERM or SIGINT: stop accepting, answer what is in flight, exit 0.

        --firebase-certificates  Google's x509 set (default), another URL, or a FILE with the same JSON
        --clock-skew             seconds tolerated on token exp/iat/auth_time (default 300)
        --delete-sign-in-age     DELETE /v1/account needs a token whose user signed in (auth_time) at most
                                 this many seconds ago, else 401 requires-recent-login (default 300)
        --threads                server threads (default: cores, at least 2)
        --queue                  submissions waiting for the writer before 503 (default 8192)
        --max-connections        open connections (default 1024); further ones are closed on accept
        --max-connections-per-ip open connections from one client address (default 128; 0: no limit);
                                 behind a reverse proxy every connection is the proxy's: raise it or use 0
        --idle-timeout           seconds before an idle or stalled connection is closed (default 30)
        --header-timeout         seconds a request's headers may take to arrive (default 10)
        --body-timeout           seconds a request body may take to arrive (default 30)
        --backfill-every         fetch the notifications Apple sent (App Store Server API, Get Notification
                                 History) every DURATION (90, 15m, 1h) and decide those the ledger missed, as
                                 `ledger apple notifications backfill` does; the first run at start reaches back
                                 --backfill-window (default 72h), each later one to an hour before the last
                                 successful one began. The key options are those of `ledger apple`
                                 (docs/apple-api.md). Runs are logged and counted in /metrics.
        Exit 0 after a clean shutdown, 2 for a bad option or an address it cannot listen on, 3 store error.
        """
    static let options = Set([
        "listen", "firebase-project-id", "firebase-certificates", "service-token-file", "tls-certificate", "tls-key",
        "clock-skew", "delete-sign-in-age", "threads", "queue", "max-connections", "max-connections-per-ip", "idle-timeout", "header-timeout",
        "body-timeout",
        "backfill-every", "backfill-window",
    ]).union(AppleAPIOptions.names)

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let (host, port) = try listenAddress(try arguments.required("listen"))
        let projectId = try arguments.required("firebase-project-id")
        var http = HTTPServer.Configuration(host: host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")), port: port)
        http.tls = try tls(arguments)
        if let threads = try arguments.integer("threads") { http.threads = max(1, threads) }
        if let connections = try arguments.integer("max-connections") { http.maximumConnections = max(1, connections) }
        if let perAddress = try arguments.integer("max-connections-per-ip") { http.maximumConnectionsPerAddress = perAddress }
        if let idle = try arguments.integer("idle-timeout") { http.idleTimeoutSeconds = max(1, idle) }
        if let header = try arguments.integer("header-timeout") {
            guard header > 0 else { throw CLIError.usage("--header-timeout 0 is not a number of seconds (at least 1)") }
            http.headerTimeoutSeconds = Double(header)
        }
        if let body = try arguments.integer("body-timeout") { http.bodyTimeoutSeconds = Double(max(1, body)) }
        var configuration = LedgerService.Configuration(
            http: http, firebaseProjectId: projectId, firebaseCertificates: try certificates(arguments.value("firebase-certificates")))
        if let skew = try arguments.integer("clock-skew") { configuration.clockSkew = Int64(skew) }
        if let age = try arguments.integer("delete-sign-in-age") {
            guard age > 0 else { throw CLIError.usage("--delete-sign-in-age \(age) is not a number of seconds (at least 1)") }
            configuration.deletionSignInSeconds = Int64(age)
        }
        if let queue = try arguments.integer("queue") { configuration.queueCapacity = max(1, queue) }
        if let path = arguments.value("service-token-file") {
            do {
                configuration.serviceTokens = try ServiceTokens(contentsOf: path)
            } catch {
                throw CLIError.usage("\(error)")
            }
        }
        let ledger = try openLedger(arguments)
        try ledger.store.refuseOnReadOnlyFileSystem()
        try warnIfClockBehindLog(ledger, console: console)
        configuration.backfill = try backfillSchedule(arguments, environment: ledger.configuration.environment)
        let service: LedgerService
        do {
            service = try LedgerService(ledger: ledger, configuration: configuration)
        } catch let error as HTTPServerError {
            throw CLIError(code: .usage, message: error.description)
        } catch let error as FirebaseKeyError {
            throw CLIError(code: .usage, message: "--firebase-certificates: \(error)")
        }
        // Signals are taken by dispatch sources, not by their default action.
        signal(SIGTERM, SIG_IGN)
        signal(SIGINT, SIG_IGN)
        let stop = DispatchSemaphore(value: 0)
        let sources = [SIGTERM, SIGINT].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { stop.signal() }
            source.resume()
            return source
        }
        console.out(JSONLine.render(["listening": "\(host):\(service.port)"]))
        stop.wait()
        LedgerService.standardError(JSONLine.render(["event": "shutting-down"]))
        service.shutdown()
        LedgerService.standardError(JSONLine.render(["event": "stopped"]))
        sources.forEach { $0.cancel() }
        return .success
    }

    /// The periodic backfill of `--backfill-every`, with the API options it needs; nil without it.
    static func backfillSchedule(_ arguments: Arguments, environment: AppleEnvironment) throws -> BackfillSchedule? {
        let given = AppleAPIOptions.names.union(["backfill-window"]).filter { arguments.value($0) != nil }.sorted()
        guard let every = try arguments.duration("backfill-every") else {
            guard given.isEmpty else { throw CLIError.usage("--\(given[0]) goes with --backfill-every") }
            return nil
        }
        let (credentials, baseURL) = try AppleAPIOptions.read(arguments, environment: environment)
        let window = try arguments.duration("backfill-window") ?? 72 * 3_600
        let retention = Double(Ledger.notificationHistoryRetention(environment) / 1000)
        guard window <= retention else {
            throw CLIError.usage(
                "--backfill-window is longer than the \(Int(retention / 86_400)) days Apple keeps \(environment.rawValue) notification history")
        }
        return BackfillSchedule(credentials: credentials, baseURL: baseURL, every: every, window: Int64(window * 1000))
    }

    /// `HOST:PORT`, with an IPv6 host in brackets (`[::1]:8443`).
    static func listenAddress(_ text: String) throws -> (host: String, port: UInt16) {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else {
            throw CLIError.usage("--listen \(text) is not HOST:PORT (e.g. 127.0.0.1:8080, [::1]:8443, 0.0.0.0:0)")
        }
        let host = String(text[..<colon])
        guard !host.isEmpty, host.contains(":") == (host.hasPrefix("[") && host.hasSuffix("]")) else {
            throw CLIError.usage("--listen \(text) is not HOST:PORT (an IPv6 host goes in brackets: [::1]:8443)")
        }
        return (host, port)
    }

    private static func tls(_ arguments: Arguments) throws -> HTTPServer.TLS? {
        let certificate = arguments.value("tls-certificate")
        let key = arguments.value("tls-key")
        guard certificate != nil || key != nil else { return nil }
        guard let certificate, let key else { throw CLIError.usage("--tls-certificate and --tls-key go together") }
        func read(_ path: String, _ option: String) throws -> String {
            guard let text = String(data: try readFile(path, option: "--\(option)"), encoding: .utf8) else {
                throw CLIError.usage("--\(option) \(path) is not PEM text (not UTF-8)")
            }
            return text
        }
        return HTTPServer.TLS(certificatePEM: try read(certificate, "tls-certificate"), keyPEM: try read(key, "tls-key"))
    }

    private static func certificates(_ value: String?) throws -> FirebaseKeySource.Location {
        let text = value ?? FirebaseKeySource.googleCertificatesURL
        guard text.hasPrefix("https://") || text.hasPrefix("http://") else { return .file(text) }
        guard let url = URL(string: text) else { throw CLIError.usage("--firebase-certificates \(text) is not a URL") }
        return .url(url)
    }
}
