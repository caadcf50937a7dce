/// Every fact the ledger records.
///
/// - Warning: These cases and their payloads are the storage format. Add cases and give them new
///   tags in `EventCodec`; never rename, reorder, remove or repurpose one.
///
/// The facts, the support steps and the upgrade record are `indirect` (their payloads, the largest,
/// live in a box): an event is then the size of the largest effect, a few times smaller, and a replay
/// (`verify`, `rebuild`) moves and copies millions of them. A fact costs one allocation more.
public enum LedgerEvent: Equatable, Sendable {
    // MARK: Verified facts: what a verifier submitted, first in its batch.
    /// A verified store transaction was submitted (purchase, renewal, restore or reconciliation).
    indirect case transactionSubmitted(TransactionSubmitted)
    /// A verified App Store Server Notification V2 arrived.
    indirect case notificationReceived(NotificationReceived)
    /// The authenticated owner asked to delete their account.
    case accountDeletionRequested(account: AccountID)

    // MARK: Effects decided by the decider.
    /// An unbound lineage was bound to an account.
    case lineageBound(lineage: LineageKey, account: AccountID)
    /// The bound account's entitlement was granted or refreshed from a verified transaction.
    case entitlementGranted(EntitlementGranted)
    /// The bound account's entitlement ended (expiry notice, deletion or transfer).
    case entitlementEnded(lineage: LineageKey, account: AccountID, reason: EntitlementEndReason)
    /// Apple refunded or revoked the lineage's transaction.
    case entitlementRevoked(lineage: LineageKey, account: AccountID, revokedAt: Timestamp)
    /// Apple reversed a refund.
    case entitlementReinstated(lineage: LineageKey, account: AccountID)
    /// A lineage's owner was deleted; the binding is now a pseudonymous tombstone.
    case lineageTombstoned(lineage: LineageKey, formerAccount: AccountID)
    /// The account was deleted; its identity mapping was erased in the same transaction.
    case accountDeleted(account: AccountID)

    // MARK: Support recovery.
    /// A roster administrator enrolled a staff member.
    indirect case staffEnrolled(StaffEnrolled)
    /// A roster administrator removed a staff member.
    indirect case staffRemoved(StaffRemoved)
    /// An administrator signed a roster change that needs a second administrator's signature; the
    /// roster changes only when another administrator co-signs it (`staffEnrolled`/`staffRemoved`).
    indirect case rosterChangeProposed(RosterChange)
    /// An operator opened a transfer and signed its plan.
    indirect case transferRequested(TransferRequested)
    /// A different approver signed the same plan.
    indirect case transferApproved(TransferApproved)
    /// The lineage was rebound to the target account. Never grants an entitlement.
    indirect case transferApplied(TransferApplied)
    /// A transfer step was refused; nothing moved.
    indirect case transferRefused(TransferRefused)

    // MARK: Decisions.
    /// What the ledger told the caller, last in its record.
    case decisionIssued(DecisionIssued)

    // MARK: Storage.
    /// The store was upgraded from an older storage format: record 1 of the upgraded store.
    indirect case storeUpgraded(StoreUpgraded)
}

/// How a transaction reached the ledger.
public enum SubmissionKind: UInt8, Sendable, CaseIterable {
    case purchase = 1, renewal = 2, restore = 3, reconciliation = 4

    /// The protocol name (`purchase`, `renewal`, `restore`, `reconciliation`).
    public var name: String {
        switch self {
        case .purchase: "purchase"
        case .renewal: "renewal"
        case .restore: "restore"
        case .reconciliation: "reconciliation"
        }
    }
}

/// Apple's `inAppOwnershipType`.
public enum Ownership: Equatable, Sendable {
    case purchased
    case familyShared
    /// Any other value, kept as given.
    case other(String)

    public init(appleValue: String) {
        switch appleValue {
        case "PURCHASED": self = .purchased
        case "FAMILY_SHARED": self = .familyShared
        default: self = .other(appleValue)
        }
    }

