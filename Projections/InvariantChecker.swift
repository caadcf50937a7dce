public import LedgerCore

/// A violated invariant (numbered as in `docs/events.md`) and the record where it first held false.
public struct InvariantViolation: Equatable, Sendable, CustomStringConvertible {
    public var invariant: Int
    public var sequence: UInt64
    public var message: String

    public init(invariant: Int, sequence: UInt64, message: String) {
        self.invariant = invariant
        self.sequence = sequence
        self.message = message
    }

    public var description: String { "invariant \(invariant) violated at record \(sequence): \(message)" }
}

/// Replays records and checks the ledger's invariants at every step:
///
/// 1. each lineage is bound to at most one live account, and a deleted account stays bound to none;
/// 2. a binding changes owner only through an applied support transfer;
/// 3. an entitlement exists only for the bound account and only from a verified store transaction;
/// 4. a tombstoned lineage grants nothing until a transfer and a verified restore, and a lineage a
///    transfer moved grants nothing until its bound account's verified restore;
/// 5. an applied transfer has a request by an authorised operator, an approval of the same plan by a
///    different authorised approver, both recorded before it, and the applier's signature; every roster
///    change after the first administrator is signed by an administrator, and by a second one once
///    two or more are enrolled (only the bootstrap, enrolling the second administrator, is signed by one);
/// 6. after a transfer the previous account holds no entitlement from that lineage;
/// 7. FAMILY_SHARED ownership never binds and never grants;
/// 8. sequence numbers are gapless (the hash chain is checked by the store).
///
/// Invariant 9 (persisted read models equal a fresh replay) is checked by the store.
///
/// Given ``SignatureChecks``, invariant 5 also requires every roster change and transfer step to
/// carry a valid Ed25519 signature by the staff member it names (the store passes libcrypto's; the
/// checker itself stays pure).
///
/// History an upgrade copied from storage format 1 (records 2 through `copiedRecords + 1` after a
/// `store-upgraded` record 1) is judged by format 1's rules: an apply without a signature and a
/// roster change signed by one administrator are not violations there (format 1 recorded no more),
/// and are listed in ``formatOneNotes`` instead.
public struct InvariantChecker: Sendable {
    /// The cryptography invariant 5 needs, supplied by the caller. Each throws when the check cannot be
    /// made (the cryptographic library failed), which is not a violation: the checker passes the error on.
    public struct SignatureChecks: Sendable {
        /// True when `signature` is a valid Ed25519 signature of `message` under the raw `publicKey`.
        public var verify: @Sendable (_ publicKey: [UInt8], _ message: [UInt8], _ signature: [UInt8]) throws -> Bool
        /// SHA-256.
        public var sha256: @Sendable ([UInt8]) throws -> [UInt8]

        public init(
            verify: @escaping @Sendable ([UInt8], [UInt8], [UInt8]) throws -> Bool,
            sha256: @escaping @Sendable ([UInt8]) throws -> [UInt8]
        ) {
            self.verify = verify
            self.sha256 = sha256
        }
    }

