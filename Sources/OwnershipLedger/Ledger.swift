public import AppleSignedData
public import Foundation
public import LedgerCore
public import LedgerCrypto
public import LedgerStore
import Projections
import StrictJSON

/// The ownership ledger: open a store, submit verified facts and get decisions, query bindings and
/// entitlements, replay and verify history. This is the library's entry point; the `ledger` tool
/// is a thin shell around it.
public final class Ledger: @unchecked Sendable {
    public let store: LedgerStore
    public let configuration: LedgerConfiguration
    /// Verifies the Apple signed data this ledger accepts.
    public let verifier: SignedDataVerifier
    /// The ledger clock: every record's `recordedAt` (never the caller's time, never earlier than the
    /// previous record's).
    public let clock: @Sendable () -> Timestamp
    /// The signer given at opening, if any (see ``signer()``).
    let externalSigner: (any LedgerSigner)?

    /// Creates a ledger in `directory` for the app `configuration` describes. `administrator`, when
    /// given, is enrolled as the first support-roster administrator (see ``enrollFirstAdministrator(_:publicKey:at:)``).
    public static func initialize(
        at directory: URL, configuration: LedgerConfiguration, administrator: (id: String, publicKey: Ed25519PublicKey)? = nil,
        clock: @escaping @Sendable () -> Timestamp = LedgerTime.now
    ) throws -> Ledger {
        try initialize(at: .directory(directory), configuration: configuration, administrator: administrator, clock: clock)
    }

    /// Creates a ledger at `location` (a store directory or a PostgreSQL database), as ``initialize(at:configuration:administrator:clock:)``.
    public static func initialize(
        at location: StoreLocation, configuration: LedgerConfiguration, administrator: (id: String, publicKey: Ed25519PublicKey)? = nil,
        clock: @escaping @Sendable () -> Timestamp = LedgerTime.now
    ) throws -> Ledger {
        _ = try configuration.verifier()
        let encoded = try JSONEncoder().encode(configuration)
        let store = try LedgerStore.create(at: location, configuration: [UInt8](encoded))
        let ledger = try Ledger(store: store, clock: clock)
        if let administrator { try ledger.enrollFirstAdministrator(administrator.id, publicKey: administrator.publicKey) }
        return ledger
    }

    /// Opens the ledger in `directory`.
    public convenience init(opening directory: URL, clock: @escaping @Sendable () -> Timestamp = LedgerTime.now) throws {
        try self.init(store: LedgerStore(opening: directory), clock: clock)
    }

    /// Opens the ledger at `location` (a store directory or a PostgreSQL database).
    public convenience init(
        opening location: StoreLocation, clock: @escaping @Sendable () -> Timestamp = LedgerTime.now, signer: (any LedgerSigner)? = nil
    ) throws {
        try self.init(store: LedgerStore(opening: location), clock: clock, signer: signer)
    }

    /// The ledger over an open store. `signer`, when given, signs checkpoints and bundles instead of the
    /// signing key file (it must hold the signing key the store recorded): a key that never leaves its
    /// device can stand behind it.
    public init(store: LedgerStore, clock: @escaping @Sendable () -> Timestamp = LedgerTime.now, signer: (any LedgerSigner)? = nil) throws {
        self.store = store
        self.clock = clock
        self.externalSigner = signer
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

        /// Whether this is an account's deletion (read in place: a pattern match on a copy would
        /// retain and release every field of a transaction's payload).
        var isAccountDeletion: Bool {
            if case .deleteAccount = self { return true }
            return false
        }
    }

    /// Decides each submission and appends its record, all in one write group. A submission
    /// seen before (same notification UUID, same signed transaction from the same account, same
    /// deletion) appends nothing and returns the first decision.
    public func submit(_ submissions: [Submission], at: Timestamp) throws -> [Decision] {
        try submit(groups: [(submissions, at)])[0]
    }