    public var appleValue: String {
        switch self {
        case .purchased: "PURCHASED"
        case .familyShared: "FAMILY_SHARED"
        case .other(let value): value
        }
    }
}

/// How the facts were established.
public enum Provenance: UInt8, Sendable {
    /// An Apple JWS whose signature and chain the ledger verified.
    case verifiedJWS = 1
    /// Decoded facts accepted from a trusted caller (`--trust-decoded`).
    case trustedDecoded = 2
    /// A legacy `verifyReceipt` response accepted from a trusted caller.
    case legacyReceipt = 3
}

/// The verified facts of one Apple transaction, without its identifiers in clear.
public struct TransactionFacts: Equatable, Sendable {
    /// Keyed hash of Apple's `transactionId` (128 bits).
    public var transactionKey: Key128
    public var productId: String
    public var purchaseDate: Timestamp
    /// nil for a purchase that does not expire.
    public var expiresDate: Timestamp?
    public var revocationDate: Timestamp?
    public var ownership: Ownership
    /// `Production`, `Sandbox`, …
    public var environment: String
    public var signedDate: Timestamp
    public var provenance: Provenance
    /// Apple's `isUpgraded` (legacy receipts: `is_upgraded`): the customer upgraded this transaction's
    /// subscription to a higher level of service, which another transaction of the lineage grants.
    /// An upgraded transaction grants nothing, and its revocation or cancellation date is the
    /// upgrade, not a refund.
    public var isUpgraded: Bool

    public init(
        transactionKey: Key128, productId: String, purchaseDate: Timestamp, expiresDate: Timestamp?,
        revocationDate: Timestamp?, ownership: Ownership, environment: String, signedDate: Timestamp,
        provenance: Provenance, isUpgraded: Bool = false
    ) {
        self.transactionKey = transactionKey
        self.productId = productId
        self.purchaseDate = purchaseDate
        self.expiresDate = expiresDate
        self.revocationDate = revocationDate
        self.ownership = ownership
        self.environment = environment
        self.signedDate = signedDate
        self.provenance = provenance
        self.isUpgraded = isUpgraded
    }
}

public struct TransactionSubmitted: Equatable, Sendable {
    public var kind: SubmissionKind
    /// The authenticated account; nil for reconciliation, which speaks for no account.
    public var account: AccountID?
    public var lineage: LineageKey
    public var transaction: TransactionFacts

    public init(kind: SubmissionKind, account: AccountID?, lineage: LineageKey, transaction: TransactionFacts) {
        self.kind = kind
        self.account = account
        self.lineage = lineage
        self.transaction = transaction
    }
}

public struct NotificationReceived: Equatable, Sendable {
    public var notificationType: String
    public var subtype: String?
    public var signedDate: Timestamp
    /// The lineage and transaction the notification speaks of, when it carries one.
    public var lineage: LineageKey?
    public var transaction: TransactionFacts?

    public init(
        notificationType: String, subtype: String?, signedDate: Timestamp, lineage: LineageKey?, transaction: TransactionFacts?
    ) {
        self.notificationType = notificationType
        self.subtype = subtype
        self.signedDate = signedDate
        self.lineage = lineage
        self.transaction = transaction
    }
}

public struct EntitlementGranted: Equatable, Sendable {
    public var lineage: LineageKey
    public var account: AccountID
    public var productId: String
    /// nil: does not expire.
    public var expiresAt: Timestamp?
    /// The purchase date of the transaction whose period the grant gives (``Entitlement/purchasedAt``);
    /// nil in a grant recorded before the ledger kept it.
    public var purchasedAt: Timestamp?

    public init(lineage: LineageKey, account: AccountID, productId: String, expiresAt: Timestamp?, purchasedAt: Timestamp? = nil) {
        self.lineage = lineage
        self.account = account
        self.productId = productId
        self.expiresAt = expiresAt
        self.purchasedAt = purchasedAt
    }
}

public enum EntitlementEndReason: UInt8, Sendable {
    case expired = 1, accountDeleted = 2, transferred = 3