    public private(set) var state = LedgerState()
    public private(set) var violations: [InvariantViolation] = []
    private var lastSequence: UInt64 = 0
    /// What the checks need of the fact that opened the current record: what caused the effects
    /// that follow it.
    private var cause = Cause.none
    /// Cases whose request was made by an operator enrolled at the time.
    private var authorisedRequests: Set<String> = []
    /// Cases approved by a different approver enrolled at the time, for the requested plan.
    private var authorisedApprovals: Set<String> = []
    private let signatures: SignatureChecks?
    /// Lean: the lineages are kept packed in ``leanLineages`` (``state`` has none) and no
    /// ``LedgerState/accountLineages`` sets are kept; invariant 1 counts the lineages bound to each
    /// account instead (a whole-log replay).
    ///
    /// The counts follow the full checker's sets exactly: a binding adds the lineage to its account's
    /// set, a tombstone or a transfer removes it from the account the event names, a deletion empties
    /// the account's set. A lineage in the set of the account its binding names is marked in its
    /// packed slot (a bit; `workingCounted` for the working lineage); a lineage in another account's
    /// set (a rebind without a transfer leaves it in the old owner's) is kept in ``countedApart``.
    /// An account deleted while still bound cannot find the slots that marked it, so it goes to
    /// ``deletedWhileBound``: marks of its no longer count, and its later lineages are kept apart.
    /// Both tables stay empty on a history that holds invariant 1.
    private let lean: Bool
    /// In lean mode: the lineages' states.
    public private(set) var leanLineages = PackedLineages()
    /// In lean mode: the numbers in ``leanLineages`` of the product ids views name, by the views'
    /// numbers (``numberViewProducts(_:)``).
    private var viewProducts: [UInt32] = []
    /// In lean mode: the lineage the record being checked works on (a record mostly names one),
    /// read from ``leanLineages`` once and stored back when the record ends or names another.
    private var workingLineage: LineageKey?
    private var workingState: PlainLineage?
    private var workingChanged = false
    /// In lean mode: whether the working lineage is in the set of the account its binding names.
    private var workingCounted = false
    /// In lean mode: how many lineages each account's set holds.
    private var boundCounts: [AccountID: Int32] = [:]
    /// In lean mode: the lineages in an account's set that no slot marks (see ``lean``).
    private var countedApart: [AccountID: Set<LineageKey>] = [:]
    /// In lean mode: the accounts deleted while their set held lineages (see ``lean``).
    private var deletedWhileBound: Set<AccountID> = []
    /// In lean mode, the lineages this checker keeps (by the first 8 bytes of their key); nil: all.
    private let lineageRange: ClosedRange<UInt64>?
    /// With a lineage range: invariant 1 as far as this range sees it (the sequence of an account's
    /// deletion, the account, and how many of its lineages in the range were still bound), for the
    /// caller to add up over the ranges.
    public private(set) var deletionsWhileBound: [(sequence: UInt64, account: AccountID, bound: Int)] = []
    /// The last record of history copied from format 1 (0: none).
    private var formatOneThrough: UInt64 = 0
    /// The signed bytes of every format-2 roster change, with its record: each may be used once.
    private var rosterMessages: [[UInt8]: UInt64] = [:]
    /// Support steps of format-1 history that format 2 would require more signatures of (see the type).
    public private(set) var formatOneNotes: [InvariantViolation] = []

    /// A checker; without `signatures` it checks roles and plans but not signatures. `lean` (for a
    /// replay of the whole log) keeps less state: see ``state``. With `lineageRange` (lean only), it
    /// checks and keeps only the lineages whose key starts in the range, and everything that names no
    /// lineage (the roster, transfer cases, deletions), so a replay can run one pass per range of the
    /// key space with the state of that range only; invariant 1 then goes to ``deletionsWhileBound``.
    public init(signatures: SignatureChecks? = nil, lean: Bool = false, lineageRange: ClosedRange<UInt64>? = nil) {
        self.signatures = signatures
        self.lean = lean || lineageRange != nil
        self.lineageRange = lineageRange
    }

    /// Makes room for `count` lineages at once (a replay that knows about how many it will keep
    /// avoids growing the table, which briefly holds the old and the new one). Lean, also for as many
    /// accounts' bound counts: an account is counted only once a lineage is bound to it.
    public mutating func reserveCapacity(lineages count: Int) {
        if lean {
            leanLineages.reserveCapacity(count)
            boundCounts.reserveCapacity(count)
        } else {
            state.lineages.reserveCapacity(count)
        }
    }

    /// The lineages kept (in ``leanLineages`` when lean, else in ``state``).
    public var lineageCount: Int { lean ? leanLineages.count : state.lineages.count }

    /// What the checks read of `lineage`'s state so far: its binding and its entitlement's account,
    /// revocation and end, as plain values (no copy of the product id per check).
    private mutating func lineageFacts(_ lineage: LineageKey) -> LineageFacts {
        guard lean else { return LineageFacts(state.lineages[lineage]) }
        loadWorkingLineage(lineage)
        return LineageFacts(plain: workingState)
    }

    private struct LineageFacts {
        var binding: Binding = .unbound
        var entitlement: (account: AccountID, revokedAt: Timestamp?, ended: Bool)?
        var awaitsRestore = false

