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

    private func decide(_ submission: Submission, at: Timestamp, in session: WriteSession) throws -> Decision {
        let keys = store.keys
        let batch: String
        var erasedUID: String?
        let command: Command
        switch submission {
        case .transaction(let kind, let uid, let payload, let provenance):
            let environment = payload.environment.rawValue
            batch = "transaction|\(kind.name)|\(uid ?? "")|\(environment)|\(payload.transactionId)|\(payload.signedDate)"
            if let first = try priorDecision(batch: batch, session: session, at: at) { return first }
            command = .submitTransaction(
                TransactionSubmitted(
                    kind: kind, account: try uid.map { try session.pseudonym(forUID: $0) },
                    lineage: keys.lineage(environment: environment, originalTransactionId: payload.originalTransactionId),
                    transaction: facts(payload, provenance: provenance)))
        case .notification(let payload, let provenance):
            batch = "notification|\(payload.notificationUUID)"
            if let first = try priorDecision(batch: batch, session: session, at: at) { return first }
            command = .receiveNotification(
                NotificationReceived(
                    notificationKey: keys.notification(uuid: payload.notificationUUID),
                    notificationType: payload.notificationType, subtype: payload.subtype, signedDate: payload.signedDate,
                    lineage: payload.transaction.map {
                        keys.lineage(environment: $0.environment.rawValue, originalTransactionId: $0.originalTransactionId)
                    },
                    transaction: payload.transaction.map { facts($0, provenance: provenance) }))
        case .deleteAccount(let uid):
            batch = "delete|\(uid)"
            if let first = try priorDecision(batch: batch, session: session, at: at) { return first }
            guard let account = try session.reader.pseudonym(ofUID: uid) else {
                return Decision(reason: .unknownAccount, sequence: nil, entitlement: nil, duplicate: false)
            }
            command = .deleteAccount(account)
            erasedUID = uid
        }
        let before = try session.reader.loadState(lineages: command.lineages, accounts: command.accounts)
        let events = Decider.decide(command, state: before, at: at)
        let pending = events.enumerated().map { index, event in
            PendingEvent(eventId: keys.eventId(batch: batch, index: index), recordedAt: at, event: event)
        }
        let result = try session.append(pending)
        try session.saveState(from: before, to: StateProjection.fold(events, into: before))
        if let erasedUID { try session.eraseIdentity(uid: erasedUID) }
        return Decision(events: events, lastSequence: result.sequences.last, at: at, duplicate: false)
    }

    /// The decision recorded for `batch`, when it was submitted before.
    private func priorDecision(batch: String, session: WriteSession, at: Timestamp) throws -> Decision? {
        guard var sequence = try session.reader.sequence(ofEvent: store.keys.eventId(batch: batch, index: 0)) else {
            return nil
        }
        var events: [LedgerEvent] = []
        while let record = try session.reader.record(sequence) {
            events.append(record.event)
            if case .decisionIssued = record.event { break }
            sequence += 1
        }
        return Decision(events: events, lastSequence: sequence, at: at, duplicate: true)
    }

    private func facts(_ payload: TransactionPayload, provenance: Provenance) -> TransactionFacts {
        let environment = payload.environment.rawValue
        return TransactionFacts(
            transactionKey: store.keys.transaction(environment: environment, transactionId: payload.transactionId),
            productId: payload.productId, purchaseDate: payload.purchaseDate, expiresDate: payload.expiresDate,
            revocationDate: payload.revocationDate, ownership: Ownership(appleValue: payload.inAppOwnershipType),
            environment: environment, signedDate: payload.signedDate, provenance: provenance)
    }

    // MARK: Queries

    /// The lineage key of an original transaction id in `environment` (the ledger's by default).
    public func lineage(originalTransactionId: String, environment: AppleEnvironment? = nil) -> LineageKey {
        store.keys.lineage(
            environment: (environment ?? configuration.environment).rawValue, originalTransactionId: originalTransactionId)
    }

    /// The state of every lineage and account: the persisted read models now, or a replay of the
    /// records recorded at or before `at`.
    /// - Complexity: O(1) reads for the present; O(records) for a time in the past.
    public func state(lineages: [LineageKey] = [], accounts: [AccountID] = [], asOf at: Timestamp?) throws -> LedgerState {
        guard let at else { return try store.read { try $0.loadState(lineages: lineages, accounts: accounts) } }
        var state = LedgerState()
        try store.read { session in
            try session.forEachRecord { record in
                if record.recordedAt <= at { StateProjection.evolve(&state, record.event) }
                return true
            }
        }
        return state
    }

    /// Who owns a lineage, and its entitlement at `at` (now by default).
    public func binding(originalTransactionId: String, environment: AppleEnvironment? = nil, at: Timestamp? = nil) throws
        -> BindingView
    {
        let lineage = lineage(originalTransactionId: originalTransactionId, environment: environment)
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

extension Binding {
    /// The bound account, if any (a tombstone's former account is not live).
    var liveAccount: AccountID? {
        if case .bound(let account) = self { return account }
        return nil
    }
}
