/// The binding contract as a pure function: given a command, the state it reads and the time of the
/// attempt, the events to append. The first event is the command's fact; the last is the decision.
public enum Decider {
    /// Notification types that extend the bound account's entitlement.
    public static let extendingNotifications: Set<String> = ["SUBSCRIBED", "DID_RENEW", "OFFER_REDEEMED", "RENEWAL_EXTENDED"]
    /// Notification types that end it.
    public static let endingNotifications: Set<String> = ["EXPIRED", "GRACE_PERIOD_EXPIRED"]
    /// Notification types that revoke it.
    public static let revokingNotifications: Set<String> = ["REFUND", "REVOKE"]

    /// Decides `command` against `state` at time `at`.
    /// - Complexity: O(lineages bound to the account) for a deletion, O(1) otherwise.
    public static func decide(_ command: Command, state: LedgerState, at: Timestamp) -> [LedgerEvent] {
        // The fact, the decision and usually one or two effects: room for four, so the array is allocated once.
        var events: [LedgerEvent] = []
        events.reserveCapacity(4)
        events.append(command.fact)
        let decision: DecisionIssued
        switch command {
        case .submitTransaction(let submission):
            decision = decideTransaction(submission, state: state, at: at, into: &events)
        case .receiveNotification(let notification):
            decision = decideNotification(notification, state: state, at: at, into: &events)
        case .deleteAccount(let account):
            decision = decideDeletion(of: account, state: state, into: &events)
        }
        events.append(.decisionIssued(decision))
        return events
    }

    private static func decideTransaction(
        _ submission: TransactionSubmitted, state: LedgerState, at: Timestamp, into events: inout [LedgerEvent]
    ) -> DecisionIssued {
        let lineage = submission.lineage
        let transaction = submission.transaction
        func decided(_ reason: DecisionReason, _ account: AccountID? = submission.account) -> DecisionIssued {
            DecisionIssued(reason: reason, lineage: lineage, account: account)
        }
        if transaction.ownership == .familyShared { return decided(.familyShared) }
        let current = state.lineage(lineage)
        let isReconciliation = submission.kind == .reconciliation

        switch current.binding {
        case .tombstoned:
            if let revokedAt = refund(transaction) { recordRevocation(at: revokedAt, of: lineage, current, transaction, into: &events) }
            return decided(isReconciliation ? .tombstonedNotification : .lineageTombstoned)
        case .unbound:
            guard let account = submission.account, !isReconciliation else { return decided(.notBound) }
            // Superseded by the upgrade's own transaction: it neither binds nor grants.
            if transaction.isUpgraded { return decided(.transactionUpgraded) }
            if transaction.revocationDate != nil { return decided(.transactionRevoked) }
            events.append(.lineageBound(lineage: lineage, account: account))
            events.append(.entitlementGranted(grant(transaction, to: account, lineage: lineage, previous: nil)))
            return decided(isExpired(transaction, at: at) ? .boundExpired : .bound)
        case .bound(let owner):
            if let account = submission.account, account != owner { return decided(.boundToAnotherAccount) }
            // Moved by a support transfer: only the bound account's own verified submission grants.
            if current.awaitsRestore, isReconciliation || submission.account != owner {
                if let revokedAt = refund(transaction) { recordRevocation(at: revokedAt, of: lineage, current, transaction, into: &events) }
                return decided(.awaitingRestore, owner)
            }
            if transaction.isUpgraded { return decided(.transactionUpgraded, owner) }
            if let revokedAt = transaction.revocationDate {
                // A refund of an older period than the entitlement's is recorded (this fact) and revokes nothing.
                recordRevocation(at: revokedAt, of: lineage, current, transaction, into: &events)
                return decided(.transactionRevoked, owner)
            }
            // A refund recorded before a transfer stays on the entitlement it kept (``LineageState/awaitsRestore``).
            if isRefunded(transaction, by: current.entitlement) { return decided(.refundedTransaction, owner) }
            // An older period never reopens an entitlement an expiry notice ended.
            if let previous = current.visibleEntitlement, endedByExpiry(previous, olderThan: transaction, owner: owner) {
                return decided(isReconciliation ? .notificationRecorded : .transactionExpired, owner)
            }
            let granted = grant(transaction, to: owner, lineage: lineage, previous: current.visibleEntitlement)
            let expired = granted.expiresAt.map { $0 <= at } ?? false
            if isReconciliation && expired {
                if let entitlement = current.entitlement, entitlement.endedBecause == nil {
                    events.append(.entitlementEnded(lineage: lineage, account: owner, reason: .expired))
                    return decided(.reconciliationEnded, owner)
                }
                return decided(.notificationRecorded, owner)
            }
            events.append(.entitlementGranted(granted))
            return decided(expired ? .transactionExpired : .refreshed, owner)
        }
    }

