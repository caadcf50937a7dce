public import AppleSignedData
public import Foundation
public import LedgerCore
public import LedgerCrypto
public import LedgerStore
import Projections

/// The ownership ledger: open a store, submit verified facts and get decisions, query bindings and
/// entitlements, replay and verify history. This is the library's entry point; the `ledger` tool
/// is a thin shell around it.
public final class Ledger: @unchecked Sendable {
    public let store: LedgerStore
    public let configuration: LedgerConfiguration
    /// Verifies the Apple signed data this ledger accepts.
    public let verifier: SignedDataVerifier

    /// Creates a ledger in `directory` for the app `configuration` describes. `administrator`, when
    /// given, is enrolled as the first support-roster administrator (see ``enrollFirstAdministrator(_:publicKey:at:)``).
    public static func initialize(
        at directory: URL, configuration: LedgerConfiguration, administrator: (id: String, publicKey: Ed25519PublicKey)? = nil
    ) throws -> Ledger {
        _ = try configuration.verifier()
        let encoded = try JSONEncoder().encode(configuration)
        let store = try LedgerStore.create(at: directory, configuration: [UInt8](encoded))
        let ledger = try Ledger(store: store)
        if let administrator { try ledger.enrollFirstAdministrator(administrator.id, publicKey: administrator.publicKey) }
        return ledger
    }

    /// Opens the ledger in `directory`.
    public convenience init(opening directory: URL) throws {
        try self.init(store: LedgerStore(opening: directory))
    }

    private init(store: LedgerStore) throws {
        self.store = store
        let blob = try store.configuration()
        do {
            configuration = try JSONDecoder().decode(LedgerConfiguration.self, from: Data(blob))
        } catch {
            throw LedgerStoreError.corrupt("the stored configuration cannot be read: \(error)")
        }
        verifier = try configuration.verifier()
    }

    // MARK: Submitting

    /// A verified (or explicitly trusted) fact from a verifier.
    public enum Submission: Sendable {
        /// A purchase, renewal or restore by the authenticated account `uid`, or a reconciliation
        /// item (`uid` nil).
        case transaction(SubmissionKind, uid: String?, TransactionPayload, Provenance)
        /// An App Store Server Notification.
        case notification(NotificationPayload, Provenance)
        /// The authenticated account `uid` deletes itself.
        case deleteAccount(uid: String)
    }

    /// Decides each submission and appends its events, all in one write transaction. A submission
    /// seen before (same notification UUID, same signed transaction from the same account, same
    /// deletion) appends nothing and returns the first decision.
    public func submit(_ submissions: [Submission], at: Timestamp) throws -> [Decision] {
        try submit(groups: [(submissions, at)])[0]
    }

    /// Group commit: decides every group in order in one write transaction (one `fsync`), each
    /// group's submissions at its own time. Later groups see earlier groups' events.
    public func submit(groups: [(submissions: [Submission], at: Timestamp)]) throws -> [[Decision]] {
        try store.write { session in
            try groups.map { group in try group.submissions.map { try decide($0, at: group.at, in: session) } }
        }
    }

    /// Decides one submission (see ``submit(_:at:)``).
    public func submit(_ submission: Submission, at: Timestamp) throws -> Decision {
        try submit([submission], at: at)[0]
    }

