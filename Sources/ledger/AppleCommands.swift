import AppStoreServerAPI
import AppleSignedData
import Foundation
import LedgerCore
import OwnershipLedger
import StrictJSON

/// `ledger apple …`: fetch from the App Store Server API what the ledger may have missed (docs/apple-api.md).
struct AppleCommand: Subcommand {
    static let name = "apple"
    static let abstract = "Fetch from the App Store Server API: notification backfill, a lineage's transaction history."
    static let usage = """
        Usage: ledger apple notifications backfill --since TIME [--until TIME] [--store DIR] API-OPTIONS
               ledger apple history --original-transaction-id ID [--store DIR] API-OPTIONS
        API-OPTIONS: --issuer-id ID --key-id ID --private-key FILE [--api-base-url URL]

          notifications backfill
                   Fetches every notification Apple attempted to send between --since and --until (default
                   now; ISO-8601 or ms) with Get Notification History and decides each signedPayload exactly as
                   `ledger submit` would. Notifications already in the ledger are duplicates and change nothing.
                   Apple keeps 180 days of history (30 in Sandbox): an older --since is refused. Prints a JSON
                   summary: pages, fetched, new, duplicate, invalid, by notification type.
          history  Fetches the lineage's transaction history (Get Transaction History v2, subscriptions, oldest
                   first) and submits each signed transaction as reconciliation, which never binds a lineage
                   and never grants a tombstone. Prints one JSON decision per transaction, then a summary line.
                   The id is sent to Apple only; it is never written to the store.

        The in-app purchase key from App Store Connect signs each request (ES256 JWT): --key-id is its key id,
        --issuer-id the team's issuer id, --private-key its .p8 file, which must have mode 0600. Requests go to
        Apple's Production or Sandbox server, as the ledger's environment says; --api-base-url overrides it
        (https, or http to a loopback address for tests). Each page is decided and committed before the next
        request: an interrupted run loses nothing, and running it again continues. Progress goes to stderr
        when it is a terminal.
        Exit 0 when done, 1 when a fetched item failed verification (see the output), 2 usage or key file,
        3 store error, 4 when Apple could not be used (401: wrong key id, issuer id or key; 404: unknown
        transaction id; still 429 or 5xx after the retries).
        """
    static let apiOptions = AppleAPIOptions.names
    static let options: Set<String> = apiOptions.union(["since", "until", "original-transaction-id"])
    static let positionals = 1...2

    static func run(_ arguments: Arguments, console: Console) throws -> ExitCode {
        let allowed: Set<String>
        switch arguments.positionals {
        case ["notifications", "backfill"]: allowed = apiOptions.union(["since", "until"])
        case ["history"]: allowed = apiOptions.union(["original-transaction-id"])
        default: throw CLIError.usage("give `apple notifications backfill` or `apple history`")
        }
        let command = arguments.positionals.joined(separator: " ")
        for option in arguments.options.keys where !["store", "keys", "read-store"].contains(option) && !allowed.contains(option) {
            throw CLIError.usage("--\(option) is not an option of `apple \(command)`")
        }
        let progress = Progress(console: console)
        do {
            if command == "history" {
                let id = try arguments.originalTransactionId() ?? ""
                let (ledger, client) = try connect(arguments, progress: progress)
                return try history(id, ledger: ledger, client: client, console: console, progress: progress)
            }
            guard let since = try arguments.time("since") else { throw CLIError.usage("--since is required") }
            let now = LedgerTime.now()
            let until = try arguments.time("until") ?? now
            let (ledger, client) = try connect(arguments, progress: progress)
            do {
                try ledger.checkBackfillWindow(since: since, until: until, now: now)
            } catch {
                throw CLIError.usage(error.description)
            }
            return try backfill(since: since, until: until, ledger: ledger, client: client, console: console, progress: progress)
        } catch let error as AppStoreAPIError {
            guard error.kind != .configuration else { throw CLIError.usage(error.message) }
            throw CLIError(code: .appleAPIFailed, message: error.description)
        }
    }

    /// The ledger and a client for its environment, with the key read and checked.
    static func connect(_ arguments: Arguments, progress: Progress) throws -> (Ledger, AppStoreServerAPIClient) {
        let ledger = try openLedger(arguments)
        let (credentials, baseURL) = try AppleAPIOptions.read(arguments, environment: ledger.configuration.environment)
        let client = try AppStoreServerAPIClient(
            baseURL: baseURL, credentials: credentials, bundleId: ledger.configuration.bundleId, clock: LedgerTime.now,
            observer: progress.apiEvent)
        return (ledger, client)
    }