    private static func decideNotification(
        _ notification: NotificationReceived, state: LedgerState, at: Timestamp, into events: inout [LedgerEvent]
    ) -> DecisionIssued {
        guard let lineage = notification.lineage, let transaction = notification.transaction else {
            return DecisionIssued(reason: .notificationRecorded, lineage: notification.lineage, account: nil)
        }
        func decided(_ reason: DecisionReason, _ account: AccountID? = nil) -> DecisionIssued {
            DecisionIssued(reason: reason, lineage: lineage, account: account)
        }
        if transaction.ownership == .familyShared { return decided(.familyShared) }
        let current = state.lineage(lineage)
        let type = notification.notificationType
        let revokedAt = revocation(notification, transaction)
        // A lineage that grants nothing now (tombstoned, or moved by a support transfer and not
        // restored yet) still records Apple's refund, or its reversal, on the entitlement it kept:
        // a transaction from before the refund must never grant again, after a transfer included.
        func recordedWithoutGrant(_ reason: DecisionReason, _ account: AccountID? = nil) -> DecisionIssued {
            if let revokedAt {
                recordRevocation(at: revokedAt, of: lineage, current, transaction, into: &events)
            } else if type == "REFUND_REVERSED", let entitlement = current.entitlement, entitlement.revokedAt != nil {
                events.append(.entitlementReinstated(lineage: lineage, account: entitlement.account))
            }
            return decided(reason, account)
        }
        let owner: AccountID
        switch current.binding {
        case .unbound: return decided(.notBound)
        case .tombstoned: return recordedWithoutGrant(.tombstonedNotification)
        case .bound(let account): owner = account
        }
        // Moved by a support transfer: nothing is granted until the bound account runs Restore Purchases.
        guard let entitlement = current.visibleEntitlement else { return recordedWithoutGrant(.awaitingRestore, owner) }
        // Superseded by the upgrade's own transaction: it grants, ends and revokes nothing.
        if transaction.isUpgraded { return decided(.transactionUpgraded, owner) }
        if let revokedAt {
            // A refund of an older period than the entitlement's leaves the current period alone.
            guard entitlement.revokedAt == nil, !entitlement.isOlderPeriod(transaction) else { return decided(.notificationRecorded, owner) }
            events.append(.entitlementRevoked(lineage: lineage, account: owner, revokedAt: revokedAt))
            return decided(.notificationRevoked, owner)
        }
        if extendingNotifications.contains(type) {
            if isRefunded(transaction, by: entitlement) { return decided(.refundedTransaction, owner) }
            if endedByExpiry(entitlement, olderThan: transaction, owner: owner) { return decided(.notificationRecorded, owner) }
            let granted = grant(transaction, to: owner, lineage: lineage, previous: entitlement)
            events.append(.entitlementGranted(granted))
            // As a renewal of an already expired transaction: recorded, not granted.
            return decided(granted.expiresAt.map { $0 <= at } ?? false ? .transactionExpired : .notificationExtended, owner)
        }
        if endingNotifications.contains(type) {
            // A late expiry notice of an older period (or a stale copy of this one) ends nothing.
            guard entitlement.endedBecause == nil, !entitlement.isStale(transaction) else { return decided(.notificationRecorded, owner) }
            events.append(.entitlementEnded(lineage: lineage, account: owner, reason: .expired))
            return decided(.notificationEnded, owner)
        }
        // Only a revoked entitlement has a refund to reverse.
        if type == "REFUND_REVERSED", entitlement.revokedAt != nil {
            events.append(.entitlementReinstated(lineage: lineage, account: owner))
            events.append(.entitlementGranted(grant(transaction, to: owner, lineage: lineage, previous: entitlement)))
            return decided(.notificationReinstated, owner)
        }
        return decided(.notificationRecorded, owner)
    }