    public var name: String {
        switch self {
        case .expired: "expired"
        case .accountDeleted: "account-deleted"
        case .transferred: "transferred"
        }
    }
}

/// A support role.
public struct StaffRoles: OptionSet, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let operator_ = StaffRoles(rawValue: 1)
    public static let approver = StaffRoles(rawValue: 2)
    public static let administrator = StaffRoles(rawValue: 4)

    /// Comma-separated role names.
    public var names: [String] {
        var out: [String] = []
        if contains(.operator_) { out.append("operator") }
        if contains(.approver) { out.append("approver") }
        if contains(.administrator) { out.append("administrator") }
        return out
    }
}

public struct StaffEnrolled: Equatable, Sendable {
    public var staff: StaffID
    public var roles: StaffRoles
    /// Raw Ed25519 public key (32 bytes).
    public var publicKey: [UInt8]
    /// Pseudonym of the staff member's own customer account, if any: they may not be a transfer target.
    public var ownAccount: AccountID?
    /// The administrator who signed the enrolment (nil for the first administrator, set by `init`).
    public var enrolledBy: StaffID?
    /// Ed25519 signature of the administrator over ``signedMessage``.
    public var signature: [UInt8]
    /// The log's last sequence number when the change was first signed: it makes each change's signed
    /// bytes unique, so no signature can be replayed. nil for a change recorded in storage format 1,
    /// whose signed bytes had none (``signedMessage`` is then format 1's).
    public var signedAfter: UInt64?
    /// The second administrator, who signed the same ``signedMessage`` (nil: signed by one, as the
    /// bootstrap and format-1 history are).
    public var coSignedBy: StaffID?
    /// The second administrator's Ed25519 signature over ``signedMessage`` (empty without one).
    public var coSignature: [UInt8]

    public init(
        staff: StaffID, roles: StaffRoles, publicKey: [UInt8], ownAccount: AccountID?, enrolledBy: StaffID?,
        signature: [UInt8], signedAfter: UInt64? = nil, coSignedBy: StaffID? = nil, coSignature: [UInt8] = []
    ) {
        self.staff = staff
        self.roles = roles
        self.publicKey = publicKey
        self.ownAccount = ownAccount
        self.enrolledBy = enrolledBy
        self.signature = signature
        self.signedAfter = signedAfter
        self.coSignedBy = coSignedBy
        self.coSignature = coSignature
    }

    /// The bytes both administrators sign: the change's fields after a label, and ``signedAfter``
    /// (`…/v2`); a change recorded in storage format 1 keeps format 1's bytes (`…/v1`, no
    /// ``signedAfter``), so its signature still verifies.
    public var signedMessage: [UInt8] {
        var writer = ByteWriter()
        writer.string(signedAfter == nil ? "ownership-ledger/staff-enrolled/v1" : "ownership-ledger/staff-enrolled/v2")
        writer.string(staff)
        writer.u8(roles.rawValue)
        writer.bytes(publicKey)
        writer.optional(ownAccount) { $0.raw($1.bytes) }
        writer.optional(enrolledBy) { $0.string($1) }
        if let signedAfter { writer.u64(signedAfter) }
        return writer.output
    }
}

public struct StaffRemoved: Equatable, Sendable {
    public var staff: StaffID
    public var removedBy: StaffID
    public var signature: [UInt8]
    /// As ``StaffEnrolled/signedAfter``.
    public var signedAfter: UInt64?
    /// As ``StaffEnrolled/coSignedBy``.
    public var coSignedBy: StaffID?
    public var coSignature: [UInt8]

    public init(
        staff: StaffID, removedBy: StaffID, signature: [UInt8], signedAfter: UInt64? = nil, coSignedBy: StaffID? = nil,
        coSignature: [UInt8] = []
    ) {
        self.staff = staff
        self.removedBy = removedBy
        self.signature = signature
        self.signedAfter = signedAfter
        self.coSignedBy = coSignedBy
        self.coSignature = coSignature
    }