    /// Group commit: decides every group in order in one write group (one commit, one `fsync`),
    /// each group's submissions at its own business time. Later submissions see earlier ones' records.
    ///
    /// The group is decided as an engine expects: every key the submissions need (command keys,
    /// vault keys, lineages, accounts) is computed first and loaded in a few batch reads; each
    /// submission is then decided in memory, in order, on that state plus the group's own changes;
    /// everything is written as one batch.
    public func submit(groups: [(submissions: [Submission], at: Timestamp)]) throws -> [[Decision]] {
        try submit(prepared: groups.map(prepare))
    }

    /// A group of submissions validated and keyed: all that deciding them needs and the store does
    /// not hold (validation, the HMAC keys of commands, lineages, transactions and UIDs). A
    /// ``GroupCommitter``'s producers prepare their groups on their own threads, so that its writer
    /// only decides and commits.
    struct PreparedGroup: Sendable {
        var submissions: [Prepared]
        var at: Timestamp
    }

    /// Validates and keys `group` (see ``PreparedGroup``).
    func prepare(_ group: (submissions: [Submission], at: Timestamp)) throws -> PreparedGroup {
        PreparedGroup(submissions: try group.submissions.map { try prepare($0, at: group.at) }, at: group.at)
    }

    /// Group commit of prepared groups (``submit(groups:)``); with `deferringSync`, the commit may
    /// return before it is durable (``LedgerStore/writeDeferringSync(_:)``).
    func submit(prepared groups: [PreparedGroup], deferringSync: Bool = false) throws -> [[Decision]] {
        try deferringSync
            ? store.writeDeferringSync { reader, writer in try apply(decide(groups, reader: reader), writer) }
            : store.write { reader, writer in try apply(decide(groups, reader: reader), writer) }
    }

    /// Groups decided and not yet written: their decisions and the batch that records them.
    struct Decided: Sendable {
        var decisions: [[Decision]]
        var batch: EngineBatch
    }

    /// Group commit of `groups` that also lets the next groups be decided while this commit syncs:
    /// `whenApplied` receives, before the commit, the batch and a view to decide the next groups on
    /// (``decideAhead(_:after:overlay:)``). `ahead`, decided so for these groups after the previous
    /// commit, is written as it is when nothing else was committed since; otherwise the groups are
    /// decided again here.
    /// `wroteAhead` says whether `ahead` was written.
    func submit(
        prepared groups: [PreparedGroup], ahead: DecidedAhead?, wroteAhead: inout Bool, whenApplied: (EngineBatch, ReadAheadView) -> Void
    ) throws -> [[Decision]] {
        var applied: EngineBatch?
        return try store.write(
            { reader, writer in
                let holding = ahead.flatMap { store.engine.follows($0.view) ? $0.decided : nil }
                wroteAhead = holding != nil
                let decided = try holding ?? decide(groups, reader: reader)
                applied = decided.batch
                return try apply(decided, writer)
            },
            whenApplied: { view in if let applied { whenApplied(applied, view) } })
    }

    /// Decides `groups` on the store as the group of `view` leaves it once committed: the committed
    /// store read through `overlay`, that group's batch, while it commits. Nil when the store moved
    /// on or a read is not one the overlay answers: the groups are then decided in their own write.
    func decideAhead(_ groups: [PreparedGroup], after view: ReadAheadView, overlay: EngineBatch) -> DecidedAhead? {
        let decided = try? store.engine.readAhead(view) { reader in try decide(groups, reader: OverlayReader(base: reader, batch: overlay)) }
        return decided.flatMap { $0 }.map { DecidedAhead(decided: $0, view: view) }
    }

    /// Groups decided ahead (``decideAhead(_:after:overlay:)``), with the view they were decided after.
    struct DecidedAhead: Sendable {
        var decided: Decided
        var view: ReadAheadView
    }

    private func apply(_ decided: Decided, _ writer: any EngineWriter) throws -> [[Decision]] {
        try writer.apply(decided.batch)
        return decided.decisions
    }

