public import LedgerCore

/// One entry of the trusted audit trail.
public struct AuditEntry: Equatable, Sendable {
    public var sequence: UInt64
    public var time: Timestamp
    /// `denial`, `family-sharing-rejected`, `account-deleted`, `lineage-tombstoned`, `staff-enrolled`,
    /// `staff-removed`, `roster-change-proposed`, `transfer-requested`, `transfer-approved`,
    /// `transfer-applied`, `transfer-refused`.
    public var kind: String
    public var lineage: LineageKey?
    public var account: AccountID?
    public var staff: StaffID?
    public var caseId: String?
    /// The reason, in words (for support transfers, the private case reason).
    public var reason: String

    public init(
        sequence: UInt64, time: Timestamp, kind: String, lineage: LineageKey? = nil, account: AccountID? = nil, staff: StaffID? = nil,
        caseId: String? = nil, reason: String
    ) {
        self.sequence = sequence
        self.time = time
        self.kind = kind
        self.lineage = lineage
        self.account = account
        self.staff = staff
        self.caseId = caseId
        self.reason = reason
    }
}

/// The audit trail: every denial, deletion, Family Sharing rejection and support action, with
/// time and reason.
public enum AuditTrail {
    public static let version: UInt32 = 1

    /// Appends the audit entries `record` produces, if any.
    public static func evolve(_ trail: inout [AuditEntry], _ record: Record) {
        for event in record.events { evolve(&trail, event, sequence: record.sequence, time: record.recordedAt) }
    }

    /// Appends the audit entry `event` (of the record at `sequence`, recorded at `time`) produces, if any.
    public static func evolve(_ trail: inout [AuditEntry], _ event: LedgerEvent, sequence: UInt64, time: Timestamp) {
        func add(
            _ kind: String, lineage: LineageKey? = nil, account: AccountID? = nil, staff: StaffID? = nil, caseId: String? = nil, _ reason: String
        ) {
            trail.append(
                AuditEntry(
                    sequence: sequence, time: time, kind: kind, lineage: lineage, account: account,
                    staff: staff, caseId: caseId, reason: reason))
        }
        switch event {
        case .decisionIssued(let d) where d.reason == .familyShared:
            add("family-sharing-rejected", lineage: d.lineage, account: d.account, d.reason.message)
        case .decisionIssued(let d) where d.reason.outcome == .denied:
            add("denial", lineage: d.lineage, account: d.account, "\(d.reason.code): \(d.reason.message)")
        case .accountDeleted(let account):
            add("account-deleted", account: account, "account deleted; identity mapping erased")
        case .lineageTombstoned(let lineage, let account):
            add("lineage-tombstoned", lineage: lineage, account: account, "owner deleted; binding kept as a tombstone")
        case .staffEnrolled(let e):
            add(
                "staff-enrolled", staff: e.staff,
                "roles \(e.roles.names.joined(separator: ",")) by \(e.enrolledBy ?? "init")\(coSigned(e.coSignedBy))")
        case .staffRemoved(let e):
            add("staff-removed", staff: e.staff, "removed by \(e.removedBy)\(coSigned(e.coSignedBy))")
        case .rosterChangeProposed(.enroll(let e)):
            add(
                "roster-change-proposed", staff: e.staff,
                "enrolment with roles \(e.roles.names.joined(separator: ",")) signed by \(e.enrolledBy ?? "?"); awaits a second administrator")
        case .rosterChangeProposed(.remove(let e)):
            add("roster-change-proposed", staff: e.staff, "removal signed by \(e.removedBy); awaits a second administrator")
        case .transferRequested(let e):
            add("transfer-requested", lineage: e.plan.lineage, account: e.plan.target, staff: e.requestedBy, caseId: e.plan.caseId, e.plan.reason)
        case .transferApproved(let e):
            add("transfer-approved", staff: e.approvedBy, caseId: e.caseId, "approved plan \(e.planDigest.hex)")
        case .transferApplied(let e):
            add(
                "transfer-applied", lineage: e.lineage, account: e.target, staff: e.appliedBy, caseId: e.caseId,
                "rebound from \(e.source.account) to \(e.target); no entitlement granted")
        case .transferRefused(let e):
            add("transfer-refused", lineage: e.lineage, staff: e.staff, caseId: e.caseId, "\(e.step): \(e.reason)")
        case .transactionSubmitted, .notificationReceived, .accountDeletionRequested, .lineageBound, .entitlementGranted,
            .entitlementEnded, .entitlementRevoked, .entitlementReinstated, .decisionIssued, .storeUpgraded:
            break
        }
    }

    private static func coSigned(_ administrator: StaffID?) -> String { administrator.map { ", co-signed by \($0)" } ?? "" }
}
