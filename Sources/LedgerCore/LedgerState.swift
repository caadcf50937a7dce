/// Who a lineage belongs to.
public enum Binding: Equatable, Sendable {
    case unbound
    case bound(AccountID)
    /// The owner was deleted; the binding stays as a pseudonymous tombstone no new account can claim.
    case tombstoned(formerAccount: AccountID)
}

/// The entitlement a lineage gives its bound account.
public struct Entitlement: Equatable, Sendable {
    public var account: AccountID
    public var productId: String
    /// The latest verified expiry; nil when the product does not expire.
    public var expiresAt: Timestamp?
    /// Set by a refund or revocation; cleared when Apple reverses the refund.
    public var revokedAt: Timestamp?
    /// Set when the entitlement ended before its expiry (expiry notice, deletion, transfer).
    public var endedBecause: EntitlementEndReason?
    /// The purchase date of the transaction whose period the entitlement grants (the period a
    /// refund, an expiry notice or an older transaction is compared with); nil when granted before
    /// the ledger kept it, when the period is judged by ``expiresAt``.
    public var purchasedAt: Timestamp?

    public init(
        account: AccountID, productId: String, expiresAt: Timestamp?, revokedAt: Timestamp? = nil,
        endedBecause: EntitlementEndReason? = nil, purchasedAt: Timestamp? = nil
    ) {
        self.account = account
        self.productId = productId
        self.expiresAt = expiresAt
        self.revokedAt = revokedAt
        self.endedBecause = endedBecause
        self.purchasedAt = purchasedAt
    }

    /// Whether `transaction` belongs to a period older than the one this entitlement grants: it was
    /// purchased before ``purchasedAt`` or, when that is unknown, it expires before ``expiresAt``.
    public func isOlderPeriod(_ transaction: TransactionFacts) -> Bool {
        if let purchasedAt { return transaction.purchaseDate < purchasedAt }
        guard let old = expiresAt, let new = transaction.expiresDate else { return false }
        return new < old
    }

    /// Whether `transaction` must not replace this entitlement's period: it is of an older period
    /// (``isOlderPeriod(_:)``), or of the same one (same purchase date) with an earlier expiry (a
    /// copy signed before Apple extended it).
    public func isStale(_ transaction: TransactionFacts) -> Bool {
        if isOlderPeriod(transaction) { return true }
        guard let purchasedAt, transaction.purchaseDate == purchasedAt, let old = expiresAt, let new = transaction.expiresDate
        else { return false }
        return new < old
    }

    /// Active at `time`: not revoked, not ended, and the latest verified expiry is after `time`.
    /// (Whether the lineage is still bound to `account` is checked by ``LineageState/activeEntitlement(at:)``.)
    public func isActive(at time: Timestamp) -> Bool {
        revokedAt == nil && endedBecause == nil && (expiresAt.map { $0 > time } ?? true)
    }
}

/// The binding and entitlement of one lineage.
public struct LineageState: Equatable, Sendable {
    public var binding: Binding
    public var entitlement: Entitlement?

    public init(binding: Binding = .unbound, entitlement: Entitlement? = nil) {
        self.binding = binding
        self.entitlement = entitlement
    }

    /// Moved by a support transfer and not restored yet by its bound account. The entitlement kept
    /// is the one the lineage had before the transfer, ended `transferred`, with any refund Apple
    /// reported since, so that a transaction from before a refund never grants again.
    public var awaitsRestore: Bool {
        guard case .bound = binding else { return false }
        return entitlement.map { $0.endedBecause == .transferred } ?? true
    }

    /// The entitlement the lineage gives, as views show it: none while it ``awaitsRestore``, nor the
    /// one a transfer kept (also after the target's deletion tombstoned it before any restore).
    public var visibleEntitlement: Entitlement? { entitlement?.endedBecause == .transferred ? nil : entitlement }

    /// The entitlement when it is active at `time` and its account is the bound account.
    public func activeEntitlement(at time: Timestamp) -> Entitlement? {
        guard let entitlement, case .bound(let owner) = binding, owner == entitlement.account,
            entitlement.isActive(at: time)
        else { return nil }
        return entitlement
    }
}

/// An enrolled support staff member.
public struct StaffMember: Equatable, Sendable {
    public var roles: StaffRoles
    public var publicKey: [UInt8]
    public var ownAccount: AccountID?
    /// The enrolment's ``StaffEnrolled/signedAfter`` (nil for the first administrator and format-1
    /// enrolments): which enrolment this is, so what was signed under an earlier one is told apart.
    public var enrolledAfter: UInt64?

    public init(roles: StaffRoles, publicKey: [UInt8], ownAccount: AccountID?, enrolledAfter: UInt64? = nil) {
        self.roles = roles
        self.publicKey = publicKey
        self.ownAccount = ownAccount
        self.enrolledAfter = enrolledAfter
    }
}

/// A support transfer case and how far it got.
public struct TransferCase: Equatable, Sendable {
    public var request: TransferRequested
    public var approval: TransferApproved?
    /// The approver's ``StaffMember/enrolledAfter`` when they approved: the approval counts only while
    /// they are still under that enrolment (not after a removal and re-enrolment).
    public var approverEnrolledAfter: UInt64?
    public var applied: Bool

    public init(request: TransferRequested, approval: TransferApproved? = nil, approverEnrolledAfter: UInt64? = nil, applied: Bool = false) {
        self.request = request
        self.approval = approval
        self.approverEnrolledAfter = approverEnrolledAfter
        self.applied = applied
    }
}

/// The state the decider decides on and the projections maintain. A store may load only the part a
/// command needs (its lineages, the account's lineages, the roster, the case).
public struct LedgerState: Equatable, Sendable {
    public var lineages: [LineageKey: LineageState]
    /// The lineages currently bound to each live account.
    public var accountLineages: [AccountID: Set<LineageKey>]
    public var deletedAccounts: Set<AccountID>
    public var staff: [StaffID: StaffMember]
    public var transfers: [String: TransferCase]

    public init(
        lineages: [LineageKey: LineageState] = [:], accountLineages: [AccountID: Set<LineageKey>] = [:],
        deletedAccounts: Set<AccountID> = [], staff: [StaffID: StaffMember] = [:],
        transfers: [String: TransferCase] = [:]
    ) {
        self.lineages = lineages
        self.accountLineages = accountLineages
        self.deletedAccounts = deletedAccounts
        self.staff = staff
        self.transfers = transfers
    }

    public func lineage(_ key: LineageKey) -> LineageState { lineages[key] ?? LineageState() }

    /// The enrolled roster administrators, sorted.
    public var administrators: [StaffID] { staff.filter { $0.value.roles.contains(.administrator) }.keys.sorted() }
}