    /// Decides one submission inside `session`.
    ///
    /// Idempotency: a submission is identified by what it carries (notification UUID; kind, account,
    /// transaction id and signed date; deleted UID). A retry is answered with the recorded decision
    /// and the entitlement as it stands now, appending nothing: a notification always (different
    /// content under the same UUID is a conflict); a transaction when deciding it again would change
    /// nothing and tell the same outcome; a deletion while the UID has no live account. Otherwise it
    /// is decided again and recorded (a restore retried after a transfer, a deletion, a refund or an
    /// expiry; a UID deleted again after reuse).
    private func decide(_ submission: Submission, at: Timestamp, in session: WriteSession) throws -> Decision {
        try Self.validate(submission, at: at)
        let keys = store.keys
        let base: String
        switch submission {
        case .transaction(let kind, let uid, let payload, _):
            base = Self.descriptor(
                "transaction", kind.name, uid ?? "", payload.environment.rawValue, payload.transactionId, String(payload.signedDate))
        case .notification(let payload, _):
            base = Self.descriptor("notification", payload.notificationUUID)
        case .deleteAccount(let uid):
            base = Self.descriptor("delete", uid)
        }
        let submissionKey = try keys.eventId(batch: base, index: 0)
        var attempt: UInt32 = 0
        var prior: [Record]?
        if let latest = try session.reader.latestAttempt(of: submissionKey) {
            prior = try recordedBatch(from: latest.firstSequence, session: session)
            attempt = latest.attempt + 1
        }
        let command: Command
        var erasedUID: String?
        switch submission {
        case .transaction(let kind, let uid, let payload, let provenance):
            var account: AccountID?
            if let uid {
                // A retry from an account deleted since is decided without issuing the UID a new
                // identity: its records name a pseudonym that maps to nobody.
                account =
                    try session.reader.pseudonym(ofUID: uid)
                    ?? (prior == nil ? try session.pseudonym(forUID: uid) : try Self.unlinkedPseudonym())
            }
            command = .submitTransaction(
                TransactionSubmitted(
                    kind: kind, account: account, lineage: try lineage(of: payload), transaction: try facts(payload, provenance: provenance)))
        case .notification(let payload, let provenance):
            let fact = try notificationFact(payload, provenance: provenance)
            if let prior, prior.first?.event != .notificationReceived(fact) {
                throw SubmissionError(
                    "notificationUUID \(payload.notificationUUID) was delivered before with different content", code: "conflict")
            }
            command = .receiveNotification(fact)
        case .deleteAccount(let uid):
            guard let account = try session.reader.pseudonym(ofUID: uid) else {
                if let prior { return try answer(toRetryOf: prior, lineage: nil, at: at, session: session) }
                return Decision(reason: .unknownAccount, sequence: nil, entitlement: nil, duplicate: false)
            }
            command = .deleteAccount(account)
            erasedUID = uid
        }
        let before = try session.reader.loadState(lineages: command.lineages, accounts: command.accounts)
        let events = Decider.decide(command, state: before, at: at)
        let after = StateProjection.fold(events, into: before)
        if let prior, isRetry(submission, prior: prior, decided: events, changes: before != after) {
            return try answer(toRetryOf: prior, lineage: command.lineages.first, at: at, session: session)
        }
        let batch = attempt == 0 ? base : base + Self.descriptor("attempt", String(attempt))
        let pending = try events.enumerated().map { index, event in
            PendingEvent(eventId: try keys.eventId(batch: batch, index: index), recordedAt: at, event: event)
        }
        let result = try session.append(pending)
        if let first = result.sequences.first {
            try session.recordAttempt(of: submissionKey, attempt: attempt, firstSequence: first)
        }
        try session.saveState(from: before, to: after)
        if let erasedUID { try session.eraseIdentity(uid: erasedUID) }
        return Decision(events: events, lastSequence: result.sequences.last, at: at, duplicate: false)
    }

    /// Whether a submission seen before (`prior`) is a retry to answer with its first decision
    /// rather than a new attempt: a notification always (Apple redelivers it; its content was
    /// checked); a transaction when deciding it again would change nothing and tell the caller the
    /// same outcome and code (otherwise, e.g. after a transfer, a deletion, a refund or an expiry,
    /// it is recorded and answered anew).
    private func isRetry(_ submission: Submission, prior: [Record], decided events: [LedgerEvent], changes: Bool) -> Bool {
        switch submission {
        case .notification: return true
        case .deleteAccount: return false
        case .transaction:
            func told(_ events: [LedgerEvent]) -> (Outcome, String)? {
                for case .decisionIssued(let decision) in events.reversed() { return (decision.reason.outcome, decision.reason.code) }
                return nil
            }
            guard let first = told(prior.map(\.event)), let now = told(events) else { return false }
            return !changes && first == now
        }
    }