    static func backfill(
        since: Int64, until: Int64, ledger: Ledger, client: AppStoreServerAPIClient, console: Console, progress: Progress
    ) throws -> ExitCode {
        progress.say("backfill: notifications from \(LedgerTime.format(since)) to \(LedgerTime.format(until))")
        let summary = try ledger.backfillNotifications(
            from: client, since: since, until: until,
            progress: { summary in
                progress.say(
                    "backfill: page \(summary.pages): \(summary.fetched) fetched, \(summary.new) new, \(summary.duplicate) duplicate, "
                        + "\(summary.invalid) invalid")
            })
        let counts = { (counts: Ledger.BackfillSummary.Counts) -> JSONObject in
            ["new": counts.new, "duplicate": counts.duplicate, "invalid": counts.invalid]
        }
        console.out(
            JSONLine.render([
                "since": LedgerTime.format(summary.since), "until": LedgerTime.format(summary.until), "pages": summary.pages,
                "fetched": summary.fetched, "new": summary.new, "duplicate": summary.duplicate, "invalid": summary.invalid,
                "byType": summary.byType.mapValues(counts), "newByOutcome": summary.newByOutcome, "invalidReasons": summary.invalidReasons,
            ]))
        return (summary.byType["unverified"]?.invalid ?? 0) > 0 ? .verificationFailed : .success
    }

    static func history(_ id: String, ledger: Ledger, client: AppStoreServerAPIClient, console: Console, progress: Progress) throws
        -> ExitCode
    {
        var fetched = 0
        var new = 0
        var duplicate = 0
        var invalid = 0
        var unverified = 0
        var pages = 0
        try ledger.reconcileTransactionHistory(
            originalTransactionId: id, from: client,
            page: { items in
                pages += 1
                for item in items {
                    fetched += 1
                    var object: JSONMembers
                    switch item.result {
                    case .success(let decision):
                        object = render(decision)
                        if decision.duplicate { duplicate += 1 } else { new += 1 }
                    case .failure(let error):
                        invalid += 1
                        if item.transaction == nil { unverified += 1 }
                        let (code, message) = Ledger.invalidity(error)
                        object = ["decision": "invalid", "code": .string(code), "message": .string(message)]
                    }
                    if let transaction = item.transaction {
                        object["transactionId"] = .string(transaction.transactionId)
                        object["productId"] = .string(transaction.productId)
                        object["purchaseDate"] = .string(LedgerTime.format(transaction.purchaseDate))
                        object["expiresDate"] = transaction.expiresDate.map { .string(LedgerTime.format($0)) } ?? .null
                        if let revoked = transaction.revocationDate { object["revocationDate"] = .string(LedgerTime.format(revoked)) }
                    }
                    console.out(JSONWriter.string(.object(object)))
                }
                progress.say("history: page \(pages): \(fetched) transactions decided")
            })
        console.out(
            JSONLine.render(["pages": pages, "fetched": fetched, "new": new, "duplicate": duplicate, "invalid": invalid]))
        return unverified > 0 ? .verificationFailed : .success
    }

    /// Progress and retry notices on stderr, only when it is a terminal.
    final class Progress: @unchecked Sendable {
        let console: Console
        let enabled = isatty(STDERR_FILENO) != 0

        init(console: Console) { self.console = console }

        func say(_ line: String) { if enabled { console.err(line) } }

        var apiEvent: @Sendable (AppStoreServerAPIClient.Event) -> Void {
            { [self] event in
                if case .retrying(let endpoint, let reason, let delay, let attempt) = event {
                    say("apple: \(endpoint): \(reason); retry \(attempt) in \(String(format: "%.1f", delay)) s")
                }
            }
        }
    }
}

/// The options of every command that calls the App Store Server API (`apple …`, `serve --backfill-every`).
enum AppleAPIOptions {
    static let names: Set<String> = ["issuer-id", "key-id", "private-key", "api-base-url"]

    /// The key from --issuer-id, --key-id and --private-key (mode 0600 required), and --api-base-url or
    /// Apple's server for `environment`. Every problem is a usage error.
    static func read(_ arguments: Arguments, environment: AppleEnvironment) throws -> (AppStoreConnectCredentials, URL) {
        do {
            let privateKey = try AppStoreConnectCredentials.privateKey(file: try arguments.required("private-key"))
            let credentials = try AppStoreConnectCredentials(
                issuerId: try arguments.required("issuer-id"), keyId: try arguments.required("key-id"), privateKey: privateKey)
            guard let text = arguments.value("api-base-url") else {
                guard let url = AppStoreServerAPIClient.baseURL(for: environment) else {
                    throw CLIError.usage("the ledger's environment \(environment.rawValue) has no App Store server: give --api-base-url")
                }
                return (credentials, url)
            }
            guard let url = URL(string: text) else { throw CLIError.usage("--api-base-url \(text) is not a URL") }
            return (credentials, url)
        } catch let error as AppStoreAPIError {
            throw CLIError.usage(error.message)
        }
    }
}

extension Arguments {
    /// A duration: seconds (`90`), or a number with `s`, `m`, `h` or `d` (`15m`, `1h`); more than 0.
    func duration(_ name: String) throws -> Double? {
        guard let text = value(name) else { return nil }
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3_600, "d": 86_400]
        let unit = text.last.flatMap { units[$0] }
        guard let number = Double(unit == nil ? Substring(text) : text.dropLast()), number.isFinite, number > 0, number <= 366 * 86_400 else {
            throw CLIError.usage("--\(name) \(text) is not a duration (e.g. 90, 90s, 15m, 1h, 3d)")
        }
        return number * (unit ?? 1)
    }
}
