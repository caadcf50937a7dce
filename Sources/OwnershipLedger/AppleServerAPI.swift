public import AppStoreServerAPI
public import AppleSignedData
import Foundation
public import LedgerCore

/// Fetching what Apple said and the ledger may have missed (`docs/apple-api.md`): the notification
/// history backfill and a lineage's transaction history, through the App Store Server API. Each signed
/// item is verified and decided exactly as `ledger submit` decides it; each page is decided, in one
/// durable commit, before the next page is requested, so an interrupted run loses nothing and a
/// rerun continues, its already-decided items being duplicates.
extension Ledger {
    // MARK: Signed items as submissions

    /// A notification `signedPayload`, verified with this ledger's verifier, as a submission.
    public func notificationSubmission(signedPayload: String, at: Timestamp) throws(VerificationError) -> Submission {
        .notification(try verifier.verifyNotification(signedPayload, now: at).get(), .verifiedJWS)
    }

    /// Each signed transaction of an App Store Server API response, verified with this ledger's
    /// verifier, as a reconciliation submission (which never binds a lineage and never grants a
    /// tombstone); an item that fails verification is its error.
    public func reconciliationSubmissions(_ response: ReconciliationResponse, at: Timestamp) -> [Result<Submission, VerificationError>] {
        verifier.verifyReconciliation(response, now: at).map { item in
            item.map { .transaction(.reconciliation, uid: nil, $0.transaction, .verifiedJWS) }
        }
    }

    // MARK: Notification backfill

    /// How far back Apple keeps notification history: 180 days in Production, 30 in Sandbox
    /// (Apple's "Get Notification History"). Other environments are treated as Production.
    public static func notificationHistoryRetention(_ environment: AppleEnvironment) -> Timestamp {
        (environment == .sandbox ? 30 : 180) * 86_400_000
    }

    /// A backfill's running totals, reported after each page and returned at the end.
    public struct BackfillSummary: Sendable, Equatable {
        public struct Counts: Sendable, Equatable {
            public var new = 0
            public var duplicate = 0
            public var invalid = 0

            public init(new: Int = 0, duplicate: Int = 0, invalid: Int = 0) {
                self.new = new
                self.duplicate = duplicate
                self.invalid = invalid
            }
        }

        public var since: Timestamp
        public var until: Timestamp
        /// Pages fetched and decided.
        public var pages = 0
        /// Signed payloads fetched.
        public var fetched = 0
        /// Decided and recorded now.
        public var new = 0
        /// Already in the ledger (same notification UUID): nothing appended.
        public var duplicate = 0
        /// Failed verification or were refused (as `ledger submit` would answer `invalid`): nothing appended.
        public var invalid = 0
        /// By `notificationType`; items that failed verification count under `unverified`.
        public var byType: [String: Counts] = [:]
        /// New decisions by outcome (`granted`, `ignored`, `recorded`, …).
        public var newByOutcome: [String: Int] = [:]
        /// Why items were invalid, with how many each.
        public var invalidReasons: [String: Int] = [:]

        public init(since: Timestamp, until: Timestamp) {
            self.since = since
            self.until = until
        }
    }

    /// A backfill window Apple would refuse or that makes no sense.
    public struct BackfillWindowError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// Checks `since`..<`until` against `now`: `since` before `until`, and no further back than Apple
    /// keeps notification history for this ledger's environment.
    public func checkBackfillWindow(since: Timestamp, until: Timestamp, now: Timestamp) throws(BackfillWindowError) {
        guard since < until else {
            throw BackfillWindowError(description: "--since \(LedgerTime.format(since)) is not before --until \(LedgerTime.format(until))")
        }
        let retention = Self.notificationHistoryRetention(configuration.environment)
        guard since >= now - retention else {
            throw BackfillWindowError(
                description: "--since \(LedgerTime.format(since)) is more than \(retention / 86_400_000) days ago: Apple keeps "
                    + "\(configuration.environment.rawValue) notification history for \(retention / 86_400_000) days only, "
                    + "so nothing older can be fetched (give --since \(LedgerTime.format(now - retention + 60_000)) or later)")
        }
    }