    /// The first decision of a retried submission, with the entitlement as it stands now.
    private func answer(toRetryOf prior: [Record], lineage: LineageKey?, at: Timestamp, session: WriteSession) throws -> Decision {
        var decision = Decision(events: prior.map(\.event), lastSequence: prior.last?.sequence, at: at, duplicate: true)
        if decision.entitlement != nil, let lineage {
            let state = try session.reader.loadState(lineages: [lineage]).lineage(lineage)
            decision.entitlement = state.entitlement.map { EntitlementView($0, lineage: state, at: at) }
        }
        return decision
    }

    /// A pseudonym for a submitter whose identity was erased: random and never stored in the vault.
    private static func unlinkedPseudonym() throws -> AccountID {
        guard let account = AccountID(try Digest.randomBytes(16)) else { throw LedgerStoreError.corrupt("pseudonym") }
        return account
    }

    /// An unambiguous description of a submission: each part length-prefixed, so no UID or id can
    /// make two submissions (or two attempts) share event ids.
    static func descriptor(_ parts: String...) -> String {
        parts.map { "\($0.utf8.count):\($0)" }.joined()
    }

    /// The records of the batch starting at `sequence`, through its decision.
    private func recordedBatch(from sequence: UInt64, session: WriteSession) throws -> [Record] {
        var records: [Record] = []
        var next = sequence
        while let record = try session.reader.record(next) {
            records.append(record)
            if case .decisionIssued = record.event { break }
            next += 1
        }
        return records
    }

    private func lineage(of payload: TransactionPayload) throws -> LineageKey {
        try store.keys.lineage(environment: payload.environment.rawValue, originalTransactionId: payload.originalTransactionId)
    }

    private func notificationFact(_ payload: NotificationPayload, provenance: Provenance) throws -> NotificationReceived {
        NotificationReceived(
            notificationKey: try store.keys.notification(uuid: payload.notificationUUID), notificationType: payload.notificationType,
            subtype: payload.subtype, signedDate: payload.signedDate, lineage: try payload.transaction.map(lineage(of:)),
            transaction: try payload.transaction.map { try facts($0, provenance: provenance) })
    }

    /// Refuses, before anything is decided, times outside ``LedgerTime/supportedRange``, ownership
    /// types other than `PURCHASED` and `FAMILY_SHARED`, and transactions that are not
    /// auto-renewable subscriptions (a `type` other than that, or no `expiresDate`).
    public static func validate(_ submission: Submission, at: Timestamp) throws {
        func check(_ time: Timestamp?, _ field: String) throws {
            guard let time, !LedgerTime.supportedRange.contains(time) else { return }
            throw SubmissionError("\(field) \(time) is outside the supported range (1970 through 9999, in milliseconds)")
        }
        func check(_ transaction: TransactionPayload, _ context: String) throws {
            if let type = transaction.type, type != "Auto-Renewable Subscription" {
                throw SubmissionError("\(context).type \"\(type)\" is not an auto-renewable subscription; the ledger binds only subscriptions")
            }
            guard transaction.expiresDate != nil else {
                throw SubmissionError("\(context) is missing expiresDate, which every subscription transaction carries")
            }
            guard ["PURCHASED", "FAMILY_SHARED"].contains(transaction.inAppOwnershipType) else {
                throw SubmissionError(
                    "\(context).inAppOwnershipType \"\(transaction.inAppOwnershipType)\" is neither PURCHASED nor FAMILY_SHARED")
            }
            try check(transaction.purchaseDate, "\(context).purchaseDate")
            try check(transaction.expiresDate, "\(context).expiresDate")
            try check(transaction.revocationDate, "\(context).revocationDate")
            try check(transaction.signedDate, "\(context).signedDate")
        }
        try check(at, "at")
        switch submission {
        case .transaction(_, _, let payload, _): try check(payload, "transaction")
        case .notification(let payload, _):
            try check(payload.signedDate, "notification.signedDate")
            if let transaction = payload.transaction { try check(transaction, "notification.transaction") }
        case .deleteAccount: break
        }
    }