        init(_ state: LineageState?) {
            guard let state else { return }
            binding = state.binding
            awaitsRestore = state.awaitsRestore
            if let entitlement = state.entitlement {
                self.entitlement = (entitlement.account, entitlement.revokedAt, entitlement.endedBecause != nil)
            }
        }

        init(plain state: PlainLineage?) {
            guard let state else { return }
            binding = state.binding
            awaitsRestore = state.awaitsRestore
            if let entitlement = state.entitlement {
                self.entitlement = (entitlement.account, entitlement.revokedAt, entitlement.endedBecause != nil)
            }
        }
    }

    /// Makes `lineage` the working lineage (lean mode).
    private mutating func loadWorkingLineage(_ lineage: LineageKey) {
        guard workingLineage != lineage else { return }
        storeWorkingLineage()
        workingLineage = lineage
        let entry = leanLineages.plainEntry(lineage)
        workingState = entry?.state
        workingCounted = entry?.marked ?? false
    }

    /// Stores the working lineage's state back when it changed (lean mode).
    private mutating func storeWorkingLineage() {
        if workingChanged, let workingLineage { leanLineages.set(workingLineage, plain: workingState, marked: workingCounted) }
        workingChanged = false
    }

    /// Whether this checker keeps `lineage`.
    private func keeps(_ lineage: LineageKey?) -> Bool {
        guard let lineageRange, let lineage else { return true }
        return lineageRange.contains(lineage.key.high)
    }

    /// Accounts bound to at least one lineage.
    public var boundAccounts: Int { lean ? boundCounts.values.filter { $0 > 0 }.count : state.accountLineages.count }

    /// Checks every record of `records` in order; throws only what `signatures` throws.
    public static func check(_ records: some Sequence<Record>, signatures: SignatureChecks? = nil) throws -> [InvariantViolation] {
        var checker = InvariantChecker(signatures: signatures)
        for record in records { try checker.check(record) }
        return checker.violations
    }

    /// Checks one record against the state so far, event by event, then applies it; throws only what
    /// the signature checks throw (the rest of the record is then not applied).
    public mutating func check(_ record: Record) throws { try check(sequence: record.sequence, events: record.events[...]) }

    /// ``check(_:)`` of the record at `sequence` whose events are `events` (a replay keeps a
    /// batch of records' events in one array).
    public mutating func check(sequence seq: UInt64, events: ArraySlice<LedgerEvent>) throws {
        if seq != lastSequence + 1 {
            violations.append(InvariantViolation(invariant: 8, sequence: seq, message: "sequence \(seq) follows \(lastSequence)"))
        }
        lastSequence = seq
        cause = .none
        defer { if lean { storeWorkingLineage() } }
        for event in events {
            // Outside the range: a transfer step still updates its case (the cases are kept whole);
            // anything else about such a lineage is another pass's.
            switch event {
            case .transferRequested, .transferApproved, .transferApplied, .transferRefused: try check(event, sequence: seq)
            default: if lineageRange == nil || keeps(event.lineage) { try check(event, sequence: seq) }
            }
        }
    }

    /// Numbers the product ids the views checked next name: the views' number k is `names[k]` of
    /// all the names given so far, in order (lean mode).
    public mutating func numberViewProducts(_ names: [String]) {
        for name in names { viewProducts.append(leanLineages.productNumber(of: name)) }
    }

    /// ``check(sequence:events:)`` of a record whose events are all views (lean mode: a whole-log
    /// replay; a grant's product is a number of ``numberViewProducts(_:)``).
    public mutating func check(sequence seq: UInt64, views: ArraySlice<EventView>) {
        precondition(lean, "views are checked by a lean checker")
        if seq != lastSequence + 1 {
            violations.append(InvariantViolation(invariant: 8, sequence: seq, message: "sequence \(seq) follows \(lastSequence)"))
        }
        lastSequence = seq
        cause = .none
        defer { storeWorkingLineage() }
        for var view in views where lineageRange == nil || keeps(view.lineage) {
            if view.kind == .entitlementGranted { view.product = viewProducts[Int(view.product)] }
            checkBeforeApplying(view, sequence: seq)
            evolveLean(view)
        }
    }