    /// Fetches every notification Apple attempted to send between `since` and `until` (**Get
    /// Notification History**, page by page) and decides each `signedPayload` as a notification,
    /// exactly as `ledger submit` would. A page is decided and durably committed before the next is
    /// requested; `progress` sees the totals after each page, and may throw to stop there (the pages
    /// decided stay). Notifications already in the ledger are duplicates (same notification UUID) and
    /// change nothing.
    /// - Throws: ``BackfillWindowError`` before any request; ``AppStoreAPIError`` when Apple cannot be
    ///   read (the pages before it stay decided); a store error.
    @discardableResult
    public func backfillNotifications(
        from client: AppStoreServerAPIClient, since: Timestamp, until: Timestamp, clock: @Sendable () -> Timestamp = LedgerTime.now,
        progress: ((BackfillSummary) throws -> Void)? = nil
    ) throws -> BackfillSummary {
        try checkBackfillWindow(since: since, until: until, now: clock())
        var summary = BackfillSummary(since: since, until: until)
        var token: String?
        repeat {
            let page = try client.notificationHistory(startDate: since, endDate: until, paginationToken: token)
            let at = clock()
            var types: [String?] = []
            let submissions = page.signedPayloads.map { jws in
                let submission = Result { () throws(VerificationError) in try notificationSubmission(signedPayload: jws, at: at) }
                if case .success(.notification(let payload, _)) = submission { types.append(payload.notificationType) } else { types.append(nil) }
                return submission.mapError { $0 as any Error }
            }
            for (type, result) in zip(types, try decide(submissions, at: at)) {
                let key = type ?? "unverified"
                summary.fetched += 1
                switch result {
                case .success(let decision) where decision.duplicate:
                    summary.duplicate += 1
                    summary.byType[key, default: .init()].duplicate += 1
                case .success(let decision):
                    summary.new += 1
                    summary.byType[key, default: .init()].new += 1
                    summary.newByOutcome[decision.outcome.rawValue, default: 0] += 1
                case .failure(let error):
                    summary.invalid += 1
                    summary.byType[key, default: .init()].invalid += 1
                    let (code, message) = Self.invalidity(error)
                    summary.invalidReasons["\(code): \(message)", default: 0] += 1
                }
            }
            summary.pages += 1
            try progress?(summary)
            token = page.hasMore ? page.paginationToken : nil
        } while token != nil
        return summary
    }

    // MARK: Transaction history

    /// One signed transaction of a lineage's history and what the ledger decided.
    public struct ReconciledTransaction: Sendable {
        /// The verified transaction; nil when it failed verification.
        public var transaction: TransactionPayload?
        /// The decision, or why the item was invalid (nothing appended).
        public var result: Result<Decision, any Error>
    }

    /// Fetches the transaction history of `originalTransactionId` (**Get Transaction History** v2,
    /// auto-renewable subscriptions, oldest first) and decides each signed transaction as
    /// reconciliation, exactly as a `reconciliation` line of `ledger submit`: it never binds a lineage
    /// and never grants a tombstone. Each page is decided and committed before the next is requested;
    /// `page` sees each page's results. The id is sent to Apple and never stored.
    /// - Throws: ``AppStoreAPIError`` (`.notFound` for an unknown id) or a store error.
    @discardableResult
    public func reconcileTransactionHistory(
        originalTransactionId: String, from client: AppStoreServerAPIClient, clock: @Sendable () -> Timestamp = LedgerTime.now,
        page: (([ReconciledTransaction]) -> Void)? = nil
    ) throws -> [ReconciledTransaction] {
        var all: [ReconciledTransaction] = []
        var revision: String?
        repeat {
            let response = try client.transactionHistory(transactionId: originalTransactionId, revision: revision)
            let at = clock()
            let submissions = reconciliationSubmissions(response, at: at)
            let results = try decide(submissions.map { $0.mapError { $0 as any Error } }, at: at)
            let decided = zip(submissions, results).map { submission, result in
                var transaction: TransactionPayload?
                if case .success(.transaction(_, _, let payload, _)) = submission { transaction = payload }
                return ReconciledTransaction(transaction: transaction, result: result)
            }
            page?(decided)
            all += decided
            revision = response.hasMore == true ? response.revision : nil
        } while revision != nil
        return all
    }

    // MARK: Deciding a page

    /// Decides the verified submissions of one page in one commit (each alone if that commit fails),
    /// at `at`. An item that failed verification, or that the ledger refuses as `ledger submit` would
    /// answer `invalid`, keeps its error; any other error (the store) is thrown.
    private func decide(_ items: [Result<Submission, any Error>], at: Timestamp) throws -> [Result<Decision, any Error>] {
        var groups: [(submissions: [Submission], at: Timestamp)] = []
        for case .success(let submission) in items { groups.append(([submission], at)) }
        var decided = submit(isolating: groups).makeIterator()
        return try items.map { item in
            if case .failure(let error) = item { return .failure(error) }
            guard let result = decided.next() else { throw SubmissionError("a page item was not decided", code: "internal") }
            if case .failure(let error) = result, !(error is SubmissionError || error is VerificationError) { throw error }
            return result.map { $0[0] }
        }
    }

    /// Why an item was invalid: a stable code (a ``VerificationError`` or ``SubmissionError`` code) and words.
    public static func invalidity(_ error: any Error) -> (code: String, message: String) {
        switch error {
        case let error as VerificationError: (error.code.rawValue, error.message)
        case let error as SubmissionError: (error.code, error.message)
        default: ("internal", "\(error)")
        }
    }
}