    /// Decides `groups` on what `reader` reads, in order, in one write group (see ``submit(groups:)``).
    private func decide(_ groups: [PreparedGroup], reader: any EngineReader) throws -> Decided {
        // The keys of every submission, gathered without copying the submissions themselves.
        // (Every submission with a UID carries its vault key: ``prepare(_:at:)`` computes it.)
        var commands: [CommandRef] = []
        var uids: [String] = []
        var vaultKeys: [Key128] = []
        var lineages: [LineageKey] = []
        var deletedUIDs: [(uid: String, vaultKey: Key128?)] = []
        for submissions in groups.lazy.map(\.submissions) {
            for index in submissions.indices {
                commands.append(submissions[index].commandRef)
                if let uid = submissions[index].uid {
                    if let vaultKey = submissions[index].vaultKey { vaultKeys.append(vaultKey) } else { uids.append(uid) }
                }
                if let lineage = submissions[index].lineage { lineages.append(lineage) }
                if case .deleteAccount(let uid) = submissions[index].submission { deletedUIDs.append((uid, submissions[index].vaultKey)) }
            }
        }
        // The group's first reads, announced before it reads the head (PostgreSQL sends them with the head's lock).
        try reader.prefetch(commands: commands, vaultKeys: vaultKeys, lineages: lineages)
        var group = try WriteGroup(store: store, reader: reader, clock: clock, size: commands.count)
        try group.prefetch(commands: commands, uids: uids, vaultKeys: vaultKeys)
        // A deletion decides on every lineage of its account: load them for all the group's deletions at once.
        var deleting: [AccountID] = []
        for (uid, vaultKey) in deletedUIDs {
            if let account = try group.pseudonym(ofUID: uid, vaultKey: vaultKey) { deleting.append(account) }
        }
        try group.load(lineages: lineages, accounts: deleting)
        // Through pointers: decided in place, each prepared submission is never copied (an array's
        // or a buffer's subscript returns a copy: a retain and release of each of its fields).
        let decisions = try groups.map { prepared in
            try prepared.submissions.withUnsafeBufferPointer { submissions in
                guard let first = submissions.baseAddress else { return [Decision]() }
                return try submissions.indices.map { try decide(first + $0, in: &group) }
            }
        }
        let batch = group.batch()
        Disposal.shared.release(consume group)
        return Decided(decisions: decisions, batch: batch)
    }

    /// Decides one submission (see ``submit(_:at:)``).
    public func submit(_ submission: Submission, at: Timestamp) throws -> Decision {
        try submit([submission], at: at)[0]
    }

    /// A validated submission with the keys deciding it needs.
    struct Prepared: Sendable {
        var submission: Submission
        var at: Timestamp
        /// The command's idempotency key.
        var command: Key128
        /// The authenticated UID, if any, and its identity-vault key.
        var uid: String?
        var vaultKey: Key128?
        /// The lineage its fact names: the command's home lineage (``Record/homeLineage``).
        var lineage: LineageKey?
        /// What it states, keyed: a transaction's facts, or a notification's.
        var facts: TransactionFacts?
        var notification: NotificationReceived?

        var commandRef: CommandRef { CommandRef(command, home: lineage) }
    }

    /// Validates `submission` and computes its keys. A submission is identified by what it carries
    /// (notification UUID; kind, account, transaction id and signed date; deleted UID).
    private func prepare(_ submission: Submission, at: Timestamp) throws -> Prepared {
        try Self.validate(submission, at: at)
        switch submission {
        case .transaction(let kind, let uid, let payload, let provenance):
            let command = try store.keys.command(
                describedBy: "transaction", kind.name, uid ?? "", payload.environment.rawValue, payload.transactionId, String(payload.signedDate))
            return Prepared(
                submission: submission, at: at, command: command, uid: uid,
                vaultKey: try uid.map(store.keys.vaultKey(uid:)), lineage: try lineage(of: payload),
                facts: try facts(payload, provenance: provenance))
        case .notification(let payload, let provenance):
            return Prepared(
                submission: submission, at: at, command: try store.keys.command(describedBy: "notification", payload.notificationUUID),
                lineage: try payload.transaction.map(lineage(of:)), notification: try notificationFact(payload, provenance: provenance))
        case .deleteAccount(let uid):
            return Prepared(
                submission: submission, at: at, command: try store.keys.command(describedBy: "delete", uid), uid: uid,
                vaultKey: try store.keys.vaultKey(uid: uid))
        }
    }

