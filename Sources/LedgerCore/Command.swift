/// What a caller asks the ledger to decide. Commands are imperative; the events they produce are
/// past tense.
public enum Command: Equatable, Sendable {
    /// A verified purchase, renewal, restore or reconciliation item.
    case submitTransaction(TransactionSubmitted)
    /// A verified App Store Server Notification.
    case receiveNotification(NotificationReceived)
    /// The authenticated owner deletes their account.
    case deleteAccount(AccountID)

    /// The lineages whose state the decider reads.
    public var lineages: [LineageKey] {
        switch self {
        case .submitTransaction(let submission): [submission.lineage]
        case .receiveNotification(let notification): notification.lineage.map { [$0] } ?? []
        case .deleteAccount: []
        }
    }

    /// The accounts whose bound lineages the decider reads.
    public var accounts: [AccountID] {
        switch self {
        case .submitTransaction(let submission): submission.account.map { [$0] } ?? []
        case .receiveNotification: []
        case .deleteAccount(let account): [account]
        }
    }

    /// The fact event that opens the command's batch.
    public var fact: LedgerEvent {
        switch self {
        case .submitTransaction(let submission): .transactionSubmitted(submission)
        case .receiveNotification(let notification): .notificationReceived(notification)
        case .deleteAccount(let account): .accountDeletionRequested(account: account)
        }
    }
}
