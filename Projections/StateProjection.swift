public import LedgerCore

/// The reducer behind bindings, entitlements, the staff roster and transfer cases. Trivial by
/// design: every rule lives in ``Decider``; `evolve` only records what the events say.
public enum StateProjection {
    /// Bumped whenever `evolve` or the persisted form (`ReadModel`) changes meaning; a persisted
    /// read model of another version is rebuilt. 2: storage format 2 (16-byte keys, no account lists).
    /// 3: a transfer keeps the lineage's entitlement, ended `transferred` (``LineageState/awaitsRestore``).
    /// 4: an entitlement knows the purchase date of the transaction whose period it grants
    /// (``Entitlement/purchasedAt``). 5: staff members know their enrolment and transfer cases the
    /// approver's enrolment at the approval (``TransferCase/approverEnrolledAfter``).
    public static let version: UInt32 = 5

    /// Folds the events of `records` into `state`.
    public static func fold(records: some Sequence<Record>, into state: LedgerState = LedgerState()) -> LedgerState {
        records.reduce(into: state) { state, record in
            for event in record.events { evolve(&state, event) }
        }
    }

    /// Folds `events` into `state`.
    public static func fold(_ events: some Sequence<LedgerEvent>, into state: LedgerState = LedgerState()) -> LedgerState {
        events.reduce(into: state) { evolve(&$0, $1) }
    }

    public static func evolve(_ state: inout LedgerState, _ event: LedgerEvent) { evolve(&state, event, accountLineages: true) }

    /// Whether folding `events` into `state` leaves it as it is (`fold(events, into: state) ==
    /// state`), without copying `state`: only the entries the events touch are copied, folded and
    /// compared (every other entry is left alone by ``evolve(_:_:)``, so it compares equal).
    public static func changesNothing(_ events: [LedgerEvent], in state: LedgerState) -> Bool {
        var touched = LedgerState()
        for event in events {
            if let lineage = changedLineage(event) { touched.lineages[lineage] = state.lineages[lineage] }
            for account in accountsTouched(by: event) {
                touched.accountLineages[account] = state.accountLineages[account]
                if state.deletedAccounts.contains(account) { touched.deletedAccounts.insert(account) }
            }
            switch event {
            case .staffEnrolled(let e): touched.staff[e.staff] = state.staff[e.staff]
            case .staffRemoved(let e): touched.staff[e.staff] = state.staff[e.staff]
            case .transferRequested(let e): touched.transfers[e.plan.caseId] = state.transfers[e.plan.caseId]
            case .transferApproved(let e):
                touched.transfers[e.caseId] = state.transfers[e.caseId]
                touched.staff[e.approvedBy] = state.staff[e.approvedBy]
            case .transferApplied(let e): touched.transfers[e.caseId] = state.transfers[e.caseId]
            default: break
            }
        }
        return fold(events, into: touched) == touched
    }

    /// The accounts whose bound lineages or deletion ``evolve(beyondLineages:_:accountLineages:)`` changes for `event`.
    private static func accountsTouched(by event: LedgerEvent) -> [AccountID] {
        switch event {
        case .lineageBound(_, let account), .lineageTombstoned(_, let account), .accountDeleted(let account): [account]
        case .transferApplied(let e): [e.source.account, e.target]
        case .staffEnrolled, .staffRemoved, .transferRequested, .transferApproved, .transactionSubmitted, .notificationReceived,
            .accountDeletionRequested, .transferRefused, .decisionIssued, .storeUpgraded, .rosterChangeProposed, .entitlementGranted,
            .entitlementEnded, .entitlementRevoked, .entitlementReinstated:
            []
        }
    }

    /// ``evolve(_:_:)``; without `accountLineages`, ``LedgerState/accountLineages`` is left alone (a
    /// whole-log replay that does not need it keeps no set per account).
    public static func evolve(_ state: inout LedgerState, _ event: LedgerEvent, accountLineages: Bool) {
        if let lineage = changedLineage(event) { evolve(lineage: &state.lineages[lineage], event) }
        evolve(beyondLineages: &state, event, accountLineages: accountLineages)
    }

    /// The lineage whose state (binding or entitlement) `event` changes, if any.
    public static func changedLineage(_ event: LedgerEvent) -> LineageKey? {
        switch event {
        case .lineageBound(let lineage, _), .entitlementEnded(let lineage, _, _), .entitlementRevoked(let lineage, _, _),
            .entitlementReinstated(let lineage, _), .lineageTombstoned(let lineage, _):
            lineage
        case .entitlementGranted(let e): e.lineage
        case .transferApplied(let e): e.lineage
        default: nil
        }
    }