    /// Decides one prepared submission in `group`.
    ///
    /// Idempotency: a retry is answered with the recorded decision and the entitlement as it stands
    /// now, appending nothing: a notification always (different content under the same UUID is a
    /// conflict); a transaction when deciding it again would change nothing and tell the same
    /// outcome; a deletion while the UID has no live account. Otherwise it is decided again and
    /// recorded as the command's next attempt (a restore retried after a transfer, a deletion, a
    /// refund or an expiry; a UID deleted again after reuse).
    ///
    /// `prepared` is read in place: only the fields deciding needs are copied out, not the whole
    /// submission with its payload's strings.
    private func decide(_ prepared: UnsafePointer<Prepared>, in group: inout WriteGroup) throws -> Decision {
        let prior = try group.latestRecord(of: prepared.pointee.commandRef)
        let attempt = prior.map { $0.attempt + 1 } ?? 0
        let at = prepared.pointee.at
        let command: Command
        var erasedUID: String?
        switch prepared.pointee.submission {
        case .transaction(let kind, let uid, _, _):
            // ``prepare(_:at:)`` keys every transaction's lineage and facts.
            guard let lineage = prepared.pointee.lineage, let facts = prepared.pointee.facts else {
                throw SubmissionError("a transaction was not keyed before it was decided", code: "internal")
            }
            var account: AccountID?
            if let uid {
                // A retry from an account deleted since is decided without issuing the UID a new
                // identity: its record names a pseudonym that maps to nobody.
                let vaultKey = prepared.pointee.vaultKey
                account =
                    try group.pseudonym(ofUID: uid, vaultKey: vaultKey)
                    ?? (prior == nil ? try group.pseudonym(forUID: uid, vaultKey: vaultKey) : try Self.unlinkedPseudonym())
            }
            command = .submitTransaction(TransactionSubmitted(kind: kind, account: account, lineage: lineage, transaction: facts))
        case .notification:
            // ``prepare(_:at:)`` keys every notification's fact.
            guard let fact = prepared.pointee.notification else {
                throw SubmissionError("a notification was not keyed before it was decided", code: "internal")
            }
            if let prior, prior.events.first != .notificationReceived(fact) {
                var uuid = ""
                if case .notification(let payload, _) = prepared.pointee.submission { uuid = payload.notificationUUID }
                throw SubmissionError("notificationUUID \(uuid) was delivered before with different content", code: "conflict")
            }
            command = .receiveNotification(fact)
        case .deleteAccount(let uid):
            guard let account = try group.pseudonym(ofUID: uid, vaultKey: prepared.pointee.vaultKey) else {
                if let prior { return answer(toRetryOf: prior, lineage: nil, at: at, state: group.state) }
                return Decision(reason: .unknownAccount, sequence: nil, entitlement: nil, duplicate: false)
            }
            command = .deleteAccount(account)
            erasedUID = uid
        }
        try group.load(lineages: command.lineages, accounts: erasedUID == nil ? [] : command.accounts)
        // Read `group.state` in place, never through a copy kept past `append`: a copy alive while
        // `append` evolves the state would make it copy every lineage the group loaded, per line.
        let events = Decider.decide(command, state: group.state, at: at)
        if let prior, isRetry(prepared, prior: prior, decided: events, before: group.state) {
            return answer(toRetryOf: prior, lineage: command.lineages.first, at: at, state: group.state)
        }
        let record = try group.append(events, at: at, command: prepared.pointee.command, attempt: attempt)
        if let erasedUID { try group.eraseIdentity(uid: erasedUID, vaultKey: prepared.pointee.vaultKey) }
        return Decision(events: events, sequence: record.sequence, at: at, duplicate: false)
    }

    /// Whether a submission seen before (`prior`) is a retry to answer with its first decision
    /// rather than a new attempt: a notification always (Apple redelivers it; its content was
    /// checked); a transaction when deciding it again would change nothing and tell the caller the
    /// same outcome and code, and for a denial the same reason, whose message says what to do
    /// (otherwise, e.g. after a transfer, a deletion, a refund or an expiry, it is recorded and
    /// answered anew).
    private func isRetry(_ prepared: UnsafePointer<Prepared>, prior: Record, decided events: [LedgerEvent], before: LedgerState) -> Bool {
        switch prepared.pointee.submission {
        case .notification: return true
        case .deleteAccount: return false
        case .transaction:
            guard let first = prior.decision, let now = events.last.flatMap({ if case .decisionIssued(let d) = $0 { d } else { nil } })
            else { return false }
            return StateProjection.changesNothing(events, in: before)
                && (first.reason.outcome, first.reason.code) == (now.reason.outcome, now.reason.code)
                && (first.reason.outcome != .denied || first.reason == now.reason)
        }
    }