    /// The bytes both administrators sign (as ``StaffEnrolled/signedMessage``).
    public var signedMessage: [UInt8] {
        var writer = ByteWriter()
        writer.string(signedAfter == nil ? "ownership-ledger/staff-removed/v1" : "ownership-ledger/staff-removed/v2")
        writer.string(staff)
        writer.string(removedBy)
        if let signedAfter { writer.u64(signedAfter) }
        return writer.output
    }
}

/// A change of the support roster, as an administrator signs it.
public enum RosterChange: Equatable, Sendable {
    case enroll(StaffEnrolled)
    case remove(StaffRemoved)

    /// The staff member the change is about.
    public var staff: StaffID {
        switch self {
        case .enroll(let e): e.staff
        case .remove(let e): e.staff
        }
    }

    /// The administrator who signed it first (nil: the first administrator, set by `init`).
    public var signer: StaffID? {
        switch self {
        case .enroll(let e): e.enrolledBy
        case .remove(let e): e.removedBy
        }
    }

    public var signature: [UInt8] {
        switch self {
        case .enroll(let e): e.signature
        case .remove(let e): e.signature
        }
    }

    public var signedAfter: UInt64? {
        switch self {
        case .enroll(let e): e.signedAfter
        case .remove(let e): e.signedAfter
        }
    }

    public var coSignedBy: StaffID? {
        switch self {
        case .enroll(let e): e.coSignedBy
        case .remove(let e): e.coSignedBy
        }
    }

    public var coSignature: [UInt8] {
        switch self {
        case .enroll(let e): e.coSignature
        case .remove(let e): e.coSignature
        }
    }

    /// The bytes every administrator signing the change signs.
    public var signedMessage: [UInt8] {
        switch self {
        case .enroll(let e): e.signedMessage
        case .remove(let e): e.signedMessage
        }
    }

    /// The same change with the second administrator's signature.
    public func coSigned(by administrator: StaffID, signature: [UInt8]) -> RosterChange {
        switch self {
        case .enroll(var e):
            (e.coSignedBy, e.coSignature) = (administrator, signature)
            return .enroll(e)
        case .remove(var e):
            (e.coSignedBy, e.coSignature) = (administrator, signature)
            return .remove(e)
        }
    }

    /// The event that applies the change to the roster.
    public var event: LedgerEvent {
        switch self {
        case .enroll(let e): .staffEnrolled(e)
        case .remove(let e): .staffRemoved(e)
        }
    }

    /// The change an event applies, if it is a roster change.
    public init?(_ event: LedgerEvent) {
        switch event {
        case .staffEnrolled(let e): self = .enroll(e)
        case .staffRemoved(let e): self = .remove(e)
        default: return nil
        }
    }
}

/// Who owns the lineage when a transfer plan is made.
public enum PlanSource: Equatable, Sendable {
    case bound(AccountID)
    case tombstoned(AccountID)
}

/// The transfer plan both staff members sign. Its digest covers every field.
public struct TransferPlan: Equatable, Sendable {
    public var caseId: String
    public var lineage: LineageKey
    public var source: PlanSource
    public var target: AccountID
    /// The lineage's version (records of the lineage) when the plan was made; a later record makes it stale.
    public var lineageVersion: UInt64
    /// How the target account's owner was authenticated (for example "firebase-reauth+email-otp").
    public var targetAuthentication: String
    /// Corroborating store-ownership evidence (an Apple order id lookup reference or a digest).
    public var ownershipEvidence: String
    /// Private reason; shown to staff, never to customers.
    public var reason: String
    /// Bytes 16 to 31 of the lineage key of a plan signed in storage format 1 (which kept 32-byte
    /// lineage keys), so an upgraded plan still reproduces the digest its signers signed; nil for
    /// every plan made since.
    public var formatOneLineageSuffix: Key128?