    /// What `event` does to the state of the lineage it changes (``changedLineage(_:)``); nil is a
    /// lineage never bound nor granted, which an end, revocation or reinstatement leaves alone.
    public static func evolve(lineage state: inout LineageState?, _ event: LedgerEvent) {
        switch event {
        case .lineageBound(_, let account):
            state = LineageState(binding: .bound(account), entitlement: state?.entitlement)
        case .entitlementGranted(let e):
            state = LineageState(
                binding: state?.binding ?? .unbound,
                entitlement: Entitlement(account: e.account, productId: e.productId, expiresAt: e.expiresAt, purchasedAt: e.purchasedAt))
        case .entitlementEnded(_, _, let reason):
            state?.entitlement?.endedBecause = reason
        case .entitlementRevoked(_, _, let revokedAt):
            state?.entitlement?.revokedAt = revokedAt
        case .entitlementReinstated:
            state?.entitlement?.revokedAt = nil
        case .lineageTombstoned(_, let account):
            state = LineageState(binding: .tombstoned(formerAccount: account), entitlement: state?.entitlement)
        case .transferApplied(let e):
            // The entitlement stays, ended `transferred`, until the target restores: it keeps any refund.
            var kept = state?.entitlement
            kept?.endedBecause = .transferred
            state = LineageState(binding: .bound(e.target), entitlement: kept)
        default:
            break
        }
    }

    /// The lineage whose state a view changes (``changedLineage(_:)``; a view is never a transfer).
    public static func changedLineage(_ event: EventView) -> LineageKey? {
        switch event.kind {
        case .lineageBound, .entitlementGranted, .entitlementEnded, .entitlementRevoked, .entitlementReinstated, .lineageTombstoned: event.lineage
        case .transactionSubmitted, .notificationReceived, .accountDeletionRequested, .accountDeleted, .decisionIssued: nil
        }
    }

    /// ``evolve(lineage:_:)`` of a view, on the lineage's state in plain values (a whole-log replay's).
    public static func evolve(lineage state: inout PlainLineage?, _ event: EventView) {
        switch event.kind {
        case .lineageBound:
            guard let account = event.account else { return }
            state = PlainLineage(binding: .bound(account), entitlement: state?.entitlement)
        case .entitlementGranted:
            guard let account = event.account else { return }
            state = PlainLineage(
                binding: state?.binding ?? .unbound,
                entitlement: PlainLineage.Entitlement(
                    account: account, product: event.product, expiresAt: event.time, purchasedAt: event.purchasedAt))
        case .entitlementEnded:
            state?.entitlement?.endedBecause = event.endReason
        case .entitlementRevoked:
            state?.entitlement?.revokedAt = event.time
        case .entitlementReinstated:
            state?.entitlement?.revokedAt = nil
        case .lineageTombstoned:
            guard let account = event.account else { return }
            state = PlainLineage(binding: .tombstoned(formerAccount: account), entitlement: state?.entitlement)
        case .transactionSubmitted, .notificationReceived, .accountDeletionRequested, .accountDeleted, .decisionIssued:
            break
        }
    }

    /// Everything `event` changes besides lineage states: the account sets (with `accountLineages`),
    /// deleted accounts, the roster and transfer cases.
    public static func evolve(beyondLineages state: inout LedgerState, _ event: LedgerEvent, accountLineages: Bool) {
        switch event {
        case .lineageBound(let lineage, let account):
            if accountLineages { state.accountLineages[account, default: []].insert(lineage) }
        case .lineageTombstoned(let lineage, let account):
            if accountLineages { state.unlink(lineage, from: account) }
        case .accountDeleted(let account):
            if accountLineages { state.accountLineages[account] = nil }
            state.deletedAccounts.insert(account)
        case .staffEnrolled(let e):
            state.staff[e.staff] = StaffMember(roles: e.roles, publicKey: e.publicKey, ownAccount: e.ownAccount, enrolledAfter: e.signedAfter)
        case .staffRemoved(let e):
            state.staff[e.staff] = nil
        case .transferRequested(let e):
            state.transfers[e.plan.caseId] = TransferCase(request: e)
        case .transferApproved(let e):
            state.transfers[e.caseId]?.approval = e
            state.transfers[e.caseId]?.approverEnrolledAfter = state.staff[e.approvedBy]?.enrolledAfter
        case .transferApplied(let e):
            if accountLineages {
                state.unlink(e.lineage, from: e.source.account)
                state.accountLineages[e.target, default: []].insert(e.lineage)
            }
            state.transfers[e.caseId]?.applied = true
        case .transactionSubmitted, .notificationReceived, .accountDeletionRequested, .transferRefused, .decisionIssued,
            .storeUpgraded, .rosterChangeProposed, .entitlementGranted, .entitlementEnded, .entitlementRevoked, .entitlementReinstated:
            break
        }
    }
}

extension LedgerState {
    /// Removes `lineage` from `account`'s bound set, dropping the set when it empties.
    fileprivate mutating func unlink(_ lineage: LineageKey, from account: AccountID) {
        accountLineages[account]?.remove(lineage)
        if accountLineages[account]?.isEmpty == true { accountLineages[account] = nil }
    }
}