    /// The first decision of a retried submission, with the entitlement as it stands now.
    private func answer(toRetryOf prior: Record, lineage: LineageKey?, at: Timestamp, state: LedgerState) -> Decision {
        var decision = Decision(events: prior.events, sequence: prior.sequence, at: at, duplicate: true)
        if decision.entitlement != nil, let lineage {
            let current = state.lineage(lineage)
            decision.entitlement = current.visibleEntitlement.map { EntitlementView($0, lineage: current, at: at) }
        }
        return decision
    }

    /// A pseudonym for a submitter whose identity was erased: random and never stored in the vault.
    private static func unlinkedPseudonym() throws -> AccountID {
        guard let account = AccountID(try Digest.randomBytes(16)) else { throw LedgerStoreError.corrupt("pseudonym") }
        return account
    }

    private func lineage(of payload: TransactionPayload) throws -> LineageKey {
        try lineage(originalTransactionId: payload.originalTransactionId, environment: payload.environment)
    }

    private func notificationFact(_ payload: NotificationPayload, provenance: Provenance) throws -> NotificationReceived {
        NotificationReceived(
            notificationType: payload.notificationType, subtype: payload.subtype, signedDate: payload.signedDate,
            lineage: try payload.transaction.map(lineage(of:)), transaction: try payload.transaction.map { try facts($0, provenance: provenance) })
    }