    /// Checks one event of the record at `seq` against the state so far, then applies it.
    private mutating func check(_ event: LedgerEvent, sequence seq: UInt64) throws {
        if let view = lean ? EventView(event, product: { leanLineages.productNumber(of: $0) }) : EventView(event, product: { _ in 0 }) {
            checkBeforeApplying(view, sequence: seq)
            if lean { evolveLean(view) } else { StateProjection.evolve(&state, event) }
            return
        }
        func violated(_ invariant: Int, _ message: String) {
            violations.append(InvariantViolation(invariant: invariant, sequence: seq, message: message))
        }
        switch event {
        case .transactionSubmitted, .notificationReceived, .accountDeletionRequested, .lineageBound, .entitlementGranted,
            .entitlementEnded, .entitlementRevoked, .entitlementReinstated, .lineageTombstoned, .accountDeleted, .decisionIssued:
            break  // a view: checked above
        case .staffEnrolled, .staffRemoved:
            cause = .none
            if let change = RosterChange(event) { try check(change, sequence: seq) }
        case .rosterChangeProposed, .transferRefused:
            cause = .none
        case .transferRequested(let e):
            cause = .none
            if let member = state.staff[e.requestedBy], member.roles.contains(.operator_), try planDigestMatches(e),
                try signed(by: e.requestedBy, message: e.planDigest.bytes, signature: e.signature)
            {
                authorisedRequests.insert(e.plan.caseId)
            }
        case .transferApproved(let e):
            cause = .none
            if let request = state.transfers[e.caseId]?.request, let member = state.staff[e.approvedBy],
                member.roles.contains(.approver), e.approvedBy != request.requestedBy, e.planDigest == request.planDigest,
                try signed(by: e.approvedBy, message: e.planDigest.bytes, signature: e.signature)
            {
                authorisedApprovals.insert(e.caseId)
            }
        case .transferApplied(let e):
            cause = .none
            let transfer = state.transfers[e.caseId]
            if !authorisedRequests.contains(e.caseId) {
                violated(5, "transfer \(e.caseId) applied without a request by an authorised operator")
            }
            if !authorisedApprovals.contains(e.caseId) || transfer?.request.planDigest != e.planDigest {
                violated(5, "transfer \(e.caseId) applied without an approval of its plan by a different authorised approver")
            }
            if let plan = transfer?.request.plan, plan.lineage != e.lineage || plan.source != e.source || plan.target != e.target {
                violated(5, "transfer \(e.caseId) applied to a lineage, source or target other than its approved plan")
            }
            if transfer?.applied == true { violated(5, "transfer \(e.caseId) applied a second time") }
            if isFormatOneHistory(seq) && e.signature.isEmpty {
                formatOneNotes.append(
                    InvariantViolation(
                        invariant: 5, sequence: seq,
                        message: "transfer \(e.caseId) was applied in storage format 1, which recorded no apply signature"))
            } else if try !TransferDecider.isApplier(e.appliedBy, state: state)
                || !signed(by: e.appliedBy, message: e.signedMessage, signature: e.signature)
            {
                violated(5, "transfer \(e.caseId) applied without a valid apply signature by an enrolled operator or approver (\(e.appliedBy))")
            }
            // Checked before the apply, which drops the lineage's entitlement: the decider ends the
            // previous account's entitlement first.
            if let entitlement = lineageFacts(e.lineage).entitlement, entitlement.account == e.source.account, !entitlement.ended {
                violated(6, "transfer \(e.caseId) applied while the previous account still holds a live entitlement on \(e.lineage)")
            }
        case .storeUpgraded(let e):
            if seq == 1 { formatOneThrough = 1 + e.copiedRecords }
        }

        if lean {
            evolveLean(event)
        } else {
            StateProjection.evolve(&state, event)
        }
    }

