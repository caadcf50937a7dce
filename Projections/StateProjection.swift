public import LedgerCore

/// The reducer behind bindings, entitlements, the staff roster and transfer cases. Trivial by
/// design: every rule lives in ``Decider``; `evolve` only records what the events say.
public enum StateProjection {
    /// Bumped whenever `evolve` or the persisted form (`ReadModel`) changes meaning; a persisted
    /// read model of another version is rebuilt. 2: storage format 2 (16-byte keys, no account lists).
    public static let version: UInt32 = 2

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

    /// ``evolve(_:_:)``; without `accountLineages`, ``LedgerState/accountLineages`` is left alone (a
    /// whole-log replay that does not need it keeps no set per account).
    public static func evolve(_ state: inout LedgerState, _ event: LedgerEvent, accountLineages: Bool) {
        switch event {
        case .transactionSubmitted, .notificationReceived, .accountDeletionRequested, .transferRefused, .decisionIssued,
            .storeUpgraded, .rosterChangeProposed:
            break
        case .lineageBound(let lineage, let account):
            state.lineages[lineage, default: LineageState()].binding = .bound(account)
            if accountLineages { state.accountLineages[account, default: []].insert(lineage) }
        case .entitlementGranted(let e):
            state.lineages[e.lineage, default: LineageState()].entitlement = Entitlement(
                account: e.account, productId: e.productId, expiresAt: e.expiresAt)
        case .entitlementEnded(let lineage, _, let reason):
            state.lineages[lineage]?.entitlement?.endedBecause = reason
        case .entitlementRevoked(let lineage, _, let revokedAt):
            state.lineages[lineage]?.entitlement?.revokedAt = revokedAt
        case .entitlementReinstated(let lineage, _):
            state.lineages[lineage]?.entitlement?.revokedAt = nil
        case .lineageTombstoned(let lineage, let account):
            state.lineages[lineage, default: LineageState()].binding = .tombstoned(formerAccount: account)
            if accountLineages { state.unlink(lineage, from: account) }
        case .accountDeleted(let account):
            if accountLineages { state.accountLineages[account] = nil }
            state.deletedAccounts.insert(account)
        case .staffEnrolled(let e):
            state.staff[e.staff] = StaffMember(roles: e.roles, publicKey: e.publicKey, ownAccount: e.ownAccount)
        case .staffRemoved(let e):
            state.staff[e.staff] = nil
        case .transferRequested(let e):
            state.transfers[e.plan.caseId] = TransferCase(request: e)
        case .transferApproved(let e):
            state.transfers[e.caseId]?.approval = e
        case .transferApplied(let e):
            state.lineages[e.lineage, default: LineageState()] = LineageState(binding: .bound(e.target), entitlement: nil)
            if accountLineages {
                state.unlink(e.lineage, from: e.source.account)
                state.accountLineages[e.target, default: []].insert(e.lineage)
            }
            state.transfers[e.caseId]?.applied = true
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
