/// What the caller is told: `granted`, `denied`, `ignored`, `recorded` or `invalid`.
public enum Outcome: String, Sendable {
    case granted, denied, ignored, recorded, invalid
}

/// Why the ledger decided what it did. Stored in `decisionIssued`; the outcome, code and message
/// are derived from it, so replay reproduces exactly what the customer was told.
///
/// - Warning: Storage format: add cases with new raw values; never change or reuse one.
public enum DecisionReason: UInt8, Sendable, CaseIterable {
    /// An unbound lineage was bound to the account and the entitlement granted.
    case bound = 1
    /// The bound account's entitlement was refreshed.
    case refreshed = 2
    /// The lineage belongs to another account.
    case boundToAnotherAccount = 3
    /// The lineage's owner was deleted; only support recovery can move it.
    case lineageTombstoned = 4
    /// Family Sharing is not supported.
    case familyShared = 5
    /// A notification or reconciliation for a lineage nobody owns binds nothing.
    case notBound = 6
    /// A notification or reconciliation for a tombstoned lineage grants nothing.
    case tombstonedNotification = 7
    /// A notification extended the bound account's entitlement.
    case notificationExtended = 8
    /// A notification ended the bound account's entitlement.
    case notificationEnded = 9
    /// A notification revoked the bound account's entitlement (refund or revoke).
    case notificationRevoked = 10
    /// A notification reinstated a refunded entitlement.
    case notificationReinstated = 11
    /// A notification was recorded without changing any entitlement.
    case notificationRecorded = 12
    /// The verified transaction is revoked: nothing is granted.
    case transactionRevoked = 13
    /// The verified transaction had already expired at the time of the attempt.
    case transactionExpired = 14
    /// The account was deleted; its lineages are tombstoned.
    case accountDeleted = 15
    /// Deletion of an account the ledger does not know: nothing to do.
    case unknownAccount = 16
    /// A reconciliation ended the bound account's entitlement.
    case reconciliationEnded = 17
    /// The lineage's entitlement is revoked (Apple refunded or revoked it) and the transaction was
    /// purchased at or before the revocation: replaying it grants nothing. Only `REFUND_REVERSED` or a
    /// transaction purchased after the revocation grants again.
    case refundedTransaction = 18
    /// A support transfer moved the lineage and its bound account has not run Restore Purchases yet:
    /// a notification or reconciliation grants nothing.
    case awaitingRestore = 19
    /// The transaction is upgraded (Apple's `isUpgraded`): the customer moved to a higher level of
    /// service, which another transaction of the lineage grants. It grants, binds, ends and revokes
    /// nothing; its revocation or cancellation date is the upgrade, not a refund.
    case transactionUpgraded = 20
    /// An unbound lineage was bound to the account by a transaction that had already expired: the
    /// subscription is now tied to this account, and grants nothing until it is renewed.
    case boundExpired = 21

    public var outcome: Outcome {
        switch self {
        case .bound, .refreshed, .notificationExtended, .notificationReinstated: .granted
        case .boundToAnotherAccount, .lineageTombstoned, .familyShared, .transactionRevoked, .refundedTransaction: .denied
        case .notBound, .tombstonedNotification, .unknownAccount, .awaitingRestore: .ignored
        case .notificationEnded, .notificationRevoked, .notificationRecorded, .transactionExpired, .accountDeleted,
            .reconciliationEnded, .transactionUpgraded, .boundExpired:
            .recorded
        }
    }

    /// The stable kebab-case code that crosses the process boundary.
    public var code: String {
        switch self {
        case .bound, .refreshed, .notificationExtended, .notificationEnded, .notificationRevoked,
            .notificationReinstated, .notificationRecorded, .accountDeleted, .reconciliationEnded:
            "ok"
        case .boundToAnotherAccount, .lineageTombstoned: "permission-denied"
        case .familyShared: "family-sharing-unsupported"
        case .notBound: "not-bound"
        case .tombstonedNotification: "tombstoned"
        case .transactionRevoked, .refundedTransaction: "revoked"
        case .awaitingRestore: "awaiting-restore"
        case .transactionExpired, .boundExpired: "expired"
        case .transactionUpgraded: "upgraded"
        case .unknownAccount: "unknown-account"
        }
    }

    /// The message for a person.
    public var message: String {
        switch self {
        case .bound: "Subscription verified and bound to this MyRecipes account."
        case .refreshed: "Subscription verified; this account's entitlement is refreshed."
        case .boundToAnotherAccount:
            "This subscription belongs to another MyRecipes account. Sign in with the account that purchased it, or contact support to recover it."
        case .lineageTombstoned:
            "This subscription belonged to a deleted MyRecipes account. It can be moved to another account only through support recovery: contact support."
        case .familyShared:
            "Family Sharing is not supported by MyRecipes: a subscription shared through Family Sharing does not unlock MyRecipes."
        case .notBound: "No MyRecipes account owns this subscription; a notification never binds one. Recorded, nothing granted."
        case .tombstonedNotification:
            "This subscription belongs to a deleted account; the notification was recorded and grants nothing."
        case .notificationExtended: "The bound account's entitlement was extended."
        case .notificationEnded: "The bound account's entitlement ended."
        case .notificationRevoked: "Apple refunded or revoked the subscription; the bound account's entitlement is revoked."
        case .notificationReinstated: "Apple reversed the refund; the bound account's entitlement is reinstated."
        case .notificationRecorded: "Notification recorded; no entitlement changed."
        case .transactionRevoked: "Apple refunded or revoked this transaction; nothing is granted."
        case .transactionExpired: "The subscription had already expired; renew it in the App Store to regain access."
        case .boundExpired:
            "The subscription had already expired; it is now tied to this MyRecipes account. Renew it in the App Store to regain access."
        case .transactionUpgraded:
            "This transaction was upgraded to another subscription of the same group; it grants nothing. Restore purchases to verify the upgraded subscription."
        case .accountDeleted:
            "Account deleted. Deleting a MyRecipes account does not cancel Apple billing: manage or cancel the subscription in the Apple ID's Subscriptions settings."
        case .unknownAccount: "No MyRecipes account with this identity is known to the ledger; nothing was deleted."
        case .reconciliationEnded: "Reconciliation found the subscription expired or revoked; the bound account's entitlement ended."
        case .refundedTransaction:
            "Apple refunded or revoked this purchase; a transaction from before the refund cannot restore it. Nothing is granted."
        case .awaitingRestore:
            "This subscription was moved to this MyRecipes account by support; it grants nothing until the account runs Restore Purchases."
        }
    }
}