    /// The checks of a fact, an effect or a decision (a view) before it is applied.
    private mutating func checkBeforeApplying(_ event: EventView, sequence seq: UInt64) {
        func violated(_ invariant: Int, _ message: String) {
            violations.append(InvariantViolation(invariant: invariant, sequence: seq, message: message))
        }
        let zero = AccountID(Key128.zero)
        switch event.kind {
        case .transactionSubmitted, .notificationReceived:
            cause = Cause(event)
        case .accountDeletionRequested:
            cause = .none
        case .lineageBound:
            guard let lineage = event.lineage else { return }
            let account = event.account ?? zero
            let binding = lineageFacts(lineage).binding
            if binding != .unbound {
                violated(binding.isTombstone ? 4 : 1, "lineage \(lineage) bound to \(account) while \(binding.summary)")
                violated(2, "lineage \(lineage) changed owner without a support transfer")
            }
            if let facts = causeFacts(for: lineage) {
                if facts.familyShared { violated(7, "FAMILY_SHARED transaction bound lineage \(lineage)") }
                if let s = cause.submission, s.kind == .reconciliation || s.account != account {
                    violated(2, "lineage \(lineage) bound by a \(s.kind.name) that does not speak for \(account)")
                }
                if cause.isNotification { violated(2, "a server notification bound lineage \(lineage)") }
            } else {
                violated(2, "lineage \(lineage) bound without a verified transaction")
            }
        case .entitlementGranted:
            guard let lineage = event.lineage else { return }
            let account = event.account ?? zero
            let current = lineageFacts(lineage)
            let binding = current.binding
            if binding.isTombstone {
                violated(4, "tombstoned lineage \(lineage) granted an entitlement")
            } else if binding != .bound(account) {
                violated(3, "entitlement granted to \(account), which is not bound to lineage \(lineage)")
            }
            // A bound lineage without an entitlement of its own was just bound by its account's own
            // submission, or moved by a support transfer: only the bound account's verified submission grants it.
            if case .bound(let owner) = binding, current.awaitsRestore, !isOwnSubmission(on: lineage, by: owner) {
                violated(4, "lineage \(lineage) granted an entitlement without a verified restore by its bound account \(owner)")
            }
            if let facts = causeFacts(for: lineage) {
                if facts.familyShared { violated(7, "FAMILY_SHARED transaction granted on \(lineage)") }
                // `entitlementReinstated` clears `revokedAt` first, so a reversed refund passes.
                if let revokedAt = current.entitlement?.revokedAt, facts.purchaseDate <= revokedAt {
                    violated(3, "a transaction purchased before the refund granted the revoked entitlement on \(lineage) again")
                }
            } else {
                violated(3, "entitlement on \(lineage) granted without a verified store transaction")
            }
        case .entitlementEnded, .entitlementRevoked, .entitlementReinstated:
            guard let lineage = event.lineage else { return }
            let account = event.account ?? zero
            if lineageFacts(lineage).entitlement?.account != account {
                violated(3, "\(event.name) for \(account), which holds no entitlement on \(lineage)")
            }
        case .lineageTombstoned:
            guard let lineage = event.lineage else { return }
            let account = event.account ?? zero
            if lineageFacts(lineage).binding != .bound(account) {
                violated(2, "lineage \(lineage) tombstoned for \(account), which does not own it")
            }
        case .accountDeleted:
            let account = event.account ?? zero
            let bound = lean ? Int(boundCounts[account] ?? 0) : state.accountLineages[account]?.count ?? 0
            if lineageRange != nil {
                if bound > 0 { deletionsWhileBound.append((seq, account, bound)) }
            } else if bound > 0 {
                violated(1, Self.deletedWhileBound(account, bound))
            }
        case .decisionIssued:
            // Checked against the record's cause, which applying a decision does not change.
            if let reason = event.decision, let facts = causeFacts(for: event.lineage), facts.familyShared, reason != .familyShared {
                violated(7, "FAMILY_SHARED transaction decided \(reason.code) instead of family-sharing-unsupported")
            }
        }
    }

    /// The message of invariant 1.
    public static func deletedWhileBound(_ account: AccountID, _ bound: Int) -> String {
        "account \(account) deleted while still bound to \(bound) lineage(s)"
    }