    private func facts(_ payload: TransactionPayload, provenance: Provenance) throws -> TransactionFacts {
        let environment = payload.environment.rawValue
        return TransactionFacts(
            transactionKey: try store.keys.transaction(environment: environment, transactionId: payload.transactionId),
            productId: payload.productId, purchaseDate: payload.purchaseDate, expiresDate: payload.expiresDate,
            revocationDate: payload.revocationDate, ownership: Ownership(appleValue: payload.inAppOwnershipType),
            environment: environment, signedDate: payload.signedDate, provenance: provenance)
    }

    // MARK: Queries

    /// The lineage key of an original transaction id in `environment` (the ledger's by default).
    public func lineage(originalTransactionId: String, environment: AppleEnvironment? = nil) throws -> LineageKey {
        try store.keys.lineage(
            environment: (environment ?? configuration.environment).rawValue, originalTransactionId: originalTransactionId)
    }

    /// The state of every lineage and account: the persisted read models now, or a replay of the
    /// log up to and including its last record recorded at or before `at`. Record times come from
    /// callers and may be out of order; cutting the log (rather than filtering by time) always
    /// gives a state that existed.
    /// - Complexity: O(1) reads for the present; O(records) for a time in the past.
    public func state(lineages: [LineageKey] = [], accounts: [AccountID] = [], asOf at: Timestamp?) throws -> LedgerState {
        guard let at else { return try store.read { try $0.loadState(lineages: lineages, accounts: accounts) } }
        var state = LedgerState()
        try store.read { session in
            // The log's prefix through the last record recorded at or before `at`.
            var last: UInt64 = 0
            try session.forEachStoredRecord { sequence, stored in
                if let time = RecordCodec.recordedAt(of: stored), time <= at { last = sequence }
                return true
            }
            try session.forEachRecord { record in
                guard record.sequence <= last else { return false }
                StateProjection.evolve(&state, record.event)
                return true
            }
        }
        return state
    }

    /// Who owns a lineage, and its entitlement at `at` (now by default).
    public func binding(originalTransactionId: String, environment: AppleEnvironment? = nil, at: Timestamp? = nil) throws
        -> BindingView
    {
        let lineage = try lineage(originalTransactionId: originalTransactionId, environment: environment)
        let state = try self.state(lineages: [lineage], asOf: at).lineage(lineage)
        let time = at ?? LedgerTime.now()
        return BindingView(
            binding: state.binding, uid: try state.binding.liveAccount.flatMap { a in try store.read { try $0.uid(of: a) } },
            entitlement: state.entitlement.map { EntitlementView($0, lineage: state, at: time) })
    }

    /// The entitlements of the live account `uid` at `at` (now by default). A deleted account is
    /// unknown: its identity mapping is gone.
    public func account(uid: String, at: Timestamp? = nil) throws -> AccountView {
        guard let account = try store.read({ try $0.pseudonym(ofUID: uid) }) else {
            return AccountView(uid: uid, known: false, entitlements: [])
        }
        let state = try self.state(accounts: [account], asOf: at)
        let time = at ?? LedgerTime.now()
        let entitlements = (state.accountLineages[account] ?? []).sorted().compactMap { key -> EntitlementView? in
            let lineage = state.lineage(key)
            guard let entitlement = lineage.entitlement, entitlement.account == account else { return nil }
            return EntitlementView(entitlement, lineage: lineage, at: time)
        }
        return AccountView(uid: uid, known: true, entitlements: entitlements)
    }
}

/// A submission the ledger refuses before deciding it (nothing is appended).
public struct SubmissionError: Error, Equatable, CustomStringConvertible, Sendable {
    public var message: String
    /// A stable kebab-case code.
    public var code: String

    public init(_ message: String, code: String = "invalid-argument") {
        self.message = message
        self.code = code
    }

    public var description: String { message }
}

extension Binding {
    /// The bound account, if any (a tombstone's former account is not live).
    var liveAccount: AccountID? {
        if case .bound(let account) = self { return account }
        return nil
    }
}