    /// Refuses, before anything is decided, times outside ``LedgerTime/supportedRange``, ownership
    /// types other than `PURCHASED` and `FAMILY_SHARED`, and transactions that are not
    /// auto-renewable subscriptions (a `type` other than that, or no `expiresDate`).
    public static func validate(_ submission: Submission, at: Timestamp) throws {
        // Field names are built only for a refusal: every line passes these checks.
        // A field of the transaction or notification data is `invalid-payload`, as the decoders
        // answer for the same field; `at` is the line's own (`invalid-argument`).
        let payload = "invalid-payload"
        func check(_ time: Timestamp?, _ field: @autoclosure () -> String, code: String = payload) throws {
            guard let time, !LedgerTime.supportedRange.contains(time) else { return }
            throw SubmissionError(JSONValue.outsideSupportedRange(field(), time), code: code)
        }
        func check(_ transaction: TransactionPayload, _ context: String) throws {
            func checkIdentifier(_ kind: AppleIdentifier, _ value: String) throws {
                if let problem = kind.problem(value, field: "\(context).\(kind.rawValue)") { throw SubmissionError(problem, code: payload) }
            }
            try checkIdentifier(.originalTransactionId, transaction.originalTransactionId)
            try checkIdentifier(.transactionId, transaction.transactionId)
            try checkIdentifier(.productId, transaction.productId)
            if let type = transaction.type, type != "Auto-Renewable Subscription" {
                throw SubmissionError(
                    "\(context).type \"\(type)\" is not an auto-renewable subscription; the ledger binds only subscriptions", code: payload)
            }
            guard transaction.expiresDate != nil else {
                throw SubmissionError("\(context) is missing expiresDate, which every subscription transaction carries", code: payload)
            }
            guard transaction.inAppOwnershipType == "PURCHASED" || transaction.inAppOwnershipType == "FAMILY_SHARED" else {
                throw SubmissionError(
                    "\(context).inAppOwnershipType \"\(transaction.inAppOwnershipType)\" is neither PURCHASED nor FAMILY_SHARED",
                    code: payload)
            }
            try check(transaction.purchaseDate, "\(context).purchaseDate")
            try check(transaction.expiresDate, "\(context).expiresDate")
            try check(transaction.revocationDate, "\(context).revocationDate")
            try check(transaction.signedDate, "\(context).signedDate")
        }
        try check(at, "at", code: "invalid-argument")
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
            environment: environment, signedDate: payload.signedDate, provenance: provenance, isUpgraded: payload.isUpgraded == true)
    }

    // MARK: Queries

    /// The lineage key of an original transaction id in `environment` (the ledger's by default).
    /// - Throws: ``SubmissionError`` when `originalTransactionId` is not an App Store transaction id
    ///   (``AppleIdentifier``): no lineage can have it.
    public func lineage(originalTransactionId: String, environment: AppleEnvironment? = nil) throws -> LineageKey {
        if let problem = AppleIdentifier.originalTransactionId.problem(originalTransactionId, field: "originalTransactionId") {
            throw SubmissionError(problem)
        }
        return try store.keys.lineage(
            environment: (environment ?? configuration.environment).rawValue, originalTransactionId: originalTransactionId)
    }

    /// The state of `lineages` and of the lineages bound to `accounts`: the persisted read models
    /// now, or, at a time, what the ledger knew then: the records of those lineages recorded at or
    /// before `at` (`recordedAt`, the ledger's clock: a prefix of the log, found by binary search),
    /// found through the lineage index and replayed. It reads only what it is asked about, so its
    /// time and memory do not depend on the size of the log.
    /// - Complexity: O(log n) to find the cut, then O(records of those lineages).
    public func state(lineages: [LineageKey] = [], accounts: [AccountID] = [], asOf at: Timestamp?) throws -> LedgerState {
        try store.read { reader in
            let everBound = try reader.lineages(boundTo: accounts)
            let wanted = Array(Set(lineages + everBound.values.joined()))
            var state = LedgerState()
            if let at {
                let cut = try reader.lastSequence(recordedAtOrBefore: at)
                for lineage in wanted {
                    var history = LedgerState()
                    for sequence in try reader.sequences(ofLineage: lineage, through: cut) {
                        guard let bytes = try reader.record(sequence) else { throw LedgerStoreError.corrupt("record \(sequence) is missing") }
                        for event in try RecordCodec.decode(bytes, sequence: sequence).events { StateProjection.evolve(&history, event) }
                    }
                    if let replayed = history.lineages[lineage] { state.lineages[lineage] = replayed }
                }
            } else {
                state.lineages = try reader.lineageStates(wanted)
            }
            for account in accounts {
                let bound = (everBound[account] ?? []).filter { state.lineage($0).binding == .bound(account) }
                if !bound.isEmpty { state.accountLineages[account] = Set(bound) }
            }
            return state
        }
    }

    /// Who owns a lineage, and its entitlement at `at` (now by default): as the ledger knew it at
    /// `at` (see ``state(lineages:accounts:asOf:)``), active or not at `at`.
    public func binding(originalTransactionId: String, environment: AppleEnvironment? = nil, at: Timestamp? = nil) throws
        -> BindingView
    {
        let lineage = try lineage(originalTransactionId: originalTransactionId, environment: environment)
        let state = try self.state(lineages: [lineage], asOf: at).lineage(lineage)
        let time = at ?? clock()
        return BindingView(
            binding: state.binding, uid: try state.binding.liveAccount.flatMap { a in try store.read { try store.uid(of: a, in: $0) } },
            entitlement: state.visibleEntitlement.map { EntitlementView($0, lineage: state, at: time) })
    }

    /// The entitlements of the live account `uid` at `at` (now by default), as the ledger knew them
    /// at `at`. A deleted account is unknown: its identity mapping is gone.
    public func account(uid: String, at: Timestamp? = nil) throws -> AccountView {
        guard let account = try store.read({ try store.pseudonym(ofUID: uid, in: $0) }) else {
            return AccountView(uid: uid, known: false, entitlements: [])
        }
        let state = try self.state(accounts: [account], asOf: at)
        let time = at ?? clock()
        let entitlements = (state.accountLineages[account] ?? []).sorted().compactMap { key -> EntitlementView? in
            let lineage = state.lineage(key)
            guard let entitlement = lineage.visibleEntitlement, entitlement.account == account else { return nil }
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
