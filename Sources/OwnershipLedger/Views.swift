public import LedgerCore

/// What the ledger told a verifier.
public struct Decision: Equatable, Sendable {
    public var reason: DecisionReason
    /// The sequence number of the record holding the decision; nil when nothing was appended.
    public var sequence: UInt64?
    /// The entitlement granted or refreshed, when the decision granted one.
    public var entitlement: EntitlementView?
    /// True when this is a retried submission answered with its first decision.
    public var duplicate: Bool

    public init(reason: DecisionReason, sequence: UInt64?, entitlement: EntitlementView?, duplicate: Bool) {
        self.reason = reason
        self.sequence = sequence
        self.entitlement = entitlement
        self.duplicate = duplicate
    }

    /// The decision a record's events hold.
    init(events: [LedgerEvent], sequence: UInt64?, at: Timestamp, duplicate: Bool) {
        var reason = DecisionReason.notificationRecorded
        var grant: EntitlementGranted?
        for event in events {
            switch event {
            case .decisionIssued(let decision): reason = decision.reason
            case .entitlementGranted(let granted): grant = granted
            default: break
            }
        }
        let entitlement = reason.outcome == .granted ? grant.map { EntitlementView(granted: $0, at: at) } : nil
        self.init(reason: reason, sequence: sequence, entitlement: entitlement, duplicate: duplicate)
    }

    public var outcome: Outcome { reason.outcome }
    public var code: String { reason.code }
    public var message: String { reason.message }
}

/// An entitlement as callers see it.
public struct EntitlementView: Equatable, Sendable {
    public var productId: String
    public var expiresAt: Timestamp?
    /// Active at the time asked about.
    public var active: Bool
    public var revoked: Bool
    public var endedBecause: String?

    init(granted: EntitlementGranted, at: Timestamp) {
        productId = granted.productId
        expiresAt = granted.expiresAt
        active = granted.expiresAt.map { $0 > at } ?? true
        revoked = false
        endedBecause = nil
    }

    init(_ entitlement: Entitlement, lineage: LineageState, at: Timestamp) {
        productId = entitlement.productId
        expiresAt = entitlement.expiresAt
        active = lineage.activeEntitlement(at: at) != nil
        revoked = entitlement.revokedAt != nil
        endedBecause = entitlement.endedBecause?.name
    }
}

/// The binding of one lineage.
public struct BindingView: Equatable, Sendable {
    public var binding: Binding
    /// The bound account's UID while it lives.
    public var uid: String?
    public var entitlement: EntitlementView?

    /// `unbound`, `bound` or `tombstoned`.
    public var state: String {
        switch binding {
        case .unbound: "unbound"
        case .bound: "bound"
        case .tombstoned: "tombstoned"
        }
    }
}

/// The entitlements of one account.
public struct AccountView: Equatable, Sendable {
    public var uid: String
    /// False when the ledger has no live account with this UID.
    public var known: Bool
    public var entitlements: [EntitlementView]
}