    private static func decideDeletion(
        of account: AccountID, state: LedgerState, into events: inout [LedgerEvent]
    ) -> DecisionIssued {
        for lineage in (state.accountLineages[account] ?? []).sorted() {
            if let entitlement = state.lineage(lineage).entitlement, entitlement.account == account,
                entitlement.endedBecause == nil
            {
                events.append(.entitlementEnded(lineage: lineage, account: account, reason: .accountDeleted))
            }
            events.append(.lineageTombstoned(lineage: lineage, formerAccount: account))
        }
        events.append(.accountDeleted(account: account))
        return DecisionIssued(reason: .accountDeleted, lineage: nil, account: account)
    }

    /// The grant for `transaction`: the period of the newest transaction (by purchase date) wins,
    /// with its product and expiry, so an upgrade takes effect at once (even with an earlier expiry)
    /// and an out-of-order older transaction (or a stale copy of the same one) never shortens an
    /// entitlement or changes its product (``Entitlement/isStale(_:)``).
    private static func grant(
        _ transaction: TransactionFacts, to account: AccountID, lineage: LineageKey, previous: Entitlement?
    ) -> EntitlementGranted {
        if let previous, previous.account == account, previous.revokedAt == nil, previous.isStale(transaction) {
            return EntitlementGranted(
                lineage: lineage, account: account, productId: previous.productId, expiresAt: previous.expiresAt,
                purchasedAt: previous.purchasedAt)
        }
        return EntitlementGranted(
            lineage: lineage, account: account, productId: transaction.productId, expiresAt: transaction.expiresDate,
            purchasedAt: transaction.purchaseDate)
    }

    /// Whether `entitlement` is `owner`'s, unrevoked, ended by an expiry notice, and `transaction` is
    /// stale against it: such a transaction must not reopen it.
    private static func endedByExpiry(_ entitlement: Entitlement, olderThan transaction: TransactionFacts, owner: AccountID) -> Bool {
        entitlement.account == owner && entitlement.revokedAt == nil && entitlement.endedBecause == .expired
            && entitlement.isStale(transaction)
    }

    /// When `notification` tells of a refund or revocation: a revoking type, or an extending one
    /// whose transaction carries a revocation date. An upgraded transaction's revocation is the
    /// upgrade, never a refund.
    private static func revocation(_ notification: NotificationReceived, _ transaction: TransactionFacts) -> Timestamp? {
        let type = notification.notificationType
        guard !transaction.isUpgraded,
            revokingNotifications.contains(type) || (extendingNotifications.contains(type) && transaction.revocationDate != nil)
        else { return nil }
        return transaction.revocationDate ?? notification.signedDate
    }

    /// A submitted transaction's refund: its revocation date, unless it is upgraded.
    private static func refund(_ transaction: TransactionFacts) -> Timestamp? {
        transaction.isUpgraded ? nil : transaction.revocationDate
    }

    /// Records Apple's revocation of `transaction` at `revokedAt` on the entitlement `current` holds
    /// (whoever's it is: the bound account's, a deleted owner's or, after a transfer, the previous
    /// owner's), unless it is revoked already or `transaction` is of an older period than the
    /// entitlement's (a past period's refund leaves the period granted now alone).
    private static func recordRevocation(
        at revokedAt: Timestamp, of lineage: LineageKey, _ current: LineageState, _ transaction: TransactionFacts,
        into events: inout [LedgerEvent]
    ) {
        guard let entitlement = current.entitlement, entitlement.revokedAt == nil, !entitlement.isOlderPeriod(transaction) else { return }
        events.append(.entitlementRevoked(lineage: lineage, account: entitlement.account, revokedAt: revokedAt))
    }

    /// True when `entitlement` is revoked and `transaction` was purchased at or before the
    /// revocation: a replay of the refunded purchase (or an earlier one) cannot undo the refund.
    private static func isRefunded(_ transaction: TransactionFacts, by entitlement: Entitlement?) -> Bool {
        guard let revokedAt = entitlement?.revokedAt else { return false }
        return transaction.purchaseDate <= revokedAt
    }

    private static func isExpired(_ transaction: TransactionFacts, at: Timestamp) -> Bool {
        transaction.expiresDate.map { $0 <= at } ?? false
    }
}