    /// Applies a view to the packed lineages and the rest of the state, without account sets: what
    /// it does to the full checker's sets it does to the bound counts (see ``lean``).
    private mutating func evolveLean(_ event: EventView) {
        if event.kind == .accountDeleted, let account = event.account {
            if boundCounts.removeValue(forKey: account) ?? 0 > 0 { deletedWhileBound.insert(account) }
            if !countedApart.isEmpty { countedApart[account] = nil }
            // What `StateProjection.evolve(beyondLineages:_:accountLineages:)` does for a deletion (and
            // for no other view without account sets).
            state.deletedAccounts.insert(account)
        }
        guard let changed = StateProjection.changedLineage(event), keeps(changed) else { return }
        changeWorkingLineage(changed) { StateProjection.evolve(lineage: &$0, event) }
        guard let account = event.account else { return }
        switch event.kind {
        case .lineageBound: count(account, changed, true)
        case .lineageTombstoned: count(account, changed, false)
        default: break
        }
    }

    /// Applies a roster or transfer step or the upgrade record (events with no view) in lean mode.
    private mutating func evolveLean(_ event: LedgerEvent) {
        StateProjection.evolve(beyondLineages: &state, event, accountLineages: false)
        // A transfer applied to a lineage of another range changes only its case here.
        guard case .transferApplied(let e) = event, keeps(e.lineage) else { return }
        // As `StateProjection.evolve(lineage:_:)` applies a transfer: bound to the target, the
        // entitlement kept and ended `transferred`.
        changeWorkingLineage(e.lineage) {
            var kept = $0?.entitlement
            kept?.endedBecause = .transferred
            $0 = PlainLineage(binding: .bound(e.target), entitlement: kept)
        }
        count(e.source.account, e.lineage, false)
        count(e.target, e.lineage, true)
    }

    /// Changes the state of `changed` (made the working lineage) with `evolve`, moving the marks of
    /// the accounts its binding names before and after (lean mode).
    @inline(__always)
    private mutating func changeWorkingLineage(_ changed: LineageKey, _ evolve: (inout PlainLineage?) -> Void) {
        loadWorkingLineage(changed)
        let before = workingState?.binding.account
        let beforeCounted = before.map { counts($0, changed) } ?? false
        evolve(&workingState)
        workingChanged = true
        let after = workingState?.binding.account
        if after != before {
            // The slot now names another account: the old one's mark moves apart, the new one's in.
            if let before, beforeCounted { countedApart[before, default: []].insert(changed) }
            workingCounted = false
            if let after, marksSlot(after), countedApart[after]?.remove(changed) != nil {
                if countedApart[after]?.isEmpty == true { countedApart[after] = nil }
                workingCounted = true
            }
        }
    }

    /// Whether the working lineage's slot mark stands for `account` (the account its binding names,
    /// unless deleted while bound).
    private func marksSlot(_ account: AccountID) -> Bool {
        workingState?.binding.account == account && (deletedWhileBound.isEmpty || !deletedWhileBound.contains(account))
    }

    /// Whether `account`'s set holds the working lineage `lineage` (lean mode).
    private func counts(_ account: AccountID, _ lineage: LineageKey) -> Bool {
        if marksSlot(account) { return workingCounted }
        return !countedApart.isEmpty && countedApart[account]?.contains(lineage) == true
    }

    /// Adds the working lineage `lineage` to `account`'s set, or removes it (lean mode).
    private mutating func count(_ account: AccountID, _ lineage: LineageKey, _ counted: Bool) {
        guard counts(account, lineage) != counted else { return }
        boundCounts[account, default: 0] += counted ? 1 : -1
        if marksSlot(account) {
            workingCounted = counted
        } else if counted {
            countedApart[account, default: []].insert(lineage)
        } else {
            countedApart[account]?.remove(lineage)
            if countedApart[account]?.isEmpty == true { countedApart[account] = nil }
        }
    }

    /// Whether record `seq` is history an upgrade copied from format 1.
    private func isFormatOneHistory(_ seq: UInt64) -> Bool { seq > 1 && seq <= formatOneThrough }