    public init(
        caseId: String, lineage: LineageKey, source: PlanSource, target: AccountID, lineageVersion: UInt64,
        targetAuthentication: String, ownershipEvidence: String, reason: String, formatOneLineageSuffix: Key128? = nil
    ) {
        self.formatOneLineageSuffix = formatOneLineageSuffix
        self.caseId = caseId
        self.lineage = lineage
        self.source = source
        self.target = target
        self.lineageVersion = lineageVersion
        self.targetAuthentication = targetAuthentication
        self.ownershipEvidence = ownershipEvidence
        self.reason = reason
    }
}

public struct TransferRequested: Equatable, Sendable {
    public var plan: TransferPlan
    /// SHA-256 of ``TransferPlan/canonicalBytes``; what both staff members sign.
    public var planDigest: Digest32
    public var requestedBy: StaffID
    /// Ed25519 signature of the operator over the plan digest.
    public var signature: [UInt8]

    public init(plan: TransferPlan, planDigest: Digest32, requestedBy: StaffID, signature: [UInt8]) {
        self.plan = plan
        self.planDigest = planDigest
        self.requestedBy = requestedBy
        self.signature = signature
    }
}

public struct TransferApproved: Equatable, Sendable {
    public var caseId: String
    public var planDigest: Digest32
    public var approvedBy: StaffID
    public var signature: [UInt8]

    public init(caseId: String, planDigest: Digest32, approvedBy: StaffID, signature: [UInt8]) {
        self.caseId = caseId
        self.planDigest = planDigest
        self.approvedBy = approvedBy
        self.signature = signature
    }
}

public struct TransferApplied: Equatable, Sendable {
    public var caseId: String
    public var planDigest: Digest32
    public var lineage: LineageKey
    public var source: PlanSource
    public var target: AccountID
    /// The staff member who ran `--apply`.
    public var appliedBy: StaffID
    /// Ed25519 signature of ``appliedBy`` over ``signedMessage``; empty for a transfer applied in
    /// storage format 1, which recorded none.
    public var signature: [UInt8]

    public init(
        caseId: String, planDigest: Digest32, lineage: LineageKey, source: PlanSource, target: AccountID,
        appliedBy: StaffID, signature: [UInt8] = []
    ) {
        self.caseId = caseId
        self.planDigest = planDigest
        self.lineage = lineage
        self.source = source
        self.target = target
        self.appliedBy = appliedBy
        self.signature = signature
    }

    /// The bytes the applier signs: the case, the plan digest both other staff members signed (it
    /// covers the lineage, source and target) and the applier.
    public var signedMessage: [UInt8] { Self.signedMessage(caseId: caseId, planDigest: planDigest, appliedBy: appliedBy) }

    /// ``signedMessage`` of an apply not made yet.
    public static func signedMessage(caseId: String, planDigest: Digest32, appliedBy: StaffID) -> [UInt8] {
        var writer = ByteWriter()
        writer.string("ownership-ledger/transfer-applied/v1")
        writer.string(caseId)
        writer.digest(planDigest)
        writer.string(appliedBy)
        return writer.output
    }
}

public struct TransferRefused: Equatable, Sendable {
    public var caseId: String
    public var step: String
    public var staff: StaffID
    public var reason: String
    /// The lineage the refused step concerns (the request's, or the case's), so the refusal appears in
    /// that lineage's history; nil when none is known (a step of an unknown case, or format-1 history).
    public var lineage: LineageKey?

    public init(caseId: String, step: String, staff: StaffID, reason: String, lineage: LineageKey? = nil) {
        self.caseId = caseId
        self.step = step
        self.staff = staff
        self.reason = reason
        self.lineage = lineage
    }
}

public struct DecisionIssued: Equatable, Sendable {
    public var reason: DecisionReason
    public var lineage: LineageKey?
    public var account: AccountID?

    public init(reason: DecisionReason, lineage: LineageKey?, account: AccountID?) {
        self.reason = reason
        self.lineage = lineage
        self.account = account
    }
}