    /// Checks a roster change against the rules of its time (``TransferDecider/changeRoster(_:signatures:state:formatOneRules:)``).
    private mutating func check(_ change: RosterChange, sequence seq: UInt64) throws {
        func violated(_ message: String) { violations.append(InvariantViolation(invariant: 5, sequence: seq, message: message)) }
        guard let admin = change.signer else {
            if !state.staff.isEmpty { violated("staff \(change.staff) enrolled without an administrator after the roster was set up") }
            return
        }
        let formatOne = isFormatOneHistory(seq)
        let message = change.signedMessage
        if !formatOne {
            if change.signedAfter == nil {
                violated("the roster change for \(change.staff) has no signedAfter: its signature could be replayed")
            } else if let earlier = rosterMessages[message] {
                violated("the roster change for \(change.staff) repeats the signed bytes of record \(earlier): a replayed signature")
            }
            rosterMessages[message] = seq
        }
        let signatures = TransferDecider.RosterSignatures(
            signatureValid: try signed(by: admin, message: message, signature: change.signature),
            coSignatureValid: try change.coSignedBy.map { try signed(by: $0, message: message, signature: change.coSignature) })
        let outcome = TransferDecider.changeRoster(change, signatures: signatures, state: state, formatOneRules: formatOne)
        if outcome.events != [change.event] {
            violated(
                "the roster change for \(change.staff) does not hold: "
                    + (outcome.refusalReason ?? "signed by \(admin) alone while two or more administrators are enrolled"))
        } else if formatOne && change.coSignedBy == nil {
            formatOneNotes.append(
                InvariantViolation(
                    invariant: 5, sequence: seq,
                    message: "the roster change for \(change.staff) was signed by one administrator (\(admin)) under storage format 1's rules"))
        }
    }

    /// True when `staff`'s enrolled key signed `message` (always true without signature checks).
    private func signed(by staff: StaffID, message: [UInt8], signature: [UInt8]) throws -> Bool {
        guard let signatures else { return true }
        guard let key = state.staff[staff]?.publicKey else { return false }
        return try signatures.verify(key, message, signature)
    }

    private func planDigestMatches(_ request: TransferRequested) throws -> Bool {
        guard let signatures else { return true }
        return try signatures.sha256(request.plan.canonicalBytes) == request.planDigest.bytes
    }

    /// True when the current cause is a purchase, renewal or restore of `lineage` submitted by `account`.
    private func isOwnSubmission(on lineage: LineageKey, by account: AccountID) -> Bool {
        guard let s = cause.submission else { return false }
        return cause.lineage == lineage && s.kind != .reconciliation && s.account == account
    }

    /// The verified transaction facts of the current cause when they speak of `lineage`.
    private func causeFacts(for lineage: LineageKey?) -> Cause.Facts? {
        guard let lineage, cause.lineage == lineage else { return nil }
        return cause.facts
    }

    /// What the checks read of a record's opening fact, kept as plain values (no copy of the event
    /// and its strings per record): a submission's kind and account, whether it is a notification, the
    /// lineage it speaks of, and its transaction's facts.
    private struct Cause {
        struct Facts {
            var familyShared: Bool
            var purchaseDate: Timestamp
        }
        var submission: (kind: SubmissionKind, account: AccountID?)?
        var isNotification = false
        var lineage: LineageKey?
        var facts: Facts?

        /// Any other fact (a deletion request, a roster or transfer step): nothing the checks read.
        static var none: Cause { Cause() }
        private init() {}

        /// The cause a submission's or a notification's view opens.
        init(_ event: EventView) {
            lineage = event.lineage
            facts = event.transaction.map { Facts(familyShared: $0.familyShared, purchaseDate: $0.purchaseDate) }
            if event.kind == .transactionSubmitted, let kind = event.submission {
                submission = (kind, event.account)
            } else {
                isNotification = true
            }
        }
    }
}

extension Binding {
    var isTombstone: Bool {
        if case .tombstoned = self { return true }
        return false
    }

    var summary: String {
        switch self {
        case .unbound: "unbound"
        case .bound(let account): "bound to \(account)"
        case .tombstoned(let account): "tombstoned (former owner \(account))"
        }
    }
}