/// Where an upgraded store came from: the format it was written in, its record count, and the hash
/// chain head and RFC 6962 root (over its stored record bytes) of that log, so anyone holding the old
/// store or a checkpoint of it can prove the new store continues it.
public struct StoreUpgraded: Equatable, Sendable {
    public var fromFormat: UInt8
    public var records: UInt64
    public var headHash: Digest32
    public var merkleRoot: Digest32
    /// How many records the upgrade wrote after this one: records 2 through `copiedRecords + 1` are
    /// the old history re-encoded (made under format 1's rules: no apply signatures, one
    /// administrator per roster change).
    public var copiedRecords: UInt64

    public init(fromFormat: UInt8, records: UInt64, headHash: Digest32, merkleRoot: Digest32, copiedRecords: UInt64) {
        self.fromFormat = fromFormat
        self.records = records
        self.headHash = headHash
        self.merkleRoot = merkleRoot
        self.copiedRecords = copiedRecords
    }
}

extension LedgerEvent {
    /// The lineage this event names, if any.
    public var lineage: LineageKey? {
        switch self {
        case .transactionSubmitted(let e): e.lineage
        case .notificationReceived(let e): e.lineage
        case .accountDeletionRequested, .accountDeleted, .staffEnrolled, .staffRemoved: nil
        case .lineageBound(let lineage, _), .entitlementEnded(let lineage, _, _), .entitlementRevoked(let lineage, _, _),
            .entitlementReinstated(let lineage, _), .lineageTombstoned(let lineage, _):
            lineage
        case .entitlementGranted(let e): e.lineage
        case .transferRequested(let e): e.plan.lineage
        case .transferRefused(let e): e.lineage
        case .transferApproved, .storeUpgraded, .rosterChangeProposed: nil
        case .transferApplied(let e): e.lineage
        case .decisionIssued(let e): e.lineage
        }
    }

    /// The accounts this event names.
    public var accounts: [AccountID] {
        switch self {
        case .transactionSubmitted(let e): e.account.map { [$0] } ?? []
        case .notificationReceived: []
        case .accountDeletionRequested(let account), .accountDeleted(let account): [account]
        case .lineageBound(_, let account), .entitlementEnded(_, let account, _), .entitlementRevoked(_, let account, _),
            .entitlementReinstated(_, let account), .lineageTombstoned(_, let account):
            [account]
        case .entitlementGranted(let e): [e.account]
        case .staffEnrolled(let e): e.ownAccount.map { [$0] } ?? []
        case .rosterChangeProposed(.enroll(let e)): e.ownAccount.map { [$0] } ?? []
        case .staffRemoved, .transferApproved, .transferRefused, .storeUpgraded, .rosterChangeProposed(.remove): []
        case .transferRequested(let e): [e.plan.source.account, e.plan.target]
        case .transferApplied(let e): [e.source.account, e.target]
        case .decisionIssued(let e): e.account.map { [$0] } ?? []
        }
    }

    /// A short stable name for logs and JSON (`transaction-submitted`, …).
    public var name: String {
        switch self {
        case .transactionSubmitted: "transaction-submitted"
        case .notificationReceived: "notification-received"
        case .accountDeletionRequested: "account-deletion-requested"
        case .lineageBound: "lineage-bound"
        case .entitlementGranted: "entitlement-granted"
        case .entitlementEnded: "entitlement-ended"
        case .entitlementRevoked: "entitlement-revoked"
        case .entitlementReinstated: "entitlement-reinstated"
        case .lineageTombstoned: "lineage-tombstoned"
        case .accountDeleted: "account-deleted"
        case .staffEnrolled: "staff-enrolled"
        case .staffRemoved: "staff-removed"
        case .rosterChangeProposed: "roster-change-proposed"
        case .transferRequested: "transfer-requested"
        case .transferApproved: "transfer-approved"
        case .transferApplied: "transfer-applied"
        case .transferRefused: "transfer-refused"
        case .decisionIssued: "decision-issued"
        case .storeUpgraded: "store-upgraded"
        }
    }
}

extension PlanSource {
    public var account: AccountID {
        switch self {
        case .bound(let account), .tombstoned(let account): account
        }
    }
}
